"""Netlink (pyroute2): links, addresses, routes and qdiscs in any network namespace.

A ``Netlink`` is one rtnetlink socket made inside a namespace, named by a
path (``/proc/<pid>/ns/net`` of a host's shell or a datapath instance's
holder, ``netns_of``; None: this thread's).  A socket stays in the namespace
it was made in, so one thread serves every namespace of a fabric without a
helper process (``ns_sockets`` keeps one per namespace).

Every call holds the run's signals (``signals_masked``) and a Ctrl-C that
arrives meanwhile is raised as KeyboardInterrupt once the call is done:
pyroute2 runs each request in an event loop, and an interrupt raised inside
it comes out as "Event loop stopped before Future completed" (a soak
interrupted during a switch's recovery exited 1, not 130).  A caller whose
change spans several calls (a cut's ends) holds the signals over all of them.

``route_get`` asks ``ip`` (the kernel's answer as JSON, as a server's worker
and the run both read it).
"""

import json
from contextlib import contextmanager

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.tcmsg import plugins as tc_plugins

from emulator.dataplane.system.proc import run
from emulator.dataplane.system.signals import signals_masked
from traffic.nic.netns import entered

__all__ = ["Netlink", "NetlinkError", "netns_of", "ns_sockets", "delete_link",
           "route_get", "ENODEV"]

ENODEV = 19            # NetlinkError.code: no such device (e.g. its veth peer went first)


# pyroute2 knows pfifo; bfifo takes the same options (struct tc_fifo_qopt, its limit
# in bytes): a byte FIFO under an HTB class (links.shaping.add_cnp_band)
tc_plugins.setdefault("bfifo", tc_plugins["pfifo"])


def netns_of(pid):
    """The path of process ``pid``'s network namespace."""
    return f"/proc/{pid}/ns/net"


class Netlink:
    """An rtnetlink socket made inside ``netns`` (a path; None: this thread's)."""

    def __init__(self, netns=None):
        with signals_masked(), entered(netns):
            self._ipr = IPRoute()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        with signals_masked():
            self._ipr.close()

    @staticmethod
    def _held(call, *args, **kwargs):
        with signals_masked():
            return call(*args, **kwargs)

    # ----- changes (pyroute2's verbs and arguments) --------------------------

    def link(self, *args, **kwargs):
        """``link('add'|'set'|'del', ...)``: e.g. ``link('set', index=i, state='up')``."""
        return self._held(self._ipr.link, *args, **kwargs)

    def addr(self, *args, **kwargs):
        return self._held(self._ipr.addr, *args, **kwargs)

    def route(self, *args, **kwargs):
        return self._held(self._ipr.route, *args, **kwargs)

    def rule(self, *args, **kwargs):
        """``rule('add', src=..., src_len=32, table=N, priority=N)``: policy routing."""
        return self._held(self._ipr.rule, *args, **kwargs)

    def tc(self, *args, **kwargs):
        """``tc('add', 'tbf', index=i, ...)``, ``tc('add-class', 'htb', ...)``, ..."""
        return self._held(self._ipr.tc, *args, **kwargs)

    def set_state(self, index, state):
        """Interface ``index`` administratively ``'up'`` or ``'down'``."""
        return self.link("set", index=index, state=state)

    # ----- lookups ----------------------------------------------------------

    def link_lookup(self, *args, **kwargs):
        """[index] of the interfaces that match (``ifname=...``)."""
        return self._held(self._ipr.link_lookup, *args, **kwargs)

    def index(self, ifname):
        """Interface ``ifname``'s index, or None if there is none."""
        found = self.link_lookup(ifname=ifname)
        return found[0] if found else None

    def get_links(self, *args, **kwargs):
        return self._held(self._ipr.get_links, *args, **kwargs)

    def get_qdiscs(self, *args, **kwargs):
        return self._held(self._ipr.get_qdiscs, *args, **kwargs)

    def interfaces(self):
        """[(name, group, index)] of every interface of the namespace."""
        return [(link.get_attr("IFLA_IFNAME"), link.get_attr("IFLA_GROUP"), link["index"])
                for link in self.get_links()]


@contextmanager
def ns_sockets():
    """``get(netns path or None)``: one ``Netlink`` per network namespace, each made
    inside its namespace, all closed after."""
    socks = {}

    def get(ns):
        if ns not in socks:
            socks[ns] = Netlink(ns)
        return socks[ns]
    try:
        yield get
    finally:
        for sock in socks.values():
            sock.close()


def delete_link(name, netns=None):
    """Remove interface ``name`` if it is there; True if it was (NetlinkError if the
    kernel refuses)."""
    with Netlink(netns) as nl:
        idx = nl.index(name)
        if idx is None:
            return False
        nl.link("del", index=idx)
        return True


def route_get(toward, timeout=10, netns=None, **flow):
    """The kernel's routes toward address ``toward`` (``ip -j route get``: a list
    of {dst, dev, prefsrc, ...}); RunFailed if there is none.  ``netns``: in that
    namespace; ``flow``: the rest of the lookup's key, as ``ip route get`` names it
    (``from_``, ``iif``, ``ipproto``, ``sport``, ``dport``): with them the kernel
    hashes the five-tuple a multipath route would (an input lookup when ``iif``
    is given)."""
    argv = ["ip", "-j", "route", "get", toward]
    for key in ("from_", "iif", "ipproto", "sport", "dport"):
        if flow.get(key) is not None:
            argv += [key.rstrip("_"), str(flow[key])]
    if netns:
        argv = ["nsenter", f"--net={netns}", *argv]
    return json.loads(run(argv, timeout=timeout))
