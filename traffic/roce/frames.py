"""RoCEv2 frames: built once with scapy, patched per packet without it.

Model.  A frame is ``Ether / IPv4 / UDP(dport 4791) / BTH [/ RETH] / probe /
padding / ICRC``.  One ``FrameTemplate`` stands for one queue pair (QP) and
one opcode: scapy builds its bytes once; every packet then copies those bytes
and patches three things in place with ``struct.pack_into``:

- the BTH PSN (24 bits, wraps at 2**24 like the hardware's),
- the probe header (what the receiver needs to account the packet),
- the ICRC, a CRC-32 over a masked pseudo-header and everything after it.

Probe header (network byte order, right after the BTH, or after the RETH
for RDMA WRITE FIRST/ONLY)::

    magic u32 | flow u32 | tx_ns u64 | tag u32 | chunk u32 | index u32 | count u32

``flow`` identifies the QP stream (one PSN space), ``tx_ns`` is
CLOCK_MONOTONIC at send (shared by all namespaces of one host), and
``tag/chunk/index/count`` let a collective rank reassemble chunks
(tag = message-size iteration, chunk = step, index of ``count`` packets).

ICRC (IBA annex A17 / scapy ``BTH.compute_icrc``): CRC-32 (zlib) over
8 bytes of 0xff (the pseudo LRH), the IPv4 header with TOS, TTL and checksum
set to 0xff.., the UDP header with checksum 0xffff, the BTH with its FECN,
BECN and reserved byte set to 0xff, then the payload; stored little-endian.
Only the bytes from the BTH PSN word on change per packet, so the CRC of the
constant masked prefix is computed once and continued per packet.

UDP source port: RoCE NICs put path entropy there, derived from the QP
(``udp_sport``), in 49152..65535, so the QPs of one connection spread over
ECMP paths.  UDP checksum is 0 (allowed for RoCEv2 over IPv4).
"""

import ctypes
import ctypes.util
import struct
import zlib

ROCE_PORT = 4791
ETH_LEN, IP_LEN, UDP_LEN, BTH_LEN, RETH_LEN, ICRC_LEN = 14, 20, 8, 12, 16, 4
BTH_OFF = ETH_LEN + IP_LEN + UDP_LEN          # 42
PSN_OFF = BTH_OFF + 8                          # the ackreq/psn word
PROBE = struct.Struct("!IIQIIII")
PROBE_MAGIC = 0x464C5431                       # "FLT1"
PSN_MASK = 0xFFFFFF
HEADERS_LEN = BTH_OFF + BTH_LEN + ICRC_LEN     # frame bytes that are not payload
ROCE_MTUS = (1024, 2048, 4096)                 # RoCE path MTUs (payload bytes per packet)


def frame_len_for_mtu(mtu):
    """Ethernet frame length (no FCS) of an RDMA WRITE ONLY packet with ``mtu`` payload."""
    return HEADERS_LEN + RETH_LEN + mtu

# RC opcodes (IBA table 38).  WRITE FIRST/ONLY carry a RETH.
OPCODES = {
    "SEND_FIRST": 0x00, "SEND_MIDDLE": 0x01, "SEND_LAST": 0x02,
    "SEND_ONLY": 0x04,
    "WRITE_FIRST": 0x06, "WRITE_MIDDLE": 0x07, "WRITE_LAST": 0x08,
    "WRITE_ONLY": 0x0A,
}
RETH_OPCODES = frozenset({0x06, 0x0A, 0x0B})
# Which opcode a packet of a multi-packet message uses, per message kind.
MESSAGE_OPCODES = {
    "WRITE": ("WRITE_ONLY", "WRITE_FIRST", "WRITE_MIDDLE", "WRITE_LAST"),
    "SEND": ("SEND_ONLY", "SEND_FIRST", "SEND_MIDDLE", "SEND_LAST"),
}


_PROBE_HEAD = struct.Struct("!IIQ")       # magic, flow, tx_ns: the probe's first fields
_PSN = struct.Struct("!I")
_ICRC = struct.Struct("<I")


class TailCrc:
    """CRC-32 of ``A || tail`` from CRC-32 of ``A``, for one constant ``tail``.

    zlib's ``crc32_combine(c1, c2, len2) = M(len2) c1 xor c2`` where the
    operator M (appending len2 zero bytes) is linear over GF(2), so it is
    tabulated per byte of c1 once (4 x 256 entries, from libz's own
    ``crc32_combine``) and applied with four lookups per frame.  Without
    libz's symbol the tail is CRC'd per frame as before.
    """

    _cache = {}

    @classmethod
    def of(cls, tail):
        key = (len(tail), zlib.crc32(tail))
        if key not in cls._cache:
            cls._cache[key] = cls(tail)
        return cls._cache[key]

    def __init__(self, tail):
        self.tail = bytes(tail)
        self.crc = zlib.crc32(self.tail)
        combine = _libz_combine()
        if combine is None:
            self.tables = None
            return
        n = len(self.tail)
        self.tables = [[combine(v << (8 * k), 0, n) for v in range(256)] for k in range(4)]

    def combine(self, crc_a):
        t = self.tables
        if t is None:
            return zlib.crc32(self.tail, crc_a)
        return (t[0][crc_a & 0xFF] ^ t[1][(crc_a >> 8) & 0xFF] ^ t[2][(crc_a >> 16) & 0xFF]
                ^ t[3][crc_a >> 24] ^ self.crc)


_TailCrc = TailCrc          # the name other modules knew it by


def _libz_combine():
    try:
        libz = ctypes.CDLL(ctypes.util.find_library("z") or "libz.so.1")
        fn = libz.crc32_combine
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_ulong, ctypes.c_ulong, ctypes.c_long]
    fn.restype = ctypes.c_ulong
    return fn


def udp_sport(src_qpn, dst_qpn):
    """Entropy source port for a QP pair, in 49152..65535 (like mlx5 NICs)."""
    h = zlib.crc32(struct.pack("!II", src_qpn, dst_qpn))
    return 0xC000 | (h & 0x3FFF)


def opcode_for(kind, index, count):
    """The opcode of packet ``index`` of a ``count``-packet message."""
    only, first, middle, last = MESSAGE_OPCODES[kind]
    if count == 1:
        return only
    if index == 0:
        return first
    return last if index == count - 1 else middle


def _masked_prefix(frame):
    """The constant ICRC pseudo-header up to (excluding) the PSN word."""
    ip = bytearray(frame[ETH_LEN:ETH_LEN + IP_LEN])
    ip[1] = 0xFF                       # TOS (DSCP/ECN may change in flight)
    ip[8] = 0xFF                       # TTL
    ip[10:12] = b"\xff\xff"            # header checksum
    udp = bytearray(frame[BTH_OFF - UDP_LEN:BTH_OFF])
    udp[6:8] = b"\xff\xff"             # UDP checksum
    bth = bytearray(frame[BTH_OFF:PSN_OFF])
    bth[4] = 0xFF                      # FECN, BECN, reserved
    return b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth)


def _ip_checksum(header):
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def icrc(frame):
    """The ICRC of a complete frame (its last 4 bytes are ignored)."""
    crc = zlib.crc32(_masked_prefix(frame))
    return zlib.crc32(memoryview(frame)[PSN_OFF:len(frame) - ICRC_LEN], crc)


class FrameTemplate:
    """Pre-built frame bytes for one QP and one opcode; ``fill`` patches a copy.

    ``frame_len`` is the Ethernet frame length without FCS; the payload
    (probe + padding) fills what the headers leave.
    """

    def __init__(self, src_mac, dst_mac, src_ip, dst_ip, dst_qpn, src_qpn=None,
                 opcode="WRITE_ONLY", frame_len=1078, dscp=26, ecn=0,
                 sport=None, rkey=0x1234, vaddr=0, ackreq=False):
        # Imported here: only template construction needs scapy.
        from scapy.contrib.roce import BTH
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether
        from scapy.packet import Raw

        self.opcode = OPCODES[opcode] if isinstance(opcode, str) else opcode
        self.dst_qpn = dst_qpn
        self.src_qpn = dst_qpn if src_qpn is None else src_qpn
        self.sport = udp_sport(self.src_qpn, dst_qpn) if sport is None else sport
        self.probe_off = BTH_OFF + BTH_LEN
        reth = b""
        if self.opcode in RETH_OPCODES:
            self.probe_off += RETH_LEN
            payload_len = max(frame_len - HEADERS_LEN - RETH_LEN, PROBE.size)
            reth = struct.pack("!QII", vaddr, rkey, payload_len)
        pad_len = max(frame_len - self.probe_off - PROBE.size - ICRC_LEN, 0)
        # A fixed byte pattern so a corrupted payload fails the ICRC.
        pad = bytes((i * 7 + 3) & 0xFF for i in range(pad_len))
        probe = PROBE.pack(PROBE_MAGIC, 0, 0, 0, 0, 0, 0)
        pkt = (Ether(src=src_mac, dst=dst_mac)
               / IP(src=src_ip, dst=dst_ip, tos=(dscp << 2) | ecn, ttl=64,
                    flags="DF", id=0)
               / UDP(sport=self.sport, dport=ROCE_PORT, chksum=0)
               / BTH(opcode=self.opcode, dqpn=dst_qpn, psn=0, ackreq=int(ackreq))
               / Raw(reth + probe + pad))
        self.raw = bytes(pkt)
        self.len = len(self.raw)
        # the BTH AckReq bit shares the PSN's 32-bit word (its top bit)
        self.psn_flags = 0x80000000 if ackreq else 0
        # CRC state after the constant masked prefix: continued per packet.
        self._crc_prefix = zlib.crc32(_masked_prefix(self.raw))
        self._buf = bytearray(self.raw)
        # Everything after the probe header is constant padding: ``fill_head``
        # rewrites only the bytes before it and combines the CRC with the tail's.
        self.head = self.probe_off + PROBE.size
        self.tail_sig = (self.len, self.head)
        self._tail = TailCrc.of(self.raw[self.head:self.len - ICRC_LEN])

    def fill(self, buf, psn, tx_ns, flow=0, tag=0, chunk=0, index=0, count=0):
        """Write this template into writable ``buf`` with per-packet fields.

        Returns the frame length.  ``buf`` may be a bytearray, a memoryview
        or a ctypes buffer (the sender's sendmmsg slots).
        """
        n = self.len
        buf[:n] = self.raw
        struct.pack_into("!I", buf, PSN_OFF, (psn & PSN_MASK) | self.psn_flags)
        PROBE.pack_into(buf, self.probe_off, PROBE_MAGIC, flow,
                        tx_ns, tag, chunk, index, count)
        crc = zlib.crc32(memoryview(buf)[PSN_OFF:n - ICRC_LEN], self._crc_prefix)
        struct.pack_into("<I", buf, n - ICRC_LEN, crc)
        return n

    def fill_head(self, buf, psn, tx_ns, flow, whole):
        """``fill`` for the engine: copies only the headers unless ``whole``.

        A sendmmsg slot that last held a frame with the same ``tail_sig``
        already holds this frame's padding, so only the first ``head`` bytes
        change, and the ICRC is the CRC of those bytes combined with the
        tail's precomputed CRC (``TailCrc``): no pass over 4 KiB per frame.
        """
        n, head = self.len, self.head
        if whole:
            buf[:n] = self.raw
        else:
            buf[:head] = self.raw[:head]
        _PSN.pack_into(buf, PSN_OFF, (psn & PSN_MASK) | self.psn_flags)
        _PROBE_HEAD.pack_into(buf, self.probe_off, PROBE_MAGIC, flow, tx_ns)
        crc = self._tail.combine(zlib.crc32(memoryview(buf)[PSN_OFF:head], self._crc_prefix))
        _ICRC.pack_into(buf, n - ICRC_LEN, crc)
        return n

    def fill_packet(self, buf, psn, tx_ns, flow, tag, chunk, index, count, whole):
        """``fill_head`` with every probe field (a collective's packets): the probe
        lies inside the head, so the padding and its CRC are reused the same way."""
        n, head = self.len, self.head
        if whole:
            buf[:n] = self.raw
        else:
            buf[:head] = self.raw[:head]
        _PSN.pack_into(buf, PSN_OFF, (psn & PSN_MASK) | self.psn_flags)
        PROBE.pack_into(buf, self.probe_off, PROBE_MAGIC, flow, tx_ns, tag, chunk, index, count)
        crc = self._tail.combine(zlib.crc32(memoryview(buf)[PSN_OFF:head], self._crc_prefix))
        _ICRC.pack_into(buf, n - ICRC_LEN, crc)
        return n

    def resized(self, frame_len):
        """This template with another frame length, without scapy (a message's
        last, shorter packet): the lengths (IPv4, UDP, RETH), the IPv4 checksum,
        the padding and the CRC state are redone; the bytes equal what
        ``FrameTemplate(..., frame_len=frame_len)`` builds."""
        head = self.probe_off + PROBE.size
        pad_len = max(frame_len - head - ICRC_LEN, 0)
        raw = bytearray(self.raw[:head]) + bytes((i * 7 + 3) & 0xFF for i in range(pad_len)) \
            + bytes(ICRC_LEN)
        n = len(raw)
        struct.pack_into("!H", raw, ETH_LEN + 2, n - ETH_LEN)
        struct.pack_into("!H", raw, ETH_LEN + 10, 0)
        struct.pack_into("!H", raw, ETH_LEN + 10, _ip_checksum(raw[ETH_LEN:ETH_LEN + IP_LEN]))
        struct.pack_into("!H", raw, BTH_OFF - UDP_LEN + 4, n - ETH_LEN - IP_LEN)
        if self.opcode in RETH_OPCODES:
            struct.pack_into("!I", raw, BTH_OFF + BTH_LEN + 12, n - HEADERS_LEN - RETH_LEN)
        _ICRC.pack_into(raw, n - ICRC_LEN, icrc(raw))
        t = object.__new__(FrameTemplate)
        t.__dict__.update(self.__dict__)
        t.raw = bytes(raw)
        t.len = n
        t._crc_prefix = zlib.crc32(_masked_prefix(t.raw))
        t._buf = bytearray(t.raw)
        t.tail_sig = (n, head)
        t._tail = TailCrc.of(t.raw[head:n - ICRC_LEN])
        return t

    def with_sport(self, sport):
        """A copy of this template with another UDP source port (path entropy).

        The ICRC covers the UDP source port, so the constant CRC prefix is
        recomputed (cheap: ~60 bytes, no scapy).  Used by spraying/flowlet NICs.
        """
        t = object.__new__(FrameTemplate)
        t.__dict__.update(self.__dict__)
        raw = bytearray(self.raw)
        struct.pack_into("!H", raw, BTH_OFF - UDP_LEN, sport)
        t.sport = sport
        t.raw = bytes(raw)
        t._crc_prefix = zlib.crc32(_masked_prefix(t.raw))
        t._buf = bytearray(t.raw)
        return t

    def frame(self, psn, tx_ns=0, **fields):
        """One frame as bytes (convenient, slower than ``fill``)."""
        self.fill(self._buf, psn, tx_ns, **fields)
        return bytes(self._buf)


class Parsed:
    """The fields of a received frame the accounting needs."""

    __slots__ = ("src_ip", "dst_ip", "sport", "dscp", "ecn", "opcode", "dqpn", "psn", "ackreq",
                 "flow", "tx_ns", "tag", "chunk", "index", "count", "length",
                 "icrc_ok")


def parse(frame, verify=True):
    """Parse a RoCEv2 frame carrying a probe header; None if it is not one."""
    n = len(frame)
    if n < HEADERS_LEN + PROBE.size or frame[12:14] != b"\x08\x00":
        return None
    if frame[14] != 0x45 or frame[23] != 17 or frame[36:38] != b"\x12\xb7":
        return None
    op = frame[BTH_OFF]
    off = BTH_OFF + BTH_LEN + (RETH_LEN if op in RETH_OPCODES else 0)
    if off + PROBE.size + ICRC_LEN > n:
        return None
    magic, flow, tx_ns, tag, chunk, index, count = PROBE.unpack_from(frame, off)
    if magic != PROBE_MAGIC:
        return None
    p = Parsed()
    p.src_ip = bytes(frame[26:30])
    p.dst_ip = bytes(frame[30:34])
    p.sport = (frame[34] << 8) | frame[35]
    p.dscp = frame[15] >> 2
    p.ecn = frame[15] & 3
    p.ackreq = frame[PSN_OFF] >> 7
    p.opcode = op
    p.dqpn = int.from_bytes(frame[BTH_OFF + 5:BTH_OFF + 8], "big")
    p.psn = int.from_bytes(frame[PSN_OFF + 1:PSN_OFF + 4], "big")
    p.flow, p.tx_ns, p.tag, p.chunk, p.index, p.count = (
        flow, tx_ns, tag, chunk, index, count)
    p.length = n
    p.icrc_ok = (not verify) or (
        icrc(frame) == struct.unpack_from("<I", frame, n - ICRC_LEN)[0])
    return p


_FAST = struct.Struct("!4x4s4x4x")          # from the IP source address: src ip


class FastParser:
    """The engine's receive path: only what accounting needs, ICRC prefix cached.

    ``parse`` builds a ``Parsed`` and re-masks the headers for every frame;
    at tens of thousands of frames per second that is most of the receive
    cost.  The masked ICRC prefix depends only on header bytes that are
    constant per flow and path (addresses, ports, length, QP, opcode, TTL,
    TOS), so its CRC is cached by those raw bytes; the CRC is continued over
    the PSN word and payload per frame as ``icrc`` does.
    """

    def __init__(self, verify=True):
        self.verify = verify
        self._prefix = {}

    def __call__(self, frame, n):
        """(src ip bytes, flow, psn, tx_ns, icrc ok) of our frame, or None."""
        if n < HEADERS_LEN + PROBE.size or frame[12:14] != b"\x08\x00" or \
                frame[14] != 0x45 or frame[23] != 17 or frame[36:38] != b"\x12\xb7":
            return None
        off = BTH_OFF + BTH_LEN + (RETH_LEN if frame[BTH_OFF] in RETH_OPCODES else 0)
        if off + PROBE.size + ICRC_LEN > n:
            return None
        magic, flow, tx_ns = _PROBE_HEAD.unpack_from(frame, off)
        if magic != PROBE_MAGIC:
            return None
        psn = int.from_bytes(frame[PSN_OFF + 1:PSN_OFF + 4], "big")
        ok = self._icrc_ok(frame, n) if self.verify else True
        return bytes(frame[26:30]), flow, psn, tx_ns, ok

    def _icrc_ok(self, frame, n):
        """The frame's ICRC checks out: the CRC of its masked headers up to the PSN
        is cached per header prefix (a flow's frames share it), then run on."""
        key = bytes(frame[ETH_LEN:PSN_OFF])
        crc = self._prefix.get(key)
        if crc is None:
            if len(self._prefix) > 65536:
                self._prefix.clear()
            crc = self._prefix[key] = zlib.crc32(_masked_prefix(frame))
        return zlib.crc32(frame[PSN_OFF:n - ICRC_LEN], crc) == \
            int.from_bytes(frame[n - ICRC_LEN:n], "little")

    def rdma(self, frame, n):
        """Every field a collective's NIC needs of our data frame, or None:
        (src ip, dst ip, ecn, dqpn, psn, ackreq, flow, tx_ns, tag, chunk, index,
        count, icrc ok).  One unpack for the headers, the ICRC as ``__call__``."""
        if n < HEADERS_LEN + PROBE.size:
            return None
        etype, ver, tos, proto, src, dst, dport, op, qpw, psnw = _RDMA.unpack_from(frame, 12)
        if etype != 0x0800 or ver != 0x45 or proto != 17 or dport != ROCE_PORT:
            return None
        off = BTH_OFF + BTH_LEN + (RETH_LEN if op in RETH_OPCODES else 0)
        if off + PROBE.size + ICRC_LEN > n:
            return None
        magic, flow, tx_ns, tag, chunk, index, count = PROBE.unpack_from(frame, off)
        if magic != PROBE_MAGIC:
            return None
        ok = self._icrc_ok(frame, n) if self.verify else True
        return (src, dst, tos & 3, qpw & 0xFFFFFF, psnw & PSN_MASK, psnw >> 31, flow, tx_ns,
                tag, chunk, index, count, ok)


# from the EtherType: type, version/IHL, TOS, protocol, src, dst, UDP dport, BTH
# opcode, the word ending in the destination QP, the AckReq/PSN word
_RDMA = struct.Struct("!HBB7xB2x4s4s2xH4xB3xII")
