"""The lossless fabric and ECN: PFC accounting and pauses, ECN marking.

``pfc`` (traffic classes, the pause gate, the accounting programs' wiring),
``pfc_agent`` (the pause model's own process), ``pfc_run`` (a run's PFC on
every link end and its counters), ``ecn`` (marking at enqueue with
nftables) and ``ecnq`` (marking at dequeue in eBPF).  The eBPF programs
themselves are C sources in ``dataplane.bpf``.

May import: ``dataplane.bpf``, ``dataplane.links``, ``dataplane.ovs``,
``dataplane.system``, ``emulator.errors``, ``emulator.fabric``, ``traffic``
(frame sizes, namespaces).
"""
