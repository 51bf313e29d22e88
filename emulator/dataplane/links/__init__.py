"""The emulated links: interfaces, rates, impairments, and how a cut is noticed.

``ifaces`` (offloads, sysctls, netns sockets, teardown of veths),
``shaping`` (TBF at the link rate, queue limits, qdisc statistics; raw
netlink replies through ``system.nlmsg``), ``impair`` (the fabric file's loss, delay
and state), ``nftrules`` (gray loss and corruption), ``detect`` (modeled
loss-of-signal delay) and ``bfd`` (Open vSwitch's BFD on switch links).

May import: ``dataplane.runstate``, ``dataplane.ovs``, ``dataplane.system``,
``emulator.errors``, ``emulator.fabric``, ``traffic.nic.netns``.  Never the
session, the lossless fabric or the servers' machinery.
"""
