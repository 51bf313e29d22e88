"""RoCEv2 traffic engine: frames, transports, NICs, collectives' ranks and training jobs.

Usable on its own inside any network namespace (``python -m traffic ...``);
the emulator starts the same commands in Mininet hosts.  Its rooms, lowest first:

- ``roce``: what goes on the wire and the transport's state machines: frame
  templates (scapy once, patched per packet), ACK/NAK/CNP frames, the RC
  transport, a rank's QPs, DCQCN and TIMELY (pure where they can be);
- ``nic``: a sending or receiving NIC in a namespace: path entropy, pacing,
  send queues, the RDMA WRITE packets it sends, the AF_PACKET sender and
  receiver, per-flow accounting, sockets in other namespaces;
- ``ranks``: the process-per-rank engine of collectives (``python -m traffic
  rank``): schedules, the start barrier, one rank, the nccl-tests report;
- ``jobs``: a training job's ranks and collectives over every NIC in one
  process (``python -m traffic job``; docs/job-engine.md).

Top level: ``engine`` (one process sending and receiving a whole fabric's
flows), ``plan`` (its plan's keys), ``mix`` (a multi-flow mix), ``iperf``
(iperf3 background flows) and the command line.

May import: the standard library, scapy, and its own rooms (a room imports
the rooms above it in this list, never one below).
"""
