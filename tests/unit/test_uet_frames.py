"""UET frames: the patched templates, their parsers and the scapy dissector agree."""

import shutil
import subprocess

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from tests.conftest import REPO
from traffic.uet import layout, scapy_layer
from traffic.uet.control import ControlTemplate, crc_ok, parse_control
from traffic.uet.frames import DataTemplate, Wire, is_uet, parse_data
from traffic.uet.layout import (
    ACK_CC,
    CTRL,
    CTRL_CLOSE_CMD,
    F_RETX,
    F_SYN,
    NACK,
    NACK_TRIMMED,
    ROD_REQ,
    RUD_CC_REQ,
    RUD_REQ,
    TRIM_BYTES,
    TRIM_DSCP,
    UET_PORT,
    frame_len_for_mtu,
    psn_diff,
)

A = ("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.1.2")


def trimmed(frame, size=TRIM_BYTES):
    """What a switch's trim step leaves of ``frame`` (lengths and checksum as trim.h)."""
    f = bytearray(frame[:size])
    f[15] = (TRIM_DSCP << 2) | (f[15] & 3)
    pkt = Ether(bytes(f))
    pkt[IP].len, pkt[IP].chksum, pkt[UDP].len = None, None, None
    return bytes(pkt)


def test_udp_port_and_header_lengths():
    assert UET_PORT == 4793
    assert layout.PDS_OFF == 42
    assert frame_len_for_mtu(4096) == 42 + 12 + 44 + 4096 + 4
    assert frame_len_for_mtu(4096, cc_state=True) == frame_len_for_mtu(4096) + 4
    assert TRIM_BYTES == 134


def test_psn_serial_arithmetic_wraps():
    assert psn_diff(0, 0xFFFFFFFF) == 1
    assert psn_diff(0xFFFFFFFF, 0) == -1
    assert psn_diff(5, 5) == 0


@pytest.mark.parametrize("rod,cc_state", [(False, False), (True, False), (False, True)])
def test_a_data_frame_round_trips_through_its_parser_and_scapy(rod, cc_state):
    t = DataTemplate(*A, payload=4096, ar=True, rod=rod, cc_state=cc_state)
    assert t.len == frame_len_for_mtu(4096, cc_state)
    w = Wire(t, ev=0xC123, flags=F_SYN | F_RETX, spdcid=77, dpdcid=5, clear=-3, credit=9000)
    buf = bytearray(t.len)
    n = w.fill(buf, 0x12345678, 42, 0x0102, 7, 3, 2, 5)
    frame = bytes(buf[:n])
    assert is_uet(frame)
    d = parse_data(frame)
    assert d.ok and not d.trimmed
    assert (d.psn, d.ev, d.spdcid, d.dpdcid, d.clear) == (0x12345678, 0xC123, 77, 5, -3)
    assert d.syn and d.flags & F_RETX and d.flags & layout.F_AR
    assert (d.tag, d.chunk, d.index, d.count, d.tx_ns, d.flow) == (7, 3, 2, 5, 42, 0x0102)
    assert d.credit_target == (9000 if cc_state else 0)
    assert d.ecn == 2                       # ECT(0)
    pkt = Ether(frame)
    u = scapy_layer.uet_layer(pkt)
    assert isinstance(u, scapy_layer.UETRequest)
    want = (ROD_REQ if rod else RUD_REQ) if not cc_state else RUD_CC_REQ
    assert (u.type, u.psn, u.spdcid, u.syn, u.ar, u.retx) == (want, 0x12345678, 77, 1, 1, 1)
    assert u.psn_offset == 5
    ses = pkt[scapy_layer.UETSes]
    assert ses.opcode == layout.SES_WRITE and not ses.som and not ses.eom
    assert ses.message_offset == 2 * 4096 and ses.request_length == 5 * 4096
    assert pkt[UDP].sport == 0xC123 and pkt[UDP].chksum == 0
    s = scapy_layer.summary(pkt)
    assert s["type"] == layout.TYPE_NAMES[want] and s["psn"] == 0x12345678 and not s["trimmed"]


def test_a_corrupted_data_frame_fails_its_trailer():
    t = DataTemplate(*A, payload=1024)
    frame = bytearray(t.frame(9))
    frame[500] ^= 0xFF
    d = parse_data(bytes(frame))
    assert d is not None and not d.ok and not d.trimmed


def test_a_trimmed_frame_keeps_what_its_receiver_nacks():
    t = DataTemplate(*A, payload=4096)
    frame = trimmed(t.frame(0xABCDEF, tag=4, chunk=1, index=3, count=9,
                            spdcid=12, dpdcid=34))
    assert len(frame) == TRIM_BYTES
    d = parse_data(frame)
    assert d.trimmed and not d.ok
    assert (d.psn, d.spdcid, d.dpdcid, d.tag, d.index) == (0xABCDEF, 12, 34, 4, 3)
    pkt = Ether(frame)
    assert pkt[IP].len == TRIM_BYTES - 14 and pkt[UDP].len == TRIM_BYTES - 34
    assert scapy_layer.summary(pkt)["trimmed"]


def test_acks_nacks_and_controls_round_trip():
    c = ControlTemplate(*A)
    ack = c.ack(3, 4, cack=100, ack_psn=110, sack_base=102, bitmap=0b1011, ecn=True,
                ooo=3, rcvd=12345, ev=0xC00F)
    assert crc_ok(ack)
    p = parse_control(ack)
    assert p.ok and p.ptype == ACK_CC and p.ecn and not p.close
    assert (p.spdcid, p.dpdcid, p.cack, p.ack_psn, p.sack_base) == (3, 4, 100, 110, 102)
    assert p.sacked() == [102, 103, 105]
    assert (p.rcvd, p.ooo, p.credit) == (12345, 3, None)
    pkt = Ether(ack)
    a = pkt[scapy_layer.UETAck]
    assert (a.cack_psn, a.ack_psn, a.sack_base, a.sack_bitmap, a.ecn_marked) == \
        (100, 110, 102, 0b1011, 1)
    assert pkt[UDP].sport == 0xC00F

    credit = parse_control(c.ack(3, 4, 7, 7, 8, 0, credit=8192, close=True))
    assert credit.credit == 8192 and credit.close

    nack = parse_control(c.nack(5, 6, 0xFFFFFFF0, NACK_TRIMMED, high=0xFFFFFFF5))
    assert nack.ok and (nack.ptype, nack.code, nack.psn, nack.high) == \
        (NACK, NACK_TRIMMED, 0xFFFFFFF0, 0xFFFFFFF5)
    n = Ether(c.nack(5, 6, 9, NACK_TRIMMED))[scapy_layer.UETNack]
    assert (n.nack_code, n.nack_psn, n.spdcid, n.dpdcid) == (NACK_TRIMMED, 9, 5, 6)

    ctl = parse_control(c.control(8, 9, CTRL_CLOSE_CMD, 77, payload=5, ar=True))
    assert (ctl.ptype, ctl.ctl_type, ctl.psn, ctl.payload) == (CTRL, CTRL_CLOSE_CMD, 77, 5)
    s = scapy_layer.summary(Ether(c.control(8, 9, CTRL_CLOSE_CMD, 77)))
    assert s == {"type": "CONTROL", "sport": 0xC000, "psn": 77, "control": "CLOSE_CMD"}


def test_a_cumulative_ack_far_behind_its_psn_clamps_the_offset():
    c = ControlTemplate(*A)
    p = parse_control(c.ack(1, 2, cack=0, ack_psn=100000, sack_base=1, bitmap=0))
    assert p.ack_psn == 32767


def test_data_is_not_taken_for_control_nor_the_reverse():
    t = DataTemplate(*A, payload=256)
    c = ControlTemplate(*A)
    assert parse_control(t.frame(1)) is None
    assert parse_data(c.ack(1, 2, 3, 3, 4, 0)) is None
    assert parse_data(b"\x00" * 200) is None


@pytest.mark.skipif(shutil.which("tshark") is None, reason="no tshark")
def test_the_wireshark_dissector_reads_the_same_fields(tmp_path):
    """examples/wireshark/uet.lua in tshark: each frame's summary line."""
    from scapy.utils import wrpcap
    t = DataTemplate(*A, payload=4096, ar=True)
    c = ControlTemplate(*A)
    frames = [t.frame(1000, spdcid=9, dpdcid=3, flags=F_SYN), trimmed(t.frame(1002)),
              c.ack(17, 9, 1000, 1003, 1002, 0b101, ecn=True),
              c.nack(17, 9, 1002, NACK_TRIMMED, high=1004),
              c.control(9, 17, CTRL_CLOSE_CMD, 1004)]
    pcap = tmp_path / "uet.pcap"
    wrpcap(str(pcap), [Ether(f) for f in frames])
    out = subprocess.run(["tshark", "-X", f"lua_script:{REPO}/examples/wireshark/uet.lua",
                          "-r", str(pcap), "-T", "fields", "-e", "_ws.col.Info",
                          "-e", "uet.sacked"],
                         capture_output=True, text=True, timeout=60).stdout.splitlines()
    assert out == ["RUD_REQ PSN 1000 SYN AR\t", "RUD_REQ PSN 1002 AR [TRIMMED]\t",
                   "ACK_CC cack 1000 ack 1003 ECN\t1002 1004", "NACK TRIMMED PSN 1002\t",
                   "CONTROL CLOSE_CMD PSN 1004\t"]
