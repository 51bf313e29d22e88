"""The fabric on Linux and Open vSwitch: build it, run it, break it, tear it down.

``session.Session`` owns one running fabric: the controller process, the
namespaces, veths, shapers and bridges (``net``, ``shaping``, ``datapath``),
reachability (``reach``), and their undo in ``finally`` (``runstate``,
``cleanup``).  ``faults`` injects failures; ``counters`` reads every drop
counter and CPU clock a fidelity verdict needs; ``logs`` reads what went
wrong.  ``system`` is the one way into Linux and Open vSwitch: child
processes, netlink, tc, ovs-vsctl/ofctl/appctl, nft, and the signals around
them; no other module starts a process or opens a netlink socket itself.

May import: ``emulator.errors``, ``emulator.fabric``, the ``traffic``
package (sockets inside namespaces).  Never ``experiments`` or ``report``.
"""
