"""Route, next-hop and link events of network namespaces, stamped as they are read.

One rtnetlink socket per namespace (made inside it), subscribed to the IPv4
route, link and next-hop groups (``RTNLGRP_NEXTHOP`` is group 32: joined with
``NETLINK_ADD_MEMBERSHIP``, past the bind mask), then a dump of the links,
next-hop objects and IPv4 routes of the main table as the starting state.
One thread reads every socket as it becomes readable and stamps each message
with CLOCK_MONOTONIC (netlink messages carry no time of their own), the clock
the fault injector and the traffic engine use.  pyroute2 (0.9) has no parser
for next-hop messages, so the few structures needed are decoded here
(linux/rtnetlink.h, linux/nexthop.h, linux/if_link.h).

Events are plain dicts, the form ``fabric.routing.fib`` replays:

    {"kind": "link", "dev", "up"}                          up: IFF_RUNNING
    {"kind": "nexthop", "op": "new"|"del", "id", "dev", "group", "blackhole"}
    {"kind": "route", "op": "new"|"del", "dst", "nhid", "devs", "type"}

each with ``"t_ns"`` and ``"switch"`` (the name the namespace was given).
"""

import ipaddress
import selectors
import socket
import struct
import threading
import time

from emulator.dataplane.system.nlmsg import NLMSG, NLMSG_DONE, NLMSG_ERROR, RTA, attrs, messages
from emulator.dataplane.system.signals import signals_masked
from traffic.nic.netns import entered

IFINFO = struct.Struct("=BxHiII")
RTMSG = struct.Struct("=BBBBBBBBI")
NHMSG = struct.Struct("=BBBBI")
RTNH = struct.Struct("=HBBi")
NH_GRP = struct.Struct("=IBBH")
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
RTM_NEWNEXTHOP, RTM_DELNEXTHOP, RTM_GETNEXTHOP = 104, 105, 106
RTMGRP_LINK, RTMGRP_IPV4_ROUTE = 0x1, 0x40
RTNLGRP_NEXTHOP = 32
SOL_NETLINK, NETLINK_ADD_MEMBERSHIP = 270, 1
IFLA_IFNAME = 3
RTA_DST, RTA_OIF, RTA_MULTIPATH, RTA_TABLE, RTA_NH_ID = 1, 4, 9, 15, 30
NHA_ID, NHA_GROUP, NHA_BLACKHOLE, NHA_OIF = 1, 2, 4, 5
IFF_RUNNING = 0x40
RTNH_F_DEAD, RTNH_F_LINKDOWN = 0x1, 0x10
RTNH_UNUSED = RTNH_F_DEAD | RTNH_F_LINKDOWN      # with ignore_routes_with_linkdown=1
RT_TABLE_MAIN = 254
RTN_TYPES = {1: "unicast", 2: "local", 3: "broadcast", 6: "blackhole", 7: "unreachable",
             8: "prohibit"}
RCVBUF = 4 << 20


def decode(buf, names):
    """The events in one read of an rtnetlink socket (``names``: {ifindex: name}, kept
    up to date from link messages).  Anything else is skipped."""
    out = []
    for mtype, body, end in messages(buf):
        if mtype in (RTM_NEWLINK, RTM_DELLINK):
            _, _, index, flags, _ = IFINFO.unpack_from(buf, body)
            for kind, a, b in attrs(buf, body + IFINFO.size, end):
                if kind == IFLA_IFNAME:
                    names[index] = buf[a:b].split(b"\0")[0].decode()
            out.append({"kind": "link", "dev": names.get(index, str(index)),
                        "up": mtype == RTM_NEWLINK and bool(flags & IFF_RUNNING)})
        elif mtype in (RTM_NEWROUTE, RTM_DELROUTE):
            family, dst_len, _, _, table, _, _, rtype, _ = RTMSG.unpack_from(buf, body)
            if family != socket.AF_INET:
                continue
            dst, nhid, devs = "0.0.0.0", None, []
            for kind, a, b in attrs(buf, body + RTMSG.size, end):
                if kind == RTA_DST:
                    dst = socket.inet_ntoa(buf[a:a + 4])
                elif kind == RTA_TABLE:
                    table = struct.unpack_from("=I", buf, a)[0]
                elif kind == RTA_NH_ID:
                    nhid = struct.unpack_from("=I", buf, a)[0]
                elif kind == RTA_OIF:
                    devs.append(names.get(struct.unpack_from("=i", buf, a)[0]))
                elif kind == RTA_MULTIPATH:
                    off = a
                    while off + RTNH.size <= b:
                        length, flags, _, index = RTNH.unpack_from(buf, off)
                        if length < RTNH.size:
                            break
                        if not flags & RTNH_UNUSED:      # dead, or its carrier lost
                            devs.append(names.get(index, str(index)))
                        off += (length + 3) & ~3
            if table != RT_TABLE_MAIN:
                continue
            out.append({"kind": "route", "op": "new" if mtype == RTM_NEWROUTE else "del",
                        "dst": str(ipaddress.ip_network(f"{dst}/{dst_len}", strict=False)),
                        "nhid": nhid, "devs": devs, "type": RTN_TYPES.get(rtype, str(rtype))})
        elif mtype in (RTM_NEWNEXTHOP, RTM_DELNEXTHOP):
            ev = {"kind": "nexthop", "op": "new" if mtype == RTM_NEWNEXTHOP else "del",
                  "id": None, "dev": None, "group": [], "blackhole": False}
            for kind, a, b in attrs(buf, body + NHMSG.size, end):
                if kind == NHA_ID:
                    ev["id"] = struct.unpack_from("=I", buf, a)[0]
                elif kind == NHA_OIF:
                    ev["dev"] = names.get(struct.unpack_from("=i", buf, a)[0])
                elif kind == NHA_GROUP:
                    ev["group"] = [NH_GRP.unpack_from(buf, o)[0]
                                   for o in range(a, b - NH_GRP.size + 1, NH_GRP.size)]
                elif kind == NHA_BLACKHOLE:
                    ev["blackhole"] = True
            if ev["id"] is not None:
                out.append(ev)
    return out


def _request(mtype, body, seq):
    return NLMSG.pack(NLMSG.size + len(body), mtype, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def dump(netns, names):
    """[events] of the links, next-hop objects and IPv4 routes of namespace ``netns``
    now (links first, so interface names are known)."""
    out = []
    with signals_masked(), entered(netns):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    try:
        sock.bind((0, 0))
        requests = ((RTM_GETLINK, IFINFO.pack(0, 0, 0, 0, 0)),
                    (RTM_GETNEXTHOP, NHMSG.pack(0, 0, 0, 0, 0)),
                    (RTM_GETROUTE, RTMSG.pack(socket.AF_INET, 0, 0, 0, 0, 0, 0, 0, 0)))
        for seq, (mtype, body) in enumerate(requests, start=1):
            sock.send(_request(mtype, body, seq))
            done = False
            while not done:
                buf = sock.recv(1 << 20)
                for t, body_off, _ in messages(buf):
                    if t in (NLMSG_DONE, NLMSG_ERROR):
                        done = True
                out += decode(buf, names)
    finally:
        sock.close()
    return out


class FibMonitor:
    """The events of every namespace of ``spaces`` ({name: netns path}) from ``start``
    on, with the state each started from (``initial``)."""

    def __init__(self, spaces, clock=time.monotonic_ns):
        self.spaces = dict(spaces)
        self.clock = clock
        self.initial = {}             # name -> [events of the dump]
        self._events = []
        self._lock = threading.Lock()
        self._socks = {}
        self._names = {}
        self._thread = None
        self._stop = False
        self.errors = []
        self.started_ns = None

    def start(self):
        self.started_ns = self.clock()
        for name, netns in self.spaces.items():
            with signals_masked(), entered(netns):
                sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
            sock.bind((0, RTMGRP_LINK | RTMGRP_IPV4_ROUTE))
            sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, RTNLGRP_NEXTHOP)
            sock.setblocking(False)
            self._socks[name] = sock
            self._names[name] = {}
            t0 = self.clock()
            self.initial[name] = [dict(ev, t_ns=t0, switch=name)
                                  for ev in dump(netns, self._names[name])]
        self._thread = threading.Thread(target=self._run, name="fib-monitor", daemon=True)
        self._thread.start()
        return self

    def _run(self):
        sel = selectors.DefaultSelector()
        for name, sock in self._socks.items():
            sel.register(sock, selectors.EVENT_READ, name)
        try:
            while not self._stop:
                for key, _ in sel.select(0.1):
                    name = key.data
                    while True:
                        try:
                            buf = key.fileobj.recv(1 << 20)
                        except BlockingIOError:
                            break
                        except OSError as e:          # ENOBUFS: events were lost
                            self.errors.append(f"{name}: {e}")
                            break
                        t = self.clock()
                        evs = [dict(ev, t_ns=t, switch=name)
                               for ev in decode(buf, self._names[name])]
                        with self._lock:
                            self._events += evs
        finally:
            sel.close()

    def events(self, since_ns=0):
        """The events read so far (stamped at or after ``since_ns``), in order."""
        with self._lock:
            return [ev for ev in self._events if ev["t_ns"] >= since_ns]

    def stop(self):
        self._stop = True
        if self._thread is not None:
            self._thread.join(timeout=5)
        for sock in self._socks.values():
            sock.close()
        self._socks.clear()


RTA_SRC, RTA_IIF, RTA_GATEWAY = 2, 3, 5
RTA_IP_PROTO, RTA_SPORT, RTA_DPORT = 27, 28, 29


def _rta(kind, payload):
    length = RTA.size + len(payload)
    return RTA.pack(length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


class RouteLookup:
    """The kernel's route for one flow in one namespace (RTM_GETROUTE with the flow's
    five-tuple, as ``ip route get ... ipproto udp sport S dport D`` asks: with a
    multipath route the kernel hashes the tuple as it would the packet's; with
    ``iif`` it is the lookup of a packet arriving by that interface)."""

    def __init__(self, netns):
        with signals_masked(), entered(netns):
            self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self._sock.bind((0, 0))
        self._sock.settimeout(5)
        self.names = {}
        dump(netns, self.names)
        self.index = {name: i for i, name in self.names.items()}
        self._seq = 0

    def get(self, dst, src=None, iif=None, proto=17, sport=None, dport=None):
        """{"dev", "gateway"} of the route a packet of that flow takes; None if the
        kernel has none (unreachable, blackhole)."""
        self._seq += 1
        request = _rta(RTA_DST, socket.inet_aton(dst))
        if src is not None:
            request += _rta(RTA_SRC, socket.inet_aton(src))
        if iif is not None:
            request += _rta(RTA_IIF, struct.pack("=I", self.index[iif]))
        request += _rta(RTA_IP_PROTO, struct.pack("=B", proto))
        if sport is not None:
            request += _rta(RTA_SPORT, struct.pack("!H", sport))
        if dport is not None:
            request += _rta(RTA_DPORT, struct.pack("!H", dport))
        body = RTMSG.pack(socket.AF_INET, 32, 32 if src else 0, 0, 0, 0, 0, 0, 0) + request
        self._sock.send(NLMSG.pack(NLMSG.size + len(body), RTM_GETROUTE, NLM_F_REQUEST,
                                   self._seq, 0) + body)
        buf = self._sock.recv(1 << 16)
        for mtype, off, end in messages(buf):
            if mtype == NLMSG_ERROR:
                return None
            if mtype == RTM_NEWROUTE:
                gateway = None
                for kind, a, _ in attrs(buf, off + RTMSG.size, end):
                    if kind == RTA_GATEWAY:
                        gateway = socket.inet_ntoa(buf[a:a + 4])
                ev = decode(buf, self.names)
                devs = ev[0]["devs"] if ev else []
                return {"dev": devs[0] if devs else None, "gateway": gateway}
        return None

    def close(self):
        self._sock.close()
