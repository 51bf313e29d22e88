"""RoCEv2 traffic engine: frames, paced sender, accounting receiver, collectives.

Usable on its own inside any network namespace (``python -m traffic ...``);
the emulator starts the same commands in Mininet hosts.

- ``frames``: RoCEv2 frame templates (scapy once) patched per packet.
- ``pacing``: token bucket on an injected monotonic clock (pure).
- ``sender``: paced AF_PACKET sender (sendmmsg batches).
- ``accounting``: per-flow loss/dup/reorder/disruption accounting (pure).
- ``receiver``: AF_PACKET receiver feeding the accounting.
- ``collectives``: ring/alltoall/broadcast schedules (pure); ``rank``: per-host
  process; ``outbound``: a NIC's RDMA WRITE packets (shared by rank and job).
- ``job``: a training job's ranks and collectives over every NIC in one process
  (``job_config``, ``job_program`` (pure), ``job_coll``, ``job_nic``;
  docs/job-engine.md).
- ``report``: nccl-tests style table; ``iperf``: iperf3 background traffic.
"""
