"""A training job in one process: every rank's program, every NIC's traffic.

``config`` (the job's configuration, ``python -m traffic job --config FILE``),
``program`` (the ranks' programs op by op, pure), ``coll`` (the network part of
one collective instance or send/recv pair), ``nic`` (one NIC: sockets, QPs,
send queues, pacing, the receive path), ``job`` (the process: its event loop).
docs/job-engine.md describes the model.

May import: the standard library, ``traffic.roce``, ``traffic.nic`` and
``traffic.ranks`` (schedules, the barrier, rank configuration keys, the report).
"""
