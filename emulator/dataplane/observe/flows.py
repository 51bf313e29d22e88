"""Per-flow counters on the fabric's links: whose RoCEv2 bytes crossed each link.

Model.  A switch port's interface counters say how many bytes left it, not
whose.  ``FlowCounters`` puts a tc ingress program (``dataplane/bpf/flows.bpf.c``)
on the far end of every inter-switch link, which counts every RoCEv2 frame
that crossed the link under (link, IPv4 source, IPv4 destination), its data
frames and its control frames (ACK/NAK, CNP) apart: what a switch's per-port
flow counters (sFlow, IPFIX) would report.  Counting where a frame arrives
counts what the link carried, after its queue's drops, whichever way the
switch chose to send it (ECMP's hash, adaptive routing's flowlets, sprayed
packets alike).  The program passes every frame on unchanged (the next tc
filter, if any, decides), and the ingress hook is no other feature's.

``read()`` gives {link 'a->b': {(source IP, destination IP): Count}}.  The
clsact qdisc is created where no other feature made one, and removed with
the filters in ``remove()`` (``with FlowCounters(...)``).
"""

import socket
import struct
from dataclasses import dataclass

from emulator.dataplane import bpf
from emulator.dataplane.bpf.maps import MAP_HASH
from emulator.dataplane.lossless.ecnq import detach
from emulator.dataplane.system.netlink import NetlinkError, ns_sockets
from emulator.errors import EnvironmentProblem, RunFailed
from emulator.fabric.addressing import switch_intf

KEY = bpf.Layout("flow_key", [("link", "I"), ("saddr", "I"), ("daddr", "I")])
COUNT = bpf.Layout("flow_count", [("data_bytes", "Q"), ("data_frames", "Q"),
                                  ("control_bytes", "Q"), ("control_frames", "Q")])
CONFIG = bpf.Layout("flows_cfg", [("link", "Q")])
MAP = "flow_counts"
ENTRIES = 1 << 16                # (link, source, destination) triples counted at most
TC_INGRESS = 0xFFFFFFF2          # clsact's ingress parent (ffff:fff2)
HANDLE, PRIO = 7, 1


@dataclass(frozen=True)
class Count:
    data_bytes: int
    data_frames: int
    control_bytes: int
    control_frames: int


def switch_links(session):
    """[(link name 'a->b', (netns, ifname) of its far end)] of every inter-switch link
    direction of ``session``'s fabric."""
    by_name = {sw["name"]: sw for sw in session.topo["switches"]}
    out = []
    for sw in session.topo["switches"]:
        for p in sw["ports"]:
            if p["peer_kind"] == "host" or p["peer"] not in by_name:
                continue
            far = (session.net.switch_netns(p["peer"]),
                   switch_intf(by_name[p["peer"]]["bridge"], p["peer_port"]))
            out.append((f"{sw['name']}->{p['peer']}", far))
    return out


class FlowCounters:
    """The counting programs on ``links`` ([(name, (netns, ifname))]; see the module
    docstring); ``start`` attaches them, ``read`` reads, ``remove`` takes them off."""

    def __init__(self, links):
        self.links = list(links)
        self.map = None
        self.attached = []               # ("tc", ns, ifname): clsact made here
        self.filters = []                # (ns, ifname): a filter of ours

    @classmethod
    def for_session(cls, session):
        return cls(switch_links(session))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.remove()
        return False

    def start(self):
        self.map = bpf.Map(COUNT.size, ENTRIES, kind=MAP_HASH, key_size=KEY.size)
        try:
            with ns_sockets() as sock:
                for i, (_, (ns, ifname)) in enumerate(self.links):
                    ipr = sock(ns)
                    found = ipr.link_lookup(ifname=ifname)
                    if not found:
                        raise RunFailed(f"flow counters: no interface {ifname}")
                    with bpf.load("flows", CONFIG.pack_fields(link=i), CONFIG,
                                  {MAP: self.map}, value_layouts=[KEY, COUNT]) as fds:
                        try:
                            ipr.tc("add", "clsact", index=found[0])
                            self.attached.append(("tc", ns, ifname))
                        except NetlinkError as e:
                            if e.code != 17:         # EEXIST: another feature's clsact
                                raise
                        ipr.tc("add-filter", "bpf", index=found[0], handle=HANDLE,
                               fd=fds["flows_in"], name=f"flows{i}", parent=TC_INGRESS,
                               classid=1, direct_action=True, prio=PRIO)
                        self.filters.append((ns, ifname))
        except NetlinkError as e:
            self.remove()
            raise EnvironmentProblem(f"flow counters could not be attached ({e}): they "
                                     "need tc clsact with cls_bpf")
        except BaseException:
            self.remove()
            raise
        return self

    def read(self):
        """{link name: {(source IP, destination IP): Count}} counted so far."""
        out = {}
        for raw, value in self.map.items() if self.map is not None else ():
            link, saddr, daddr = KEY.unpack(raw)
            name = self.links[link][0]
            key = (socket.inet_ntoa(struct.pack("<I", saddr)),
                   socket.inet_ntoa(struct.pack("<I", daddr)))
            c = Count(*COUNT.unpack(value))
            prev = out.setdefault(name, {}).get(key)
            if prev is not None:             # two parallel links of one switch pair
                c = Count(*(a + b for a, b in zip(vars(prev).values(), vars(c).values())))
            out[name][key] = c
        return out

    def remove(self):
        """Take the filters off (and the clsact made here); returns the errors."""
        errors = []
        made = {(ns, ifname) for _, ns, ifname in self.attached}
        with ns_sockets() as sock:
            for ns, ifname in self.filters:
                if (ns, ifname) in made:
                    continue                 # its clsact goes, and the filter with it
                try:
                    ipr = sock(ns)
                    found = ipr.link_lookup(ifname=ifname)
                    if found:
                        ipr.tc("del-filter", "bpf", index=found[0], parent=TC_INGRESS,
                               prio=PRIO, handle=HANDLE)
                except Exception as e:       # its namespace or clsact went first
                    errors.append(f"{ifname}: {e}")
        errors += detach(self.attached)
        self.attached, self.filters = [], []
        if self.map is not None:
            self.map.close()
            self.map = None
        return errors
