"""RoCEv2 frame layout and ICRC against scapy's own dissection."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from traffic.roce import frames
from traffic.roce.frames import FrameTemplate, opcode_for, parse, udp_sport

MACS = ("02:00:00:00:00:01", "02:00:00:00:00:02")


def template(**kw):
    args = dict(dst_qpn=0x1234, src_qpn=0x77, opcode="WRITE_ONLY", frame_len=1078, dscp=26)
    args.update(kw)
    return FrameTemplate(*MACS, "10.0.0.1", "10.0.1.2", **args)


def scapy_icrc(frame):
    """scapy recomputes the ICRC when the field is reset to None."""
    p = Ether(frame)
    p[BTH].icrc = None
    return raw(p)[-4:]


@pytest.mark.parametrize("opcode", ["WRITE_ONLY", "WRITE_FIRST", "WRITE_MIDDLE",
                                    "WRITE_LAST", "SEND_ONLY"])
def test_layout_matches_scapy_dissection(opcode):
    t = template(opcode=opcode)
    f = t.frame(0xABCDE, tx_ns=123456789, flow=9, tag=2, chunk=5, index=3, count=8)
    p = Ether(f)
    assert len(f) == 1078
    assert p[IP].tos >> 2 == 26 and p[IP].src == "10.0.0.1" and p[IP].dst == "10.0.1.2"
    assert p[UDP].dport == 4791 and p[UDP].chksum == 0
    assert p[UDP].sport == udp_sport(0x77, 0x1234)
    assert p[BTH].opcode == frames.OPCODES[opcode]
    assert p[BTH].dqpn == 0x1234 and p[BTH].psn == 0xABCDE
    assert f[-4:] == scapy_icrc(f)
    q = parse(f)
    assert q.icrc_ok
    assert (q.flow, q.tx_ns, q.tag, q.chunk, q.index, q.count) == (9, 123456789, 2, 5, 3, 8)
    assert (q.psn, q.dqpn, q.dscp, q.opcode) == (0xABCDE, 0x1234, 26, frames.OPCODES[opcode])


@settings(max_examples=50, deadline=None)
@given(psn=st.integers(0, (1 << 24) - 1), ts=st.integers(0, (1 << 64) - 1),
       flow=st.integers(0, (1 << 32) - 1), size=st.integers(100, 1500))
def test_patched_icrc_equals_scapy(psn, ts, flow, size):
    t = template(frame_len=size)
    f = t.frame(psn, tx_ns=ts, flow=flow)
    assert Ether(f)[BTH].psn == psn
    assert f[-4:] == scapy_icrc(f)


def test_psn_wraps_to_24_bits():
    f = template().frame((1 << 24) + 5)
    assert Ether(f)[BTH].psn == 5


def test_corruption_fails_icrc():
    f = bytearray(template().frame(1, tx_ns=5))
    f[200] ^= 0x01
    assert parse(bytes(f)).icrc_ok is False
    # TTL and DSCP are masked: routers may change them without breaking the ICRC.
    g = bytearray(template().frame(1, tx_ns=5))
    g[22] = 3
    g[15] = 0
    assert parse(bytes(g)).icrc_ok


def test_sport_entropy_spreads_qps():
    ports = {udp_sport(q, q) for q in range(0x100, 0x140)}
    assert all(49152 <= p <= 65535 for p in ports)
    assert len(ports) >= 60


def test_message_opcodes():
    assert [opcode_for("WRITE", i, 3) for i in range(3)] == [
        "WRITE_FIRST", "WRITE_MIDDLE", "WRITE_LAST"]
    assert opcode_for("WRITE", 0, 1) == "WRITE_ONLY"


def test_parse_rejects_foreign_frames():
    plain = raw(Ether() / IP() / UDP(dport=4791) / (b"x" * 100))
    assert parse(plain) is None
    assert parse(raw(Ether() / IP() / UDP(dport=53) / (b"x" * 100))) is None
    assert parse(template().frame(0)[:40]) is None


def test_fill_into_slot_is_independent_of_previous_contents():
    t1, t2 = template(frame_len=1078), template(frame_len=200, dst_qpn=5)
    buf = bytearray(2000)
    t1.fill(buf, 1, 2)
    n = t2.fill(buf, 3, 4)
    assert bytes(buf[:n]) == t2.frame(3, 4)
    assert struct.unpack_from("<I", buf, n - 4)[0] == frames.icrc(bytes(buf[:n]))


class _FullThenRoom:
    """A socket whose interface queue is full for ``full`` sends, then sends."""

    def __init__(self, full, err):
        self.full, self.err, self.sent = full, err, []

    def send(self, frame):
        if self.full:
            self.full -= 1
            raise OSError(self.err, "no room")
        self.sent.append(frame)


def test_control_frames_wait_for_room_like_a_nic_and_never_crash_the_rank():
    import errno

    import pytest

    from traffic.nic.sender import Sender
    s = Sender.__new__(Sender)
    s.control_dropped = 0
    s.sock = _FullThenRoom(3, errno.ENOBUFS)
    assert s.send_one(b"ack") and s.sock.sent == [b"ack"] and s.control_dropped == 0
    s.sock = _FullThenRoom(10 ** 9, errno.ENOBUFS)               # never any room
    assert not s.send_one(b"ack", patience_s=0.01) and s.control_dropped == 1
    s.sock = _FullThenRoom(1, errno.ENETDOWN)                    # the link is down
    assert not s.send_one(b"ack") and s.control_dropped == 2
    s.sock = _FullThenRoom(1, errno.EBADF)                       # a bug: said loudly
    with pytest.raises(OSError):
        s.send_one(b"ack")


def test_data_batches_wait_for_room_in_the_nic_queue_instead_of_spinning(monkeypatch):
    # a full interface queue refuses a frame (and its shaper counts a drop) at every
    # attempt: the sender waits for room, as a NIC does, rather than retry at once
    import ctypes
    import errno
    import time

    from traffic.nic import sender as sender_mod
    # one sent, refused twice (a signal between: not a full queue), the other two sent
    replies = [(1, 0), (-1, errno.ENOBUFS), (-1, errno.EINTR), (-1, errno.ENOBUFS), (2, 0)]
    calls = []

    def fake_sendmmsg(fd, addr, count, flags):
        calls.append(count)
        r, err = replies.pop(0)
        if r < 0:
            ctypes.set_errno(err)
        return r
    monkeypatch.setattr(sender_mod, "_SENDMMSG", fake_sendmmsg)
    s = sender_mod.Sender.__new__(sender_mod.Sender)
    s.fd, s._msgs_addr, s.queue_full, s.link_down = 3, 0, 0, 0
    t0 = time.monotonic()
    s._sendmmsg(3)
    assert calls == [3, 2, 2, 2, 2] and s.queue_full == 2 and s.link_down == 0
    assert time.monotonic() - t0 >= 150e-6        # waited twice (100 us each)
