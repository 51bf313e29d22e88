"""Looking at a running fabric without disturbing it.

``counters`` (every drop counter and CPU clock a fidelity verdict needs),
``telemetry`` (a Prometheus endpoint), ``capture`` (bounded pcaps per
interface), ``logs`` (what the controller's and Open vSwitch's logs say
went wrong) and ``reach`` (all-pairs ICMP reachability).

May import: ``dataplane.system``, ``dataplane.links``, ``dataplane.ovs``,
``emulator.errors``, ``emulator.fabric``, ``traffic.nic.netns``.
"""
