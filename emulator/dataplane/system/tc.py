"""``tc``, the traffic-control tool, for what netlink here does not make: netem.

The shapers themselves (TBF, HTB classes, the lossless gate, clsact and the
eBPF filters) are netlink requests (``netlink.Netlink.tc``).  netem is asked
for by ``tc``: whether this kernel has it (``netem_missing``) and a netem
qdisc under a link's shaper (``add_netem``).
"""

from emulator.dataplane.system.netlink import Netlink
from emulator.dataplane.system.proc import attempt, in_netns
from emulator.errors import RunFailed

PROBE = ("flnetemprb0", "flnetemprb1")     # a veth pair made and removed at once


def qdisc(netns, *args, timeout=10):
    """``tc qdisc ARGS`` in namespace ``netns``: its ``Completed`` (status unchecked)."""
    return attempt(in_netns(netns, ["tc", "qdisc", *args]), timeout=timeout)


def netem_missing():
    """None if this kernel has the netem qdisc, else why not (tc's message)."""
    a, b = PROBE
    with Netlink() as nl:
        nl.link("add", ifname=a, kind="veth", peer=b)
        try:
            done = qdisc(None, "add", "dev", a, "root", "netem", "delay", "1ms")
        finally:
            nl.link("del", index=nl.index(a))
    return None if done.returncode == 0 else done.stderr.strip()


def add_netem(netns, ifname, args, parent="1:1", handle="10:"):
    """netem with ``args`` (``delay 5000us 1000us``) as the child ``parent`` of the
    interface's root qdisc; RunFailed with tc's message if refused."""
    done = qdisc(netns, "add", "dev", ifname, "parent", parent, "handle", handle, "netem",
                 *args)
    if done.returncode != 0:
        raise RunFailed(f"netem on {ifname}: {done.stderr.strip()}")
