"""Looking at a running fabric without disturbing it.

``counters`` (every drop counter and CPU clock a fidelity verdict needs),
``telemetry`` (a Prometheus endpoint), ``capture`` (bounded pcaps per
interface), ``logs`` (what the controller's and Open vSwitch's logs say
went wrong), ``reach`` (all-pairs ICMP reachability) and ``flows`` (each
link's RoCEv2 bytes per source and destination, counted by an eBPF program).

May import: ``dataplane.system``, ``dataplane.links``, ``dataplane.ovs``,
``dataplane.bpf`` and ``dataplane.lossless`` (flows' program and detach),
``emulator.errors``, ``emulator.fabric``, ``traffic.nic.netns``.
"""
