"""Priority flow control on the emulated links: traffic classes, per-ingress buffer
accounting in eBPF, and the pause applied to an upstream's lossless queue.

Linux veths honour no 802.1Qbb pause and no qdisc does, so the lossless
fabric (``flow_control: pfc``; model in fabric.lossless, docs/lossless.md)
is built from three parts:

- *classes*: each interface's egress is a TBF at the link rate whose child
  is an HTB doing strict priority only (every class may use 10 Gbit/s):
  10:10 network control (RoCE ACK/NAK and CNP, frames of at most 256 bytes),
  10:20 lossless RoCE data (of the lossless DSCP, 26), whose own leaf is a
  TBF that is the pause gate, and 10:30 best effort (RoCE data of any other
  DSCP among it).  A dragonfly has a lossless class per routing phase
  (10:20, 10:21, 10:22 with gates 20:, 21:, 22:; fabric.lossless).  A tc
  egress program sets each frame's class (``skb->priority``).
- *accounting* (one BPF array map, an entry per interface end, ``E_*``): a
  frame of the lossless class arriving at a switch port is counted into that
  port's buffer (or dropped past xoff + headroom: an ingress drop) and
  stamped with the port (the BTH byte of FECN/BECN/reserved bits, which the
  RoCEv2 ICRC masks) by an XDP program on the port, before Open vSwitch
  sees it; the tc program of the egress port it leaves by counts it into
  that queue; when it arrives at the link's far end, that end's XDP program
  takes it off both, records the time, and counts and stamps it anew (a
  host clears the byte).  Counting at arrival, as switches do, matters: the
  userspace datapath forwards in batches, so counting at the egress would
  see a port's frames in bursts of many at once.
- *pause*: the agent (dataplane.lossless.pfc_agent) polls the occupancies and, past
  xoff, sets the upstream's lossless gate to 1 byte/s (one frame of tokens
  remains: the frame in flight); at xon it restores the gate and sends one
  60-byte kick frame of EtherType 0x88B5 through the upstream's control
  class so its qdisc runs again (the far end's XDP drops it).

The two programs are C (``dataplane/bpf/pfc.bpf.c``), loaded once per
interface end with its keys as constants (``programs``); ``ENTRY`` and
``CONFIG`` are their structs as Python packs them.
"""

import socket
import struct

from emulator.dataplane import bpf
from emulator.dataplane.lossless.ecnq import red
from emulator.fabric.lossless import LOSSLESS_DSCP

# one map entry per interface end (pfc.bpf.c's struct pfc_entry): s64 fields, byte offsets
ENTRY = bpf.Layout("pfc_entry", [(name, "q") for name in (
    "eg_in", "eg_out", "ing", "xoff", "limit", "cross_ns", "last_ns", "flags", "ing_drops",
    "wd_drops", "peak", "marks", "pauses", "paused_ns", "queued", "corr", "late")])
(E_EG_IN, E_EG_OUT, E_ING, E_XOFF, E_LIMIT, E_CROSS_NS, E_LAST_NS, E_FLAGS, E_ING_DROPS,
 E_WD_DROPS, E_PEAK, E_MARKS, E_PAUSES, E_PAUSED_NS, E_QUEUED, E_CORR, E_LATE) = \
    (ENTRY.offsets[name] for name in ENTRY.names)
ENTRY_SIZE = ENTRY.size
# E_PAUSES, E_PAUSED_NS: the agent's, for telemetry.  E_QUEUED: bytes that came in by
# this port and wait in the switch's egress queues (counted when queued, freed with
# E_ING); E_CORR: the agent's correction of E_ING for frames lost inside the switch
# (an injected loss, a port gone down): a port's occupancy is E_ING - E_CORR.
# E_LATE: the agent's, of E_ING_DROPS the ones its pause came too late for (the
# emulator's: a paused upstream sends at most the headroom).
WORDS = ENTRY_SIZE // 8
FLAG_DROP = 1                          # the watchdog drops this egress queue's lossless frames

KICK_ETHERTYPE = 0x88B5                # IEEE local experimental: the pause gate's kick
ROCE_PORT = 4791
ACK_OPCODES = (0x11, 0x81)             # RC ACKNOWLEDGE (and NAK), CNP
BTH_OFF, STAMP_OFF = 42, 46            # Ethernet 14 + IPv4 20 + UDP 8; BTH byte 4
CONTROL_MAX = 256                      # frames up to this rides the control class

HTB_HANDLE, GATE_HANDLE = 0x100000, 0x200000
CLASS_CONTROL, CLASS_LOSSLESS, CLASS_BEST = 0x100010, 0x100020, 0x100030
GATE_OPEN_FACTOR = 10                  # the open gate runs at 10 x the link: never the limit
HOST_QUEUE = 32 << 20                  # a host NIC's lossless queue: the host's memory
SWITCH_QUEUE = 32 << 20                # lossless egress queue; ingress limits bound it
TC_ACT_OK, XDP_DROP, XDP_PASS = 0, 1, 2


# ---- qdiscs -------------------------------------------------------------------

def apply_tree(ipr, index, rate_bps, queue_limit, frame, lossless_limit):
    """The lossless shaper of interface ``index``: TBF 1: at ``rate_bps`` -> HTB 10:
    (strict priority) -> control 10:10, lossless 10:20 (gate TBF 20:), best
    effort 10:30 (HTB's default FIFO of txqueuelen frames).  ``queue_limit``: the
    TBF's own, which its child replaces."""
    rate = rate_bps // 8
    burst = max(2 * frame, rate // 1000)
    ipr.tc("add", "tbf", index=index, handle=0x10000, rate=rate, burst=burst,
           limit=queue_limit)
    ipr.tc("add", "htb", index=index, handle=HTB_HANDLE, parent=0x10001,
           default=CLASS_BEST & 0xFFFF)
    ipr.tc("add-class", "htb", index=index, handle=HTB_HANDLE | 1, parent=HTB_HANDLE,
           rate="10gbit", ceil="10gbit", quantum=frame)
    for classid, prio in ((CLASS_CONTROL, 0), (CLASS_BEST, 2)):
        ipr.tc("add-class", "htb", index=index, handle=classid, parent=HTB_HANDLE | 1,
               rate="10gbit", ceil="10gbit", prio=prio, quantum=frame)
    add_lossless_class(ipr, index, rate_bps, frame, lossless_limit, 0)


def add_lossless_class(ipr, index, rate_bps, frame, lossless_limit, cls):
    """Lossless class ``cls`` of interface ``index`` (10:2c, with its gate TBF 2c:):
    the lossless classes share HTB priority 1, served round robin a frame each, as
    a switch's lossless queues share a port."""
    ipr.tc("add-class", "htb", index=index, handle=CLASS_LOSSLESS + cls,
           parent=HTB_HANDLE | 1, rate="10gbit", ceil="10gbit", prio=1, quantum=frame)
    ipr.tc("add", "tbf", index=index, handle=GATE_HANDLE + (cls << 16),
           parent=CLASS_LOSSLESS + cls,
           rate=min(rate_bps // 8 * GATE_OPEN_FACTOR, 2 ** 32 - 1), burst=2 * frame,
           limit=lossless_limit)


_NLMSG = struct.Struct("=IHHII")
_TCMSG = struct.Struct("=BBHiIII")
_RATESPEC = struct.Struct("=BBHhHI")
RTM_NEWQDISC, NLM_F_REQUEST, NLM_F_ACK = 36, 1, 4
TCA_KIND, TCA_OPTIONS, TCA_TBF_PARMS, TCA_TBF_BURST = 1, 2, 1, 6
LINKLAYER_ETHERNET = 1


def _attr(kind, payload):
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * (-n % 4)


def gate_message(ifindex, rate_bytes, burst, limit, seq=0, cls=0):
    """RTM_NEWQDISC (change) of the lossless gate TBF 20: (class ``cls``'s: 2c:)
    on ``ifindex``.

    TCA_TBF_BURST gives the bucket in bytes, so the kernel derives its time at
    any rate (a 1 byte/s gate holding one frame needs ~4000 s of bucket, beyond
    the u32 ticks the netlink library computes).  The change refills the bucket: one more
    frame may leave (the frame in flight)."""
    ratespec = _RATESPEC.pack(0, LINKLAYER_ETHERNET, 0, 0, 0, rate_bytes)
    qopt = ratespec + _RATESPEC.pack(0, 0, 0, 0, 0, 0) + struct.pack("=III", limit, 0, 0)
    opts = _attr(TCA_TBF_PARMS, qopt) + _attr(TCA_TBF_BURST, struct.pack("=I", burst))
    body = _TCMSG.pack(socket.AF_UNSPEC, 0, 0, ifindex, GATE_HANDLE + (cls << 16),
                       CLASS_LOSSLESS + cls, 0) + \
        _attr(TCA_KIND, b"tbf\0") + _attr(TCA_OPTIONS, opts)
    return _NLMSG.pack(_NLMSG.size + len(body), RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK,
                       seq, 0) + body


def kick_frame(src_mac=b"\x02\0\0\0\0\x01"):
    return b"\xff" * 6 + src_mac + struct.pack("!H", KICK_ETHERTYPE) + b"\0" * 46


# ---- eBPF ---------------------------------------------------------------------

# the per-end constants of pfc.bpf.c (its const volatile ``cfg``)
CONFIG = bpf.Layout("pfc_cfg", [
    ("key", "Q"), ("base", "q"), ("up_key", "Q"), ("up_base", "q"), ("stamp", "Q"),
    ("ecn", "Q"), ("nends", "Q"), ("classes", "Q"), ("phase", "Q"), ("dscp", "Q"),
    ("red.kmin", "q"),
    ("red.kmax", "q"), ("red.pmul", "Q"), ("red.min_len", "Q")])
MAP = "pfc_ends"


def programs(ends, key, base, up_key, up_base, stamp, ecn=None, min_len=0, chain=None,
             classes=1, nends=0, phase=False, dscp=LOSSLESS_DSCP):
    """The two programs of interface end ``key`` on map ``ends`` (a ``bpf.Map`` of
    ENTRY values), as fds (``bpf.Programs``):

    - ``pfc_egress`` (tc egress): sets the frame's class; counts a lossless frame
      into this end's queue and, at a switch whose first port is entry ``base``
      (-1 for a host), as queued for the port it came in by;
    - ``pfc_ingress`` (XDP), the far end of egress ``up_key`` (whose switch's
      first entry is ``up_base``, -1 for a host): takes an arriving lossless
      frame off that queue and off the buffer of the port it entered that switch
      by; drops it if the watchdog drops that queue.  At a switch (``stamp`` =
      this port's number + 1): counts it into this port's buffer, or drops it
      past xoff + headroom (an ingress drop), notes the time it crosses xoff,
      and stamps it; at a host (``stamp`` 0) clears the stamp.  ``ecn``
      (dataplane.lossless.ecn.Ecn) marks it CE by the queue it leaves behind, as
      dataplane.lossless.ecnq does, if longer than ``min_len``.  Kick frames are
      dropped.  A frame it passes goes on to slot ``key`` of ``chain`` (a program
      array: the next stage, if any; bpf/chain.h).

    ``classes`` lossless priorities (one per routing phase): the map holds a
    block of ``nends`` entries per class; ``phase``: this end's egress moves a
    frame to the next class (the start of a routing phase: a global link).
    RoCE data frames of another DSCP than ``dscp`` ride best effort, unaccounted.
    """
    marking = red(ecn.kmin, ecn.kmax, ecn.pmax, min_len) if ecn is not None else \
        red(0, 0, 0.0, 0)
    config = CONFIG.pack_fields(key=key, base=base, up_key=up_key, up_base=up_base,
                                stamp=stamp, ecn=int(ecn is not None), nends=nends,
                                classes=classes, phase=int(phase), dscp=dscp, **marking)
    maps = {MAP: ends, **({bpf.CHAIN_MAP: chain} if chain is not None else {})}
    return bpf.load("pfc", config, CONFIG, maps, value_layouts=[ENTRY])
