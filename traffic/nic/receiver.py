"""Receiver: AF_PACKET capture of RoCEv2 frames into ``accounting``.

Model.  One packet socket bound to an interface sees every IPv4 frame; the
filter is Python, not BPF: UDP destination port 4791 carrying our probe
header (``frames.parse``).  Frames the host itself sends (PACKET_OUTGOING)
are skipped, so a rank can send and receive on one interface.  Each frame is
stamped with CLOCK_MONOTONIC at ``recv`` (the senders stamp the same clock,
shared by every namespace of a host: one-way latency is meaningful).

A UDP socket bound to port 4791 ("sink") is held open meanwhile so that the
kernel does not answer every RoCE datagram with an ICMP port unreachable; it
is never read, its small buffer just overflows (``open_sinks``: one per
transport's port, RoCEv2's and UET's, for the ranks and the job engine).

Flows are keyed ``"<source IP>#<flow id>"`` (the sender CLI uses the same
keys for its per-flow counts), so several senders may use the same ids.

Stop conditions: ``expected`` packets received, ``idle`` seconds without a
matching frame (counted from the first one, or from the start when
``idle_from_start``), or a ``deadline`` in seconds.
"""

import errno
import select
import socket
import struct
import time

from traffic.nic.accounting import Accounting
from traffic.roce.frames import ROCE_PORT, parse
from traffic.uet.layout import UET_PORT

ETH_P_IP = 0x0800
PACKET_OUTGOING = 4
SO_RCVBUFFORCE = 33
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23


def open_capture(ifname, rcvbuf=32 << 20):
    """A packet socket receiving the IPv4 frames ``ifname`` receives.

    The host's own outgoing frames are not delivered to it (PACKET_IGNORE_OUTGOING,
    Linux 4.20): a sender would otherwise read back a copy of every frame it sent,
    waking for each (readers still skip PACKET_OUTGOING, for older kernels)."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    try:
        sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    except OSError:
        pass
    sock.bind((ifname, ETH_P_IP))
    return sock


def nothing_more(e):
    """Whether an ``OSError`` from a packet socket's read just ends the read: nothing
    waiting, or the interface went down (a fault; the socket works again once it
    is back up)."""
    return isinstance(e, BlockingIOError) or e.errno == errno.ENETDOWN


def socket_drops(sock):
    """Frames the kernel dropped on packet socket ``sock`` since the last call
    (PACKET_STATISTICS; reading resets it): the reader was too slow."""
    raw = sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
    return struct.unpack("II", raw)[1]


def open_sink(port=ROCE_PORT):
    """UDP socket on ``port`` that keeps the kernel from sending ICMP errors."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        s.bind(("0.0.0.0", port))
    except OSError:              # someone else holds it: they suppress ICMP too
        s.close()
        return None
    return s


def open_sinks(ports=(ROCE_PORT, UET_PORT)):
    """``open_sink`` of each transport's port: the sockets this process holds."""
    return [s for s in map(open_sink, ports) if s is not None]


class Receiver:
    """Receives on ``ifname`` and accounts per flow id."""

    def __init__(self, ifname, gap_threshold_ms=10.0, verify_icrc=True):
        self.sock = open_capture(ifname)
        self.sink = open_sink()
        self.verify = verify_icrc
        self.acct = Accounting(gap_threshold_ns=int(gap_threshold_ms * 1e6))
        self.other = 0           # IPv4 frames that were not ours

    def close(self):
        self.sock.close()
        if self.sink:
            self.sink.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, expected=None, idle=None, deadline=None, idle_from_start=False,
            on_packet=None, clock=time.monotonic_ns):
        """Receive until a stop condition; returns the ``Accounting``.

        ``on_packet(parsed, arrival_ns)`` is called for each of our frames
        (the collective ranks use it for chunk bookkeeping).
        """
        if expected is None and idle is None and deadline is None:
            raise ValueError("give expected, idle or deadline")
        start = clock()
        end = start + int(deadline * 1e9) if deadline else None
        idle_ns = int(idle * 1e9) if idle else None
        last = start if idle_from_start else None
        buf = bytearray(9216)
        mv = memoryview(buf)
        sock, acct = self.sock, self.acct
        sock.setblocking(False)
        count = 0
        names = {}
        while True:
            try:
                n, addr = sock.recvfrom_into(buf)
            except BlockingIOError:
                now = clock()
                limits = []
                if end is not None:
                    limits.append(end - now)
                if idle_ns is not None and last is not None:
                    limits.append(last + idle_ns - now)
                timeout = min(limits) / 1e9 if limits else 0.1
                if timeout <= 0:
                    break
                select.select([sock], [], [], min(timeout, 0.1))
                continue
            now = clock()
            if addr[2] == PACKET_OUTGOING:
                continue
            p = parse(mv[:n], self.verify)
            if p is None:
                self.other += 1
                continue
            if not p.icrc_ok:
                acct.corrupted += 1
                continue
            key = names.get((p.src_ip, p.flow))
            if key is None:      # "<src ip>#<flow>": senders number flows from 0
                key = names[(p.src_ip, p.flow)] = f"{socket.inet_ntoa(p.src_ip)}#{p.flow}"
            acct.add(key, p.psn, now, n, p.tx_ns)
            if on_packet is not None:
                on_packet(p, now)
            last = now
            count += 1
            if expected is not None and count >= expected:
                break
            if end is not None and now >= end:
                break
        return acct
