"""UET acknowledgements and control packets: ACK_CC, NACK and CONTROL (built once, patched).

Every one goes from one end of a PDC to the other (addresses and PDC ids fixed
per template; layouts in ``frames``).  Per frame: the prologue flags, the PSNs,
the SACK bitmap and CC state (ACK_CC), the code and PSN (NACK), the control type
and its payload (CONTROL), and the trailer.  The UDP source port is the entropy
value of the data packet answered, so an ACK leaves by the hash of its packet's
value (a receiver echoes it; nothing reads it back).

``parse_control`` reads any of them; ``Control`` holds the fields.
"""

import struct
import zlib

from traffic.uet.layout import (
    ACK_CC,
    ACK_CC_LEN,
    CC_CREDIT,
    CC_NSCC,
    CTRL,
    CTRL_LEN,
    HEAD_OFF,
    NACK,
    NACK_LEN,
    PDS_OFF,
    PSN_MASK,
    TRAILER,
    TRAILER_LEN,
    UDP_LEN,
    UET_PORT,
    integrity,
    prologue,
    psn_diff,
)

ACK_HEAD = struct.Struct("!HhIHH")             # prologue, ack offset, cumulative PSN, ids
ACK_EXT = struct.Struct("!BBhQ")               # cc type|flags, MPR, SACK offset, bitmap
NSCC_STATE = struct.Struct("!HIH")             # service time, restore|penalty|rcvd, ooo
CREDIT_STATE = struct.Struct("!IHH")           # credit << 8, 0, ooo
NACK_BODY = struct.Struct("!HBBIHHI")
CTRL_BODY = struct.Struct("!HHIHHI")
_KIND = struct.Struct("!HBB7xB2x4s4sHHxxxxH")  # EtherType ... dport, prologue
MPR = 64                                        # the PSN range a receiver tracks (its bitmap)


class ControlTemplate:
    """The ACK_CC, NACK and CONTROL frames from ``src`` to ``dst`` (any PDC between
    them: the PDC ids are each frame's)."""

    def __init__(self, src_mac, dst_mac, src_ip, dst_ip, dscp=26):
        from traffic.uet import scapy_layer  # only template construction needs scapy
        self.raw = {kind: scapy_layer.control_frame(src_mac, dst_mac, src_ip, dst_ip, kind,
                                                    dscp)
                    for kind in (ACK_CC, NACK, CTRL)}

    def ack(self, spdcid, dpdcid, cack, ack_psn, sack_base, bitmap, ecn=False, retx=False,
            ooo=0, rcvd=0, ev=0xC000, credit=None, close=False):
        """An ACK_CC: everything through ``cack`` arrived, ``ack_psn`` made it go
        (its offset from ``cack`` fits 16 signed bits), and bit i of ``bitmap``
        says PSN ``sack_base`` + i arrived.  ``credit``: a credit grant (RCCC's CC
        state) instead of NSCC's received bytes."""
        buf = bytearray(self.raw[ACK_CC])
        flags = (0x20 if ecn else 0) | (0x10 if retx else 0) | (4 if close else 0)
        off = max(-32768, min(32767, psn_diff(ack_psn, cack)))
        soff = max(-32768, min(32767, psn_diff(sack_base, cack)))
        ACK_HEAD.pack_into(buf, PDS_OFF, prologue(ACK_CC, 0, flags), off, cack & PSN_MASK,
                           spdcid, dpdcid)
        kind = CC_NSCC if credit is None else CC_CREDIT
        ACK_EXT.pack_into(buf, PDS_OFF + 12, kind << 4, MPR, soff, bitmap & (2 ** 64 - 1))
        if credit is None:
            NSCC_STATE.pack_into(buf, PDS_OFF + 24, 0, rcvd & 0xFFFFFF, min(ooo, 0xFFFF))
        else:
            CREDIT_STATE.pack_into(buf, PDS_OFF + 24, min(credit, 0xFFFFFF) << 8, 0,
                                   min(ooo, 0xFFFF))
        return self._finish(buf, ev)

    def nack(self, spdcid, dpdcid, psn, code, high=0, ecn=False, retx=False, ev=0xC000):
        """A NACK of ``psn`` with ``code`` (frames.NACK_*); ``high``: the highest PSN
        received + 1 (its payload)."""
        buf = bytearray(self.raw[NACK])
        flags = (0x20 if ecn else 0) | (0x10 if retx else 0)
        NACK_BODY.pack_into(buf, PDS_OFF, prologue(NACK, 0, flags), code, 0, psn & PSN_MASK,
                            spdcid, dpdcid, high & PSN_MASK)
        return self._finish(buf, ev)

    def control(self, spdcid, dpdcid, ctl_type, psn, payload=0, ar=False, ev=0xC000):
        """A CONTROL packet of ``ctl_type`` (frames.CTRL_*)."""
        buf = bytearray(self.raw[CTRL])
        CTRL_BODY.pack_into(buf, PDS_OFF, prologue(CTRL, ctl_type, 0x08 if ar else 0), 0,
                            psn & PSN_MASK, spdcid, dpdcid, payload & 0xFFFFFFFF)
        return self._finish(buf, ev)

    @staticmethod
    def _finish(buf, ev):
        struct.pack_into("!H", buf, PDS_OFF - UDP_LEN, ev)
        TRAILER.pack_into(buf, len(buf) - TRAILER_LEN, integrity(buf))
        return bytes(buf)


class Control:
    """A parsed ACK_CC, NACK or CONTROL packet."""

    __slots__ = ("src", "dst", "ptype", "flags", "spdcid", "dpdcid", "cack", "ack_psn",
                 "sack_base", "bitmap", "cc_type", "rcvd", "credit", "ooo", "code", "psn",
                 "high", "ctl_type", "payload", "ok")

    @property
    def ecn(self):
        return bool(self.flags & 0x20)

    @property
    def retx(self):
        return bool(self.flags & 0x10)

    @property
    def close(self):
        return (self.flags >> 1) & 3 == 2

    def sacked(self):
        """The PSNs the SACK bitmap says arrived."""
        out, b, i = [], self.bitmap, 0
        while b:
            if b & 1:
                out.append((self.sack_base + i) & PSN_MASK)
            b >>= 1
            i += 1
        return out


def parse_control(frame, n=None):
    """The ACK_CC, NACK or CONTROL packet in ``frame``, or None."""
    n = len(frame) if n is None else n
    if n < PDS_OFF + 16 + TRAILER_LEN:
        return None
    etype, ver, _tos, proto, src, dst, _sport, dport, pro = _KIND.unpack_from(frame, HEAD_OFF)
    ptype = pro >> 11
    if etype != 0x0800 or ver != 0x45 or proto != 17 or dport != UET_PORT \
            or ptype not in (ACK_CC, NACK, CTRL):
        return None
    c = Control()
    c.src, c.dst, c.ptype, c.flags = src, dst, ptype, pro & 0x7F
    c.ok = integrity(frame, n) == TRAILER.unpack_from(frame, n - TRAILER_LEN)[0]
    if ptype == ACK_CC:
        if n < PDS_OFF + ACK_CC_LEN + TRAILER_LEN:
            return None
        _, off, cack, c.spdcid, c.dpdcid = ACK_HEAD.unpack_from(frame, PDS_OFF)
        kind, _mpr, soff, c.bitmap = ACK_EXT.unpack_from(frame, PDS_OFF + 12)
        c.cack, c.ack_psn, c.sack_base = cack, (cack + off) & PSN_MASK, (cack + soff) & PSN_MASK
        c.cc_type = kind >> 4
        if c.cc_type == CC_CREDIT:
            credit, _, c.ooo = CREDIT_STATE.unpack_from(frame, PDS_OFF + 24)
            c.credit, c.rcvd = credit >> 8, 0
        else:
            _, rcvd, c.ooo = NSCC_STATE.unpack_from(frame, PDS_OFF + 24)
            c.rcvd, c.credit = rcvd & 0xFFFFFF, None
    elif ptype == NACK:
        if n < PDS_OFF + NACK_LEN + TRAILER_LEN:
            return None
        _, c.code, _, c.psn, c.spdcid, c.dpdcid, c.high = NACK_BODY.unpack_from(frame, PDS_OFF)
    else:
        if n < PDS_OFF + CTRL_LEN + TRAILER_LEN:
            return None
        _, _, c.psn, c.spdcid, c.dpdcid, c.payload = CTRL_BODY.unpack_from(frame, PDS_OFF)
        c.ctl_type = (pro >> 7) & 0xF
    return c


def crc_ok(frame):
    """Whether a control frame's trailer checks (tests)."""
    return zlib.crc32(memoryview(frame)[PDS_OFF:len(frame) - TRAILER_LEN]) == \
        TRAILER.unpack_from(frame, len(frame) - TRAILER_LEN)[0]
