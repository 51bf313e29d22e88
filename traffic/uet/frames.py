"""UET data frames: built once with scapy, patched per packet, parsed on arrival.

A data packet is an SES WRITE over a PDS RUD or ROD request (``layout`` has every
header).  ``DataTemplate`` stands for one PDC's packets of one payload length:
scapy builds its bytes once (``scapy_layer``); every packet then copies them and
patches what changes (``fill``): the UDP source port (its entropy value), the PDS
flags, clear offset, PSN and PDC ids, the SES flags, message id, offsets and
length, the probe header and the trailer.  As RoCE's frames do, the CRC of the
constant padding is computed once and combined per packet (``TailCrc``).
``Wire`` is one packet as it leaves; ``parse_data`` reads one that arrived.
"""

import struct
import zlib

from traffic.roce.frames import PROBE, PROBE_MAGIC, TailCrc
from traffic.uet.layout import (  # noqa: F401  (integrity: the trailer's rule)
    CC_REQUESTS,
    CC_STATE,
    DATA_DSCP,
    F_AR,
    F_SYN,
    HEAD,
    HEAD_OFF,
    JOB_ID,
    NH_REQ_STD,
    PDS_OFF,
    PID_ON_FEP,
    PSN_MASK,
    REQ_LEN,
    REQUEST,
    REQUESTS,
    RESOURCE_INDEX,
    ROD_CC_REQ,
    ROD_REQ,
    RUD_CC_REQ,
    RUD_REQ,
    SES_EOM,
    SES_SOM,
    SES_STD,
    SES_STD_LEN,
    SES_TAIL,
    SES_WRITE,
    TRAILER,
    TRAILER_LEN,
    TRIM_DSCP,
    UDP_LEN,
    UET_PORT,
    integrity,
    prologue,
    ses_offset,
)


def message_id(tag, chunk):
    """A message's 16-bit SES id, from what the engines name it by."""
    return (tag * 4099 + chunk) & 0xFFFF


class DataTemplate:
    """Pre-built bytes of the data packets of one PDC with one payload length.

    scapy builds them once (``scapy_layer``); ``fill_packet`` copies them into a
    send slot and patches what changes per packet: the UDP source port (the EV),
    the PDS flags, clear offset, PSN and destination PDC id, the SES flags,
    message id, offsets and length, the probe header and the trailer.  ``ar``:
    the packet asks for an ACK at once (the last packet of a message on its PDC).
    """

    def __init__(self, src_mac, dst_mac, src_ip, dst_ip, payload, dscp=DATA_DSCP,
                 ecn=2, ar=False, rod=False, cc_state=False, mtu=4096):
        from traffic.uet import scapy_layer  # only template construction needs scapy
        self.ptype = (ROD_CC_REQ if cc_state else ROD_REQ) if rod else \
            (RUD_CC_REQ if cc_state else RUD_REQ)
        self.ar, self.mtu, self.payload = ar, mtu, max(payload, PROBE.size)
        self.ses_off = ses_offset(self.ptype)
        self.probe_off = self.ses_off + SES_STD_LEN
        self.head = self.probe_off + PROBE.size
        self.raw = scapy_layer.data_frame(src_mac, dst_mac, src_ip, dst_ip, self.ptype,
                                          self.payload, dscp, ecn)
        self.len = len(self.raw)
        self.tail_sig = ("uet", self.len, self.head)
        self._tail = TailCrc.of(self.raw[self.head:self.len - TRAILER_LEN])
        self.flags = F_AR if ar else 0
        self._prologue = prologue(self.ptype, NH_REQ_STD, 0)

    def fill(self, buf, psn, tx_ns, flow, tag, chunk, index, count, whole=True, ev=0xC000,
             flags=0, spdcid=0, dpdcid=0, clear=0, credit_target=0):
        """Write the packet into ``buf``; returns its length.  ``flags``: RETX/SYN
        (AR is the template's); ``spdcid``: the sender's PDC id; ``dpdcid``: the
        destination PDC id, or with SYN the offset word; ``clear``: the clear-PSN
        offset (<= 0)."""
        n, head = self.len, self.head
        if whole:
            buf[:n] = self.raw
        else:
            buf[:head] = self.raw[:head]
        struct.pack_into("!H", buf, PDS_OFF - UDP_LEN, ev)
        REQUEST.pack_into(buf, PDS_OFF, self._prologue | flags | self.flags,
                          max(-32768, clear), psn & PSN_MASK, spdcid, dpdcid)
        if self.ses_off != PDS_OFF + REQ_LEN:
            CC_STATE.pack_into(buf, PDS_OFF + REQ_LEN, min(credit_target, 0xFFFFFF))
        som, eom = index == 0, index == count - 1
        sflags = (SES_SOM if som else 0) | (SES_EOM if eom else 0)
        mid = message_id(tag, chunk)
        SES_STD.pack_into(buf, self.ses_off, SES_WRITE, sflags, mid, JOB_ID, PID_ON_FEP,
                          RESOURCE_INDEX, 0, flow, 0, 0, count * self.mtu)
        if not som:
            SES_TAIL.pack_into(buf, self.ses_off + 32, 0, self.payload & 0x3FFF,
                               index * self.mtu)
        PROBE.pack_into(buf, self.probe_off, PROBE_MAGIC, flow, tx_ns, tag, chunk, index, count)
        crc = self._tail.combine(zlib.crc32(memoryview(buf)[PDS_OFF:head]))
        TRAILER.pack_into(buf, n - TRAILER_LEN, crc)
        return n

    def frame(self, psn, tx_ns=0, flow=0, tag=0, chunk=0, index=0, count=1, **kw):
        """One packet as bytes (tests, captures)."""
        buf = bytearray(self.len)
        self.fill(buf, psn, tx_ns, flow, tag, chunk, index, count, True, **kw)
        return bytes(buf)


class Wire:
    """One packet as it leaves: its template and the fields chosen at send time
    (``Sender.post`` calls ``fill_packet`` as it does a RoCE template's)."""

    __slots__ = ("t", "ev", "flags", "spdcid", "dpdcid", "clear", "credit", "len", "tail_sig")

    def __init__(self, template, ev, flags, spdcid, dpdcid, clear, credit=0):
        self.t, self.ev, self.flags, self.dpdcid, self.clear = template, ev, flags, dpdcid, clear
        self.spdcid, self.credit = spdcid, credit
        self.len, self.tail_sig = template.len, template.tail_sig

    def fill_packet(self, buf, psn, tx_ns, flow, tag, chunk, index, count, whole):
        return self.t.fill(buf, psn, tx_ns, flow, tag, chunk, index, count, whole, self.ev,
                           self.flags, self.spdcid, self.dpdcid, self.clear, self.credit)

    def fill(self, buf, psn, tx_ns, flow, tag, chunk, index, count):
        """``fill_packet`` of the whole frame (``Sender.emit``'s call)."""
        return self.fill_packet(buf, psn, tx_ns, flow, tag, chunk, index, count, True)


class Data:
    """The fields of a received data packet the PDCs and the engines need."""

    __slots__ = ("src", "dst", "tos", "ev", "ptype", "flags", "clear", "psn", "spdcid",
                 "dpdcid", "credit_target", "flow", "tx_ns", "tag", "chunk", "index",
                 "count", "length", "trimmed", "ok")

    @property
    def ecn(self):
        return self.tos & 3

    @property
    def syn(self):
        return bool(self.flags & F_SYN)


def parse_data(frame, n=None):
    """The UET data packet in ``frame`` (``n`` bytes), or None if it is none.  A
    frame carrying ``TRIM_DSCP`` is a trimmed one: its probe header is read, its
    trailer not checked (``ok`` False, ``trimmed`` True)."""
    n = len(frame) if n is None else n
    if n < PDS_OFF + REQ_LEN + SES_STD_LEN + PROBE.size:
        return None
    etype, ver, tos, proto, src, dst, sport, dport, pro, clear, psn, spd, dpd = \
        HEAD.unpack_from(frame, HEAD_OFF)
    ptype = pro >> 11
    if etype != 0x0800 or ver != 0x45 or proto != 17 or dport != UET_PORT \
            or ptype not in REQUESTS:
        return None
    probe_off = ses_offset(ptype) + SES_STD_LEN
    if probe_off + PROBE.size > n:
        return None
    magic, flow, tx_ns, tag, chunk, index, count = PROBE.unpack_from(frame, probe_off)
    if magic != PROBE_MAGIC:
        return None
    d = Data()
    d.src, d.dst, d.tos, d.ev, d.ptype, d.flags = src, dst, tos, sport, ptype, pro & 0x7F
    d.clear, d.psn, d.spdcid, d.dpdcid = clear, psn, spd, dpd
    d.credit_target = CC_STATE.unpack_from(frame, PDS_OFF + REQ_LEN)[0] & 0xFFFFFF \
        if ptype in CC_REQUESTS else 0
    d.flow, d.tx_ns, d.tag, d.chunk, d.index, d.count = flow, tx_ns, tag, chunk, index, count
    d.length = n
    d.trimmed = tos >> 2 == TRIM_DSCP
    d.ok = not d.trimmed and n >= probe_off + PROBE.size + TRAILER_LEN and \
        integrity(frame, n) == TRAILER.unpack_from(frame, n - TRAILER_LEN)[0]
    return d


def is_uet(frame, n=None):
    """Whether ``frame`` is IPv4/UDP to the UET port (a data or control packet)."""
    n = len(frame) if n is None else n
    return n >= PDS_OFF + 2 and frame[12:14] == b"\x08\x00" and frame[23] == 17 and \
        frame[36:38] == UET_PORT.to_bytes(2, "big")
