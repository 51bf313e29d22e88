"""Packet trimming (root): the switch egress program's trim step, run by the kernel on
given frames (BPF_PROG_TEST_RUN).

A UET data frame that finds the port's counted queue past the threshold leaves
cut to its headers, with a valid IPv4 header (total length, checksum), the UDP
length fixed, the trimmed DSCP (its ECN bits kept), the priority class ahead of
data, and counted as a trim; the scapy layer and the traffic engine's parser
read what is left (PDS type, PSN, the probe).  Under the threshold, a RoCE frame,
a UET acknowledgement or a port without trimming: nothing cut.  Then on a veth
shaped as a trimming switch port (TBF, strict-priority class, size table): a
burst is trimmed past the threshold, the counted queue comes back to 0, and the
shaper charged every trimmed frame its trimmed length, not its whole one.
"""

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): no fabric
LAYOUT_INDEPENDENT = True

import socket
import struct
import time
from contextlib import contextmanager

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from traffic_fixtures import ECN_RATE, checksum_ok, jumbo_veth, wait_until
from traffic_fixtures import lab  # noqa: F401  (a fixture)

from emulator.dataplane import bpf
from emulator.dataplane.lossless import ecnq, trim
from traffic.roce.frames import FrameTemplate
from traffic.uet import control, frames, layout, scapy_layer
from traffic.uet.pdcs import UetConfig, UetPdcs

LEN = 3000                     # BPF_PROG_TEST_RUN takes frames up to ~3.5 kB
AT = 20000                     # trim past this many bytes queued
MACS = ("02:00:00:00:00:01", "02:00:00:00:00:02")


def uet_frame(psn=0x1234567, index=3):
    t = frames.DataTemplate(*MACS, "10.0.0.1", "10.0.1.2", LEN - layout.headers_len())
    return t.frame(psn, tx_ns=99, flow=7, tag=2, chunk=5, index=index, count=8, ev=0xC0DE)


@contextmanager
def program(trimming=True, queued=0):
    """(map, egress program fd) of a port with ``queued`` bytes counted in."""
    m = bpf.Map(ecnq.ENTRY.size, 1)
    try:
        m.update(0, ecnq.ENTRY.pack(queued, 0, 0, 0))
        t = trim.Trim(size=layout.TRIM_BYTES, at=AT) if trimming else None
        with ecnq.programs(m, 0, 10 ** 6, ecnq.NEVER, ecnq.NEVER, 1.0, 1000, trim=t) as fds:
            yield m, fds["ecnq_in"]
    finally:
        m.close()


def counted(m):
    i, o, _, trims = ecnq.ENTRY.unpack(m.lookup(0))
    return i - o, trims


def test_a_frame_past_the_threshold_leaves_trimmed_ahead_of_data():
    f = uet_frame()
    with program(queued=AT - LEN // 2) as (m, fd):
        ret, out, priority = bpf.test_run_skb(fd, f)
        assert ret == ecnq.TC_ACT_OK
        assert len(out) == layout.TRIM_BYTES
        assert priority == trim.CLASS_HIGH
        assert counted(m) == (AT - LEN // 2 + layout.TRIM_BYTES, 1)
    p = Ether(out)
    assert p[IP].len == layout.TRIM_BYTES - 14 and p[UDP].len == layout.TRIM_BYTES - 34
    assert checksum_ok(out)
    assert p[IP].tos >> 2 == layout.TRIM_DSCP and p[IP].tos & 3 == 2      # ECT(0) kept
    s = scapy_layer.summary(p)
    assert s["type"] == "RUD_REQ" and s["psn"] == 0x1234567 and s["trimmed"]
    d = frames.parse_data(out)
    assert d.trimmed and not d.ok
    assert (d.psn, d.tag, d.chunk, d.index, d.count, d.ev) == (0x1234567, 2, 5, 3, 8, 0xC0DE)


def test_under_the_threshold_a_frame_goes_whole():
    f = uet_frame()
    with program(queued=AT - LEN) as (m, fd):
        ret, out, priority = bpf.test_run_skb(fd, f)
        assert out == f and priority == 0
        assert counted(m) == (AT, 0)


def test_only_uet_data_is_trimmed():
    roce = FrameTemplate(*MACS, "10.0.0.1", "10.0.1.2", 0x100, frame_len=LEN).raw
    ack = control.ControlTemplate(*MACS, "10.0.1.2", "10.0.0.1").ack(1, 2, 10, 10, 11, 0)
    with program(queued=10 * AT) as (m, fd):
        _, out, priority = bpf.test_run_skb(fd, roce)
        assert out == roce and priority == 0             # dropped by the TBF, not trimmed
        _, out, priority = bpf.test_run_skb(fd, ack)
        assert out == ack and priority == trim.CLASS_HIGH  # acknowledgements ahead of data
        assert counted(m)[1] == 0


def test_a_port_without_trimming_leaves_frames_and_classes_alone():
    f = uet_frame()
    with program(trimming=False, queued=10 * AT) as (m, fd):
        _, out, priority = bpf.test_run_skb(fd, f)
        assert out == f and priority == 0
        assert counted(m)[1] == 0


def test_a_trimmed_frame_is_nacked_by_its_receiver():
    """What the receiving NIC does with it: a NACK with code TRIMMED for its PSN."""
    f = bytearray(uet_frame(index=0))
    struct.pack_into("!H", f, layout.PDS_OFF + 10, 0)     # SYN's offset 0: a new PDC
    f[layout.PDS_OFF + 1] |= layout.F_SYN
    with program(queued=AT) as (m, fd):
        _, out, _ = bpf.test_run_skb(fd, bytes(f))
    sent = []
    rx = UetPdcs(UetConfig(line_bps=40e6), sent.append, MACS[1], "10.0.1.2")
    got = rx.receive(out, len(out), 0, lambda ip: (MACS[0], "10.0.0.1"))
    assert got is not None and got[1] is False           # not placed
    c = control.parse_control(sent[0])
    assert c.ptype == layout.NACK and c.code == layout.NACK_TRIMMED and c.psn == 0x1234567


def test_a_trimming_port_charges_a_trimmed_frame_its_trimmed_length(lab):
    """40 whole UET frames back to back into a 40 Mbit/s trimming port with a
    threshold of 5 frames: the shaper's bytes sent are the frames as they left
    (whole ones and 134-byte ones), the kernel having taken each length after the
    trim (the port's size table); the counted queue drains to 0."""
    from pyroute2 import IPRoute

    from emulator.dataplane.links import shaping
    whole = layout.frame_len_for_mtu(4096)
    ia, ib, b = jumbo_veth(lab)
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=ia)[0]
        trim.apply_tree(ipr, idx, shaping.tbf_params(ECN_RATE, 30.0, whole), whole)
    marker = ecnq.DequeueMarker(None, [(ia, f"/run/netns/{b}", ib, ECN_RATE)], whole, 30.0,
                                whole, trim=trim.Trim(at=5 * whole)).install()
    try:
        t = frames.DataTemplate(*MACS, "10.9.0.1", "10.9.0.2", 4096)
        assert t.len == whole
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
            s.bind((ia, 0))
            for i in range(40):
                s.send(t.frame(i, index=i, count=40))
        wait_until(lambda: marker.backlog()[ia] == 0, 5, what="the counted queue drained")
        time.sleep(0.05)
        trims = marker.trims()[ia]
        with IPRoute() as ipr:
            sent = shaping.stats(ipr, idx)[2]
    finally:
        assert marker.remove() == []
    assert 20 <= trims <= 36, trims            # about 5 whole frames queued at a time
    assert sent == (40 - trims) * whole + trims * layout.TRIM_BYTES, (sent, trims)
