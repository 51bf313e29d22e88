"""Link rates enforced with a TBF qdisc on the egress of both ends of a link.

TBF, not HTB: one qdisc per interface, its own byte-limited FIFO, and a
backlog that ``tc -s`` / netlink stats report per link (the egress queue of
an emulated switch port).  The queue is sized in time at the link rate
(``queue_ms``), as switch buffers are: a 40 Mbit/s link with 30 ms holds
150 kB.  netem is not used (this kernel lacks it).

With DCQCN a port also keeps a strict-priority band for CNPs (``cnp_band``),
as RoCE fabrics give CNPs a class of their own (NVIDIA's default: DSCP 48,
priority 6, strict): under the TBF, HTB 10: serves class 10:10 (CNPs: RoCEv2,
BTH opcode 0x81, matched by u32; a 64 kB byte FIFO) before 10:30 (everything
else: a byte FIFO of the TBF's own limit, the queue as before).  Without it a
CNP waits behind the data of every congested queue on its way back, and a
sender is cut again and again for congestion it has already answered.  The
TBF's counters still cover both bands.
"""

import socket
import struct

from emulator.dataplane.system.nlmsg import (  # noqa: F401
    NLMSG,
    NLMSG_DONE,
    NLMSG_ERROR,
    attrs,
    error_of,
    messages,
)
from emulator.fabric.units import ROCE_MTU, link_mtu  # noqa: F401 (re-exported)

MTU_FRAME = 1514
# 30 ms is 100 full frames at 40 Mbit/s: a shallow switch buffer in packets, and
# enough to absorb the scheduling stalls of a userspace datapath on 2 shared cores.
DEFAULT_QUEUE_MS = 30.0


def tbf_params(rate_bps, queue_ms=DEFAULT_QUEUE_MS, frame=MTU_FRAME):
    """Arguments for netlink's ``tc('add', 'tbf', ...)`` (rate in bytes/s).

    ``frame`` is the largest frame the interface carries (its MTU + 14).
    """
    rate = rate_bps // 8
    # Bucket: ~1 ms at rate, at least two full frames so a frame always fits.
    burst = max(2 * frame, rate // 1000)
    limit = max(3 * frame, int(rate * queue_ms / 1000.0)) + burst
    return {"rate": rate, "burst": burst, "limit": limit}


def apply(ipr, index, rate_bps, queue_ms=DEFAULT_QUEUE_MS, frame=MTU_FRAME, cnp_band=False):
    """Install the shaper on interface ``index`` of the namespace of ``ipr``; with
    ``cnp_band``, CNPs ahead of everything else (``add_cnp_band``)."""
    params = tbf_params(rate_bps, queue_ms, frame)
    ipr.tc("add", "tbf", index=index, handle=0x10000, **params)
    if cnp_band:
        add_cnp_band(ipr, index, params["limit"], frame)


BAND_HTB = 0x100000                     # HTB 10: under the TBF's class 1:1
CNP_CLASS, DATA_CLASS = 0x100010, 0x100030
CNP_FIFO, DATA_FIFO = 0x310000, 0x300000
CNP_QUEUE = 64 << 10                    # bytes of CNPs a port holds (about 900)
ETH_P_IP = 0x0800
# u32 keys from the IPv4 header (value/mask+offset): UDP, destination port 4791
# (RoCEv2), BTH opcode 0x81 (CNP); the lab's RoCE frames carry no IP options
CNP_KEYS = ["0x00110000/0x00ff0000+8", "0x000012b7/0x0000ffff+20",
            "0x81000000/0xff000000+28"]


def add_priority_band(ipr, index, high, data, frame=MTU_FRAME):
    """HTB 10: under the TBF 1: of ``index``, strict priority: ``high`` (priority 0)
    ahead of ``data`` (priority 1, where unclassified frames go), each a (class id,
    byte FIFO handle, FIFO limit in bytes)."""
    # a bfifo: the system layer's netlink knows it (pfifo's options, its limit in bytes)
    ipr.tc("add", "htb", index=index, handle=BAND_HTB, parent=0x10001,
           default=data[0] & 0xFFFF)
    ipr.tc("add-class", "htb", index=index, handle=BAND_HTB | 1, parent=BAND_HTB,
           rate="10gbit", ceil="10gbit", quantum=frame)
    for prio, (classid, fifo, size) in enumerate((high, data)):
        ipr.tc("add-class", "htb", index=index, handle=classid, parent=BAND_HTB | 1,
               rate="10gbit", ceil="10gbit", prio=prio, quantum=frame)
        ipr.tc("add", "bfifo", index=index, handle=fifo, parent=classid, limit=size)


def add_cnp_band(ipr, index, limit, frame=MTU_FRAME):
    """HTB 10: under the TBF 1: of ``index``: CNPs in 10:10 (priority 0), the rest in
    10:30 (priority 1, a byte FIFO of ``limit``, the TBF's own queue)."""
    add_priority_band(ipr, index, (CNP_CLASS, CNP_FIFO, CNP_QUEUE),
                      (DATA_CLASS, DATA_FIFO, limit), frame)
    ipr.tc("add-filter", "u32", index=index, parent=BAND_HTB, prio=1, protocol=ETH_P_IP,
           target=CNP_CLASS, keys=CNP_KEYS)


def cnp_band_packets(ipr, index):
    """Frames that went through the CNP band of ``index`` (0 without one)."""
    for msg in ipr.get_qdiscs(index=index):
        if msg.get_attr("TCA_KIND") == "bfifo" and msg["parent"] == CNP_CLASS:
            basic = (msg.get_attr("TCA_STATS2") or {}) and \
                msg.get_attr("TCA_STATS2").get_attr("TCA_STATS_BASIC")
            return (basic or {}).get("packets", 0)
    return 0


def stats(ipr, index):
    """(backlog_bytes, drops, sent_bytes) of the shaper on ``index``."""
    for msg in ipr.get_qdiscs(index=index):
        if msg.get_attr("TCA_KIND") == "tbf":
            basic = msg.get_attr("TCA_STATS2")
            queue = basic.get_attr("TCA_STATS_QUEUE") if basic else None
            sent = basic.get_attr("TCA_STATS_BASIC") if basic else None
            return ((queue or {}).get("backlog", 0), (queue or {}).get("drops", 0),
                    (sent or {}).get("bytes", 0))
    return (0, 0, 0)


# ---- every shaper's counters in one netlink dump ------------------------------
#
# ``stats`` asks the netlink library for one interface (a full dump filtered in Python:
# ~4 ms each); sampling the egress queues of a fabric every 10-20 ms needs all
# of them at once, cheaply.  ``QdiscReader`` sends one RTM_GETQDISC dump on a
# plain netlink socket and decodes only what it needs (kind, parent, the
# queue and byte counters): ~0.5 ms for a fabric's 50 ports.

_TCMSG = struct.Struct("=BBHiIII")      # family, pad, pad, ifindex, handle, parent, info
_QUEUE = struct.Struct("=IIIII")        # gnet_stats_queue: qlen backlog drops requeues overlimits
_BASIC = struct.Struct("=QI")           # gnet_stats_basic: bytes packets
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLM_F_REQUEST, NLM_F_ECHO, NLM_F_DUMP = 0x1, 0x8, 0x300
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3
TC_H_ROOT = 0xFFFFFFFF


def parse_qdisc_dump(buf, kind=b"tbf"):
    """Decode one recv() of an RTM_GETQDISC dump.

    Returns ``({ifindex: (backlog_bytes, drops, sent_bytes)}, done)`` for the
    root qdiscs of ``kind``; ``done`` is True at NLMSG_DONE.  A netlink error
    raises OSError.
    """
    out = {}
    for mtype, body, end in messages(buf):
        if mtype == NLMSG_DONE:
            return out, True
        if mtype == NLMSG_ERROR:
            err, exc = error_of(buf, body, "qdisc dump")
            if err:
                raise exc
        elif mtype == RTM_NEWQDISC:
            _, _, _, ifindex, _, parent, _ = _TCMSG.unpack_from(buf, body)
            name, backlog, drops, sent = None, 0, 0, 0
            for t, a, b in attrs(buf, body + _TCMSG.size, end):
                if t == TCA_KIND:
                    name = bytes(buf[a:b]).rstrip(b"\0")
                elif t == TCA_STATS2:
                    for t2, a2, b2 in attrs(buf, a, b):
                        if t2 == TCA_STATS_QUEUE and b2 - a2 >= _QUEUE.size:
                            _, backlog, drops, _, _ = _QUEUE.unpack_from(buf, a2)
                        elif t2 == TCA_STATS_BASIC and b2 - a2 >= _BASIC.size:
                            sent = _BASIC.unpack_from(buf, a2)[0]
            if name == kind and parent == TC_H_ROOT:
                out[ifindex] = (backlog, drops, sent)
    return out, False


class QdiscReader:
    """Root TBF counters of every interface of this network namespace, one dump each."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                  0)     # NETLINK_ROUTE
        self.sock.bind((0, 0))
        self.sock.settimeout(2.0)
        self.seq = 0

    def read(self):
        """{ifindex: (backlog_bytes, drops, sent_bytes)} of every root TBF."""
        self.seq += 1
        req = NLMSG.pack(NLMSG.size + _TCMSG.size, RTM_GETQDISC,
                          NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0) + \
            _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0, 0)
        self.sock.send(req)
        out = {}
        while True:
            part, done = parse_qdisc_dump(self.sock.recv(1 << 16))
            out.update(part)
            if done:
                return out

    def root(self, ifindex):
        """(backlog_bytes, drops, sent_bytes) of interface ``ifindex``'s root TBF
        alone: one RTM_GETQDISC of the root (tens of microseconds, where a dump
        of a namespace holding a fabric's ports takes milliseconds under load).
        The kernel answers a get to the asker only with NLM_F_ECHO."""
        self.seq += 1
        self.sock.send(NLMSG.pack(NLMSG.size + _TCMSG.size, RTM_GETQDISC,
                                  NLM_F_REQUEST | NLM_F_ECHO, self.seq, 0) +
                       _TCMSG.pack(socket.AF_UNSPEC, 0, 0, ifindex, 0, TC_H_ROOT, 0))
        while True:
            buf = self.sock.recv(1 << 16)
            seq = NLMSG.unpack_from(buf)[3] if len(buf) >= NLMSG.size else None
            if seq == self.seq:          # an answer to an earlier get that timed out: skip
                return parse_qdisc_dump(buf)[0].get(ifindex, (0, 0, 0))

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
