"""The layout of every UET header this lab sends, in one place (UE Specification 1.0.1).

A UET write over UDP is::

    Ether / IPv4 (DSCP, ECT(0)) / UDP (sport = entropy value, dport 4793, checksum 0)
          / PDS RUD or ROD request (12 bytes; 16 with the CC state of RCCC)
          / SES standard request (44 bytes: a WRITE)
          / payload (the lab's probe header first, then padding) / integrity trailer

and its acknowledgements are ``Ether / IPv4 / UDP / PDS ACK_CC | NACK | CONTROL /
trailer``.  The entropy value (EV) is the UDP source port: a sender changes it per
packet and the switches' ECMP hash spreads the packets (``traffic.uet.ev``).

Layouts (network order; ``*`` per packet):

- PDS prologue, 16 bits: type (5) | next header or control type (4) | flags (7).
  Request flags RETX 0x10, AR 0x08, SYN 0x04; ACK flags M (ECN echo) 0x20, RETX
  0x10, P 0x08, REQ 0x06 (1 clear, 2 close); NACK flags M 0x20, RETX 0x10, NT 0x08.
- RUD/ROD request: prologue* | clear PSN offset* (s16) | PSN* (32) | source PDC id |
  destination PDC id*, or with SYN: use-reserved (1) | 0 (3) | PSN offset from the
  start PSN (12).  RUD_CC/ROD_CC add CCC id (8) | credit target* (24).
- SES standard request: 0 (2) | opcode (6) | version (2) DC IE REL HD EOM* SOM* |
  message id* (16) | index generation (8) | job id (24) | 0 (4) | PID on FEP (12) |
  0 (4) | resource index (12) | buffer offset (64) | initiator (32) | memory key
  (64) | header data* (64; not SOM: 0 (16) | 0 (2) | payload length (14) | message
  offset (32)) | request length* (32).
- ACK_CC: prologue | ACK PSN offset (s16, from the cumulative PSN) | cumulative ACK
  PSN (32) | source PDC id | destination PDC id | CC type (4) | CC flags (4) | MPR
  (8) | SACK PSN offset (s16) | SACK bitmap (64) | CC state (64: NSCC: service
  time (16) | restore (1) | window penalty (7) | received bytes (24) | out-of-order
  count (16); credit: credit (24) | 0 (24) | out-of-order count (16)).
- NACK: prologue | code (8) | vendor code (8) | NACK PSN (32) | source PDC id |
  destination PDC id | payload (32: the highest PSN received + 1).
- CONTROL: prologue (control type in the next-header bits) | probe opaque (16) |
  PSN (32) | source PDC id | destination PDC id | payload (32).

The stored references held these headers (the Wireshark dissector written against
1.0.1 and open UET header definitions) but not the specification's text: the
lab's reading of a rule is said as such in docs/uet.md.  ``frames``, ``control``
and ``scapy_layer`` take every constant, offset and struct from here.

UDP checksum: 0, as RoCEv2's annex allows on IPv4, which leaves a switch free to
trim a frame without touching the UDP checksum.  Integrity is the lab's own
trailer: a CRC-32 (zlib, little-endian) over everything from the PDS header to
the trailer, as RoCE's ICRC; a trimmed frame has lost it, and says so by its DSCP
(``TRIM_DSCP``, written by the switch that trimmed it).  The probe header (the
payload's first 36 bytes: ``traffic.roce.frames.PROBE``) survives trimming
(``TRIM_BYTES``), so the receiver knows what to NACK.
"""

import struct
import zlib

from traffic.roce.frames import PROBE

UET_PORT = 4793
ETH_LEN, IP_LEN, UDP_LEN = 14, 20, 8
PDS_OFF = ETH_LEN + IP_LEN + UDP_LEN                  # 42
REQ_LEN, CC_STATE_LEN, SES_STD_LEN, TRAILER_LEN = 12, 4, 44, 4
ACK_CC_LEN, NACK_LEN, CTRL_LEN = 32, 16, 16

# PDS types (1.0.1's table of them) and next headers
TSS, RUD_REQ, ROD_REQ, RUDI_REQ, RUDI_RESP, UUD_REQ = 1, 2, 3, 4, 5, 6
ACK, ACK_CC, ACK_CCX, NACK, CTRL, NACK_CCX, RUD_CC_REQ, ROD_CC_REQ = 7, 8, 9, 10, 11, 12, 13, 14
REQUESTS = frozenset({RUD_REQ, ROD_REQ, RUD_CC_REQ, ROD_CC_REQ})
CC_REQUESTS = frozenset({RUD_CC_REQ, ROD_CC_REQ})
TYPE_NAMES = {TSS: "TSS", RUD_REQ: "RUD_REQ", ROD_REQ: "ROD_REQ", RUDI_REQ: "RUDI_REQ",
              RUDI_RESP: "RUDI_RESP", UUD_REQ: "UUD_REQ", ACK: "ACK", ACK_CC: "ACK_CC",
              ACK_CCX: "ACK_CCX", NACK: "NACK", CTRL: "CONTROL", NACK_CCX: "NACK_CCX",
              RUD_CC_REQ: "RUD_CC_REQ", ROD_CC_REQ: "ROD_CC_REQ"}
NH_NONE, NH_REQ_SMALL, NH_REQ_MEDIUM, NH_REQ_STD = 0, 1, 2, 3

# prologue flags
F_RETX, F_AR, F_SYN = 0x10, 0x08, 0x04                # requests (and CONTROL)
F_ECN, F_PROBE = 0x20, 0x08                           # ACKs (and M of NACKs); P
REQ_CLOSE = 2 << 1                                    # an ACK's REQ field: close
F_NT = 0x08                                           # NACK type: RUDI

# SES
SES_WRITE = 0x01
SES_SOM, SES_EOM, SES_HD = 0x01, 0x02, 0x04
JOB_ID, PID_ON_FEP, RESOURCE_INDEX = 0x1AB, 0, 0

# NACK codes and control types (1.0.1's tables)
NACK_TRIMMED, NACK_TRIMMED_LASTHOP, NACK_ROD_OOO, NACK_NO_PDC = 0x01, 0x02, 0x0D, 0x04
NACK_CLOSING = 0x10
CTRL_ACK_REQ, CTRL_CLOSE_CMD, CTRL_CLOSE_REQ, CTRL_CREDIT = 1, 4, 5, 7
CC_NSCC, CC_CREDIT = 0, 1

# the lab's choices
DATA_DSCP = 26                 # the data class (RoCE's in this lab)
TRIM_DSCP = 46                 # a frame a switch trimmed carries this DSCP
TRIM_BYTES = PDS_OFF + REQ_LEN + CC_STATE_LEN + SES_STD_LEN + PROBE.size   # 134: the probe, kept
PSN_BITS = 32
PSN_MASK = (1 << PSN_BITS) - 1
PSN_OFFSET_MASK = 0x0FFF       # a SYN's PSN offset from the start PSN (12 bits)

PROLOGUE = struct.Struct("!H")
REQUEST = struct.Struct("!HhIHH")              # prologue, clear offset, PSN, spdcid, dpdcid
CC_STATE = struct.Struct("!I")                 # CCC id (8) | credit target (24)
SES_STD = struct.Struct("!BBHIHHQIQQI")
SES_TAIL = struct.Struct("!HHI")               # not SOM: 0, 0|payload length, message offset
TRAILER = struct.Struct("<I")
# from the EtherType on: type, version/IHL, TOS, protocol, src, dst, sport, dport, then
# the PDS request's prologue, clear offset, PSN, spdcid, dpdcid
HEAD = struct.Struct("!HBB7xB2x4s4sHH4xHhIHH")
HEAD_OFF = 12


def prologue(ptype, next_hdr, flags):
    """The PDS prologue word."""
    return (ptype & 0x1F) << 11 | (next_hdr & 0xF) << 7 | (flags & 0x7F)


def split_prologue(word):
    """(type, next header or control type, flags) of a prologue word."""
    return word >> 11, (word >> 7) & 0xF, word & 0x7F


def psn_diff(a, b):
    """``a - b`` for 32-bit PSNs in serial-number arithmetic."""
    d = (a - b) & PSN_MASK
    return d - (1 << PSN_BITS) if d >= 1 << (PSN_BITS - 1) else d


def ses_offset(ptype):
    """Where the SES header starts after a request of type ``ptype``."""
    return PDS_OFF + REQ_LEN + (CC_STATE_LEN if ptype in CC_REQUESTS else 0)


def headers_len(cc_state=False):
    """Frame bytes that are not payload: up to the payload, and the trailer."""
    return PDS_OFF + REQ_LEN + (CC_STATE_LEN if cc_state else 0) + SES_STD_LEN + TRAILER_LEN


def frame_len_for_mtu(mtu, cc_state=False):
    """Ethernet frame length (no FCS) of a data packet carrying ``mtu`` payload bytes."""
    return headers_len(cc_state) + mtu


def integrity(frame, n=None):
    """The trailer a frame of ``n`` bytes should carry: CRC-32 from the PDS header on."""
    n = len(frame) if n is None else n
    return zlib.crc32(memoryview(frame)[PDS_OFF:n - TRAILER_LEN])
