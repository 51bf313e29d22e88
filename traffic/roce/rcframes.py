"""RoCEv2 transport frames without a payload: ACK, NAK and CNP (built once, patched).

- ACKNOWLEDGE (RC opcode 0x11): ``BTH / AETH``.  The BTH PSN is the PSN
  acknowledged (ACK: the last in order) or expected (NAK).  The AETH
  syndrome says which: ``0x1F`` ACK (credit field "invalid": no end-to-end
  credits), ``0x60`` NAK with code 0, PSN sequence error.  The MSN counts
  completed messages.
- CNP (opcode 0x81, RoCEv2 annex A17): ``BTH`` with the BECN bit and 16
  reserved bytes, sent by a receiver that saw ECN CE on a QP's packets.
  Its destination QP is the QP whose rate the sender must cut.

Both go from the receiver to the QP's sender, on the same UDP source port
as the data (the QP's path entropy), and carry a valid ICRC: scapy builds
each template once (``ControlTemplate``); per frame the PSN, syndrome and
MSN are patched and the ICRC recomputed (60-odd bytes).
"""

import struct

from traffic.roce.frames import (
    BTH_OFF,
    ETH_LEN,
    ICRC_LEN,
    PSN_MASK,
    PSN_OFF,
    ROCE_PORT,
    icrc,
    udp_sport,
)

ACKNOWLEDGE, CNP = 0x11, 0x81
SYN_ACK, SYN_NAK_SEQ = 0x1F, 0x60
AETH_OFF = PSN_OFF + 4
BECN_BIT = 0x40                   # BTH byte 4: FECN 0x80, BECN 0x40


class ControlTemplate:
    """One frame kind (ACK or CNP) for one QP: addresses and QP fixed."""

    def __init__(self, kind, src_mac, dst_mac, src_ip, dst_ip, dqpn, dscp=26, sport=None):
        from scapy.contrib.roce import AETH, BTH, CNPPadding
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether
        self.kind = kind
        self.sport = udp_sport(dqpn, dqpn) if sport is None else sport
        if kind == ACKNOWLEDGE:
            tail = BTH(opcode=ACKNOWLEDGE, dqpn=dqpn, psn=0) / AETH(syndrome=SYN_ACK, msn=0)
        elif kind == CNP:
            tail = BTH(opcode=CNP, becn=1, dqpn=dqpn, psn=0) / CNPPadding()
        else:
            raise ValueError(f"kind: ACKNOWLEDGE (0x11) or CNP (0x81), not {kind!r}")
        pkt = (Ether(src=src_mac, dst=dst_mac)
               / IP(src=src_ip, dst=dst_ip, tos=dscp << 2, ttl=64, flags="DF", id=0)
               / UDP(sport=self.sport, dport=ROCE_PORT, chksum=0) / tail)
        self.raw = bytes(pkt)
        self.len = len(self.raw)

    def frame(self, psn=0, syndrome=SYN_ACK, msn=0):
        """The frame's bytes with these fields and a fresh ICRC."""
        buf = bytearray(self.raw)
        struct.pack_into("!I", buf, PSN_OFF, psn & PSN_MASK)
        if self.kind == ACKNOWLEDGE:
            struct.pack_into("!I", buf, AETH_OFF, (syndrome << 24) | (msn & 0xFFFFFF))
        struct.pack_into("<I", buf, self.len - ICRC_LEN, icrc(buf))
        return bytes(buf)


class Control:
    """A parsed ACK, NAK or CNP."""

    __slots__ = ("src_ip", "dst_ip", "opcode", "dqpn", "psn", "syndrome", "msn", "icrc_ok")

    @property
    def is_nak(self):
        return self.opcode == ACKNOWLEDGE and self.syndrome >> 5 == 0b011

    @property
    def is_ack(self):
        return self.opcode == ACKNOWLEDGE and self.syndrome >> 5 == 0


def parse_control(frame, verify=True):
    """The ACK/NAK/CNP in ``frame`` (bytes-like), or None if it is none of them."""
    n = len(frame)
    if n < BTH_OFF + 12 + ICRC_LEN or frame[12:14] != b"\x08\x00" or frame[14] != 0x45 \
            or frame[23] != 17 or frame[36:38] != b"\x12\xb7":
        return None
    op = frame[BTH_OFF]
    if op not in (ACKNOWLEDGE, CNP) or (op == ACKNOWLEDGE and n < AETH_OFF + 4 + ICRC_LEN):
        return None
    c = Control()
    c.src_ip = bytes(frame[ETH_LEN + 12:ETH_LEN + 16])
    c.dst_ip = bytes(frame[ETH_LEN + 16:ETH_LEN + 20])
    c.opcode = op
    c.dqpn = int.from_bytes(frame[BTH_OFF + 5:BTH_OFF + 8], "big")
    c.psn = int.from_bytes(frame[PSN_OFF + 1:PSN_OFF + 4], "big")
    c.syndrome, c.msn = (frame[AETH_OFF], int.from_bytes(frame[AETH_OFF + 1:AETH_OFF + 4],
                                                         "big")) if op == ACKNOWLEDGE else (0, 0)
    c.icrc_ok = (not verify) or icrc(frame) == struct.unpack_from("<I", frame, n - ICRC_LEN)[0]
    return c
