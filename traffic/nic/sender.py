"""Paced sender of pre-built RoCEv2 frames over a raw AF_PACKET socket.

Model.  A ``Flow`` is one QP stream: a ``FrameTemplate``, a flow id and the
next PSN.  ``Sender.run`` sends the flows round-robin, paced by a token
bucket (``pacing``) on CLOCK_MONOTONIC, until a duration, a packet count or a
byte count is reached.  ``Sender.emit`` sends one batch of already chosen
packets; the collective ranks pace themselves and call it.

Why sendmmsg through ctypes: Python's socket module has no sendmmsg, and one
syscall per batch is ~40% faster than one ``send`` per frame (PLATFORM.md).
Each batch slot is a bytearray whose address is fixed, so a template is
copied into it and patched in place: no per-packet allocation.
"""

import ctypes
import ctypes.util
import errno
import os
import socket
import time
from dataclasses import dataclass, field

from traffic.nic.pacing import TokenBucket, sleep_ns
from traffic.roce.frames import PSN_MASK, FrameTemplate

_FULL = (errno.EAGAIN, errno.ENOBUFS)                   # the interface's queue is full
_DOWN = (errno.ENETDOWN, errno.ENXIO)                   # the interface is down or gone
# How long a send its interface's queue refused waits before it tries again, as a
# NIC waits for room: retrying at once spins on the CPU the queues drain on, and
# every refused frame counts as a drop of that queue.
ROOM_WAIT_NS = 100_000

MAX_FRAME = 9216
MSG_DONTWAIT = 0x40
SO_SNDBUFFORCE = 32


class _iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _msghdr(ctypes.Structure):
    _fields_ = [("msg_name", ctypes.c_void_p), ("msg_namelen", ctypes.c_uint32),
                ("msg_iov", ctypes.POINTER(_iovec)), ("msg_iovlen", ctypes.c_size_t),
                ("msg_control", ctypes.c_void_p), ("msg_controllen", ctypes.c_size_t),
                ("msg_flags", ctypes.c_int)]


class _mmsghdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _msghdr), ("msg_len", ctypes.c_uint)]


def _libc_sendmmsg():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.sendmmsg
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SENDMMSG = _libc_sendmmsg()
_MMSG_SIZE = ctypes.sizeof(_mmsghdr)


class Flow:
    """One QP stream: template, flow id, next PSN, packets sent."""

    __slots__ = ("template", "flow_id", "psn", "sent")

    def __init__(self, template, flow_id, psn=0):
        self.template = template
        self.flow_id = flow_id
        self.psn = psn & PSN_MASK
        self.sent = 0


@dataclass
class SendStats:
    """What ``Sender.run`` did; per_flow maps flow id -> packets sent."""

    packets: int = 0
    bytes: int = 0
    start_ns: int = 0
    end_ns: int = 0
    per_flow: dict = field(default_factory=dict)

    @property
    def seconds(self):
        return max(self.end_ns - self.start_ns, 1) / 1e9

    def as_dict(self):
        return {"sent_packets": self.packets, "sent_bytes": self.bytes,
                "seconds": self.seconds,
                "pps": self.packets / self.seconds,
                "bps": self.bytes * 8 / self.seconds,
                "per_flow": {str(k): v for k, v in self.per_flow.items()}}


def open_raw(ifname, sndbuf=4 << 20):
    """A send-only AF_PACKET socket bound to ``ifname`` (protocol 0: receives nothing)."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, sndbuf)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.bind((ifname, 0))
    return sock


class Sender:
    """Sends frames on one interface, in sendmmsg batches when libc has it."""

    def __init__(self, ifname, batch=32, use_sendmmsg=True, sndbuf=4 << 20):
        self.ifname = ifname
        self.sock = open_raw(ifname, sndbuf)
        self.fd = self.sock.fileno()
        self.batch = max(1, batch)
        self.mmsg = use_sendmmsg and _SENDMMSG is not None
        self.slots = [bytearray(MAX_FRAME) for _ in range(self.batch)]
        self.iov = (_iovec * self.batch)()
        self.msgs = (_mmsghdr * self.batch)()
        self._msgs_addr = ctypes.addressof(self.msgs)
        self._sig = [None] * self.batch   # what padding each slot holds (``send_flows``)
        self.control_dropped = 0          # ``send_one`` frames that found no room
        self.link_down = 0                # frames sent while the interface was down
        self.queue_full = 0               # batches that waited for room in the NIC's queue
        self._keep = []
        for i, slot in enumerate(self.slots):
            cbuf = (ctypes.c_char * MAX_FRAME).from_buffer(slot)
            self._keep.append(cbuf)
            self.iov[i].iov_base = ctypes.addressof(cbuf)
            self.msgs[i].msg_hdr.msg_iov = ctypes.pointer(self.iov[i])
            self.msgs[i].msg_hdr.msg_iovlen = 1

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def emit(self, packets, clock=time.monotonic_ns):
        """Send ``packets``: tuples (template, psn, flow, tag, chunk, index, count).

        At most ``batch`` per call.  Returns the bytes sent.  The send
        timestamp is taken once per batch: it leaves within µs, unless a small
        send buffer (a rank's NIC ring) makes it wait for room, frame by frame.
        """
        now = clock()
        total = 0
        slots, iov = self.slots, self.iov
        if self.mmsg:
            for i, (tpl, psn, flow, tag, chunk, index, count) in enumerate(packets):
                n = tpl.fill(slots[i], psn, now, flow, tag, chunk, index, count)
                self._sig[i] = None
                iov[i].iov_len = n
                total += n
            self._sendmmsg(len(packets))
        else:
            send = self.sock.send
            slot = slots[0]
            self._sig[0] = None
            for tpl, psn, flow, tag, chunk, index, count in packets:
                n = tpl.fill(slot, psn, now, flow, tag, chunk, index, count)
                send(memoryview(slot)[:n])
                total += n
        return total

    def send_flows(self, flows, rr, n, clock=time.monotonic_ns):
        """Send ``n`` (<= batch) packets round-robin over ``flows`` from index ``rr``.

        The engine's path: each slot keeps the padding it last held, so only
        headers are rewritten (``FrameTemplate.fill_head``); PSNs and counts
        advance in the flows.  Returns the next round-robin index.
        """
        now = clock()
        slots, iov, sig = self.slots, self.iov, self._sig
        nf = len(flows)
        for i in range(n):
            f = flows[rr]
            rr = rr + 1 if rr + 1 < nf else 0
            tpl = f.template
            iov[i].iov_len = tpl.fill_head(slots[i], f.psn, now, f.flow_id,
                                           sig[i] != tpl.tail_sig)
            sig[i] = tpl.tail_sig
            f.psn = (f.psn + 1) & PSN_MASK
            f.sent += 1
        if self.mmsg:
            self._sendmmsg(n)
        else:
            for i in range(n):
                self.sock.send(memoryview(slots[i])[:iov[i].iov_len])
        return rr

    def post(self, packets, now):
        """Put ``packets`` (``emit``'s tuples, at most ``batch``) on the wire without
        waiting: returns how many left, a prefix.  A full interface queue (the send
        buffer, a paused link) takes no more now and the rest stay with the
        caller, as a NIC's frames wait in its queues; only the headers are
        rewritten per frame (``FrameTemplate.fill_packet``).  One process serving
        many NICs must not block on one of them (``traffic.jobs.job``)."""
        slots, iov, sig = self.slots, self.iov, self._sig
        for i, (tpl, psn, flow, tag, chunk, index, count) in enumerate(packets):
            iov[i].iov_len = tpl.fill_packet(slots[i], psn, now, flow, tag, chunk, index,
                                             count, sig[i] != tpl.tail_sig)
            sig[i] = tpl.tail_sig
        n, done = len(packets), 0
        while done < n:
            if self.mmsg:
                r = _SENDMMSG(self.fd, self._msgs_addr + done * _MMSG_SIZE, n - done,
                              MSG_DONTWAIT)
            else:
                r = self._send_dontwait(done)
            if r >= 0:
                done += r
                continue
            err = ctypes.get_errno()
            if err == errno.EINTR:
                continue
            if err in _FULL:
                self.queue_full += 1
                break
            if err in _DOWN:                   # lost on the wire (a fault), as ``emit``
                self.link_down += n - done
                return n
            raise OSError(err, os.strerror(err))
        return done

    def _send_dontwait(self, i):
        """One frame of slot ``i`` without sendmmsg: 1, or -1 with ctypes' errno set."""
        try:
            self.sock.send(memoryview(self.slots[i])[:self.iov[i].iov_len], MSG_DONTWAIT)
            return 1
        except OSError as e:
            ctypes.set_errno(e.errno)
            return -1

    def send_one(self, frame, patience_s=1.0):
        """Send one frame (an ACK, NAK or CNP) as a NIC would: when the interface's
        queue is full (ENOBUFS, EAGAIN) wait for room rather than lose it; a frame
        that found no room for ``patience_s``, or an interface that is down, is
        dropped and counted (``control_dropped``).  Returns whether it left.
        (Behind a rank's small send buffer the kernel itself waits for room.)"""
        end = time.monotonic() + patience_s
        while True:
            try:
                self.sock.send(frame)
                return True
            except OSError as e:
                if e.errno in _FULL and time.monotonic() <= end:
                    sleep_ns(ROOM_WAIT_NS)
                    continue
                if e.errno in _FULL + _DOWN:
                    self.control_dropped += 1
                    return False
                raise

    def _sendmmsg(self, count):
        done = 0
        while done < count:
            r = _SENDMMSG(self.fd, self._msgs_addr + done * _MMSG_SIZE,
                          count - done, 0)
            if r < 0:
                err = ctypes.get_errno()
                if err == errno.EINTR:         # a signal, not a full queue: at once
                    continue
                if err in _FULL:
                    self.queue_full += 1
                    sleep_ns(ROOM_WAIT_NS)
                    continue
                if err in _DOWN:               # the interface is down (a fault): the
                    self.link_down += count - done   # frames are lost on the wire
                    return
                raise OSError(err, os.strerror(err))
            done += r

    def run(self, flows, rate_bps=None, rate_pps=None, burst=None,
            duration=None, packets=None, nbytes=None, clock=time.monotonic_ns,
            pause=None):
        """Send ``flows`` round-robin, paced, until a limit; returns SendStats.

        No rate means as fast as possible.  ``pause=(after_s, length_s)``
        stops sending for ``length_s`` once ``after_s`` seconds have passed
        (an injected gap for disruption tests).
        """
        if duration is None and packets is None and nbytes is None:
            raise ValueError("give a duration, a packet count or a byte count")
        burst = burst or self.batch
        flen = max(f.template.len for f in flows)
        bucket = None
        if rate_bps:
            bucket, unit = TokenBucket(rate_bps, burst * flen * 8, clock()), 8
        elif rate_pps:
            bucket, unit = TokenBucket(rate_pps, burst, clock()), None
        stats = SendStats(start_ns=clock())
        end_ns = stats.start_ns + int(duration * 1e9) if duration else None
        pause_at = stats.start_ns + int(pause[0] * 1e9) if pause else None
        nflows, rr = len(flows), 0
        while True:
            now = clock()
            if end_ns is not None and now >= end_ns:
                break
            if pause_at is not None and now >= pause_at:
                sleep_ns(int(pause[1] * 1e9))
                pause_at = None
                if bucket:
                    bucket.refill(clock())
                    bucket.tokens = min(bucket.tokens, unit * flen if unit else 1)
                continue
            n = self.batch
            if packets is not None:
                n = min(n, packets - stats.packets)
            if nbytes is not None:
                n = min(n, -(-(nbytes - stats.bytes) // flen))
            if n <= 0:
                break
            if bucket:
                bucket.refill(now)
                cost = flen * 8 if unit else 1
                n = min(n, int(bucket.tokens // cost))
                if n <= 0:
                    wait = bucket.wait_ns(cost)
                    if end_ns is not None:
                        wait = min(wait, end_ns - now)
                    sleep_ns(wait)
                    continue
            batch = []
            for _ in range(n):
                f = flows[rr]
                rr = rr + 1 if rr + 1 < nflows else 0
                batch.append((f.template, f.psn, f.flow_id, 0, 0, 0, 0))
                f.psn = (f.psn + 1) & PSN_MASK
                f.sent += 1
            sent = self.emit(batch, clock)
            if bucket:
                bucket.consume(sent * 8 if unit else n)
            stats.packets += n
            stats.bytes += sent
        stats.end_ns = clock()
        stats.per_flow = {f.flow_id: f.sent for f in flows}
        return stats


def make_flows(src_mac, dst_mac, src_ip, dst_ip, qps=1, first_flow=0,
               first_qpn=0x100, frame_len=1078, dscp=26, opcode="WRITE_ONLY", qpns=None):
    """``qps`` flows of one connection: distinct QPs, hence distinct UDP sports;
    ``qpns``: the QP numbers themselves (else ``first_qpn`` and up)."""
    flows = []
    for q, qpn in enumerate(qpns or range(first_qpn, first_qpn + qps)):
        tpl = FrameTemplate(src_mac, dst_mac, src_ip, dst_ip, dst_qpn=qpn,
                            src_qpn=qpn, opcode=opcode, frame_len=frame_len,
                            dscp=dscp)
        flows.append(Flow(tpl, first_flow + q))
    return flows
