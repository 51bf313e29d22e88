"""The dequeue ECN marker (root): eBPF counts a TBF's queue from both sides.

First the two programs alone, run by the kernel on given frames
(BPF_PROG_TEST_RUN): the enqueue side counts what the TBF will hold, the
dequeue side marks by the queue left behind (step and RED profile), leaves
what is not ECN-capable IPv4 alone, and keeps the IPv4 checksum valid.  Then
on a veth with the lab's 40 Mbit/s TBF: a back-to-back burst is marked on
the frames that leave with more than K bytes behind them (the head, not the
tail as at enqueue), paced frames never, and the counted queue returns to 0.
"""

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): its own namespaces, no fabric
LAYOUT_INDEPENDENT = True

import struct
import time
from contextlib import contextmanager

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw
from traffic_fixtures import ECN_FRAME as FRAME
from traffic_fixtures import ECN_RATE as RATE
from traffic_fixtures import (
    checksum_ok,
    ecn_burst,
    lab,  # noqa: F401  (a fixture)
    run,
    send_ect_frames,
    shaped_veth,
    wait_until,
)

from emulator.dataplane import bpf
from emulator.dataplane.lossless import ecn, ecnq
from traffic.roce.frames import PSN_OFF, icrc

K = 30000
LEN = 3042                    # test frames (BPF_PROG_TEST_RUN takes up to ~3.5 kB)


def frame(tos=2):
    return bytes(Ether() / IP(dst="10.9.0.2", tos=tos) / UDP(dport=4791) /
                 Raw(b"x" * (LEN - 42)))


@contextmanager
def programs(kmin, kmax, pmax, limit=10 ** 6):
    """(map, enqueue program fd, dequeue program fd) of port 0, closed after."""
    m = bpf.Map(ecnq.ENTRY.size, 1)
    try:
        with ecnq.programs(m, 0, limit, kmin, kmax, pmax, 1000) as fds:
            yield m, fds["ecnq_in"], fds["ecnq_out"]
    finally:
        m.close()


def queue(m):
    i, o, marks, _ = ecnq.ENTRY.unpack(m.lookup(0))
    return i - o, marks


def test_enqueue_side_counts_what_the_tbf_keeps():
    with programs(10000, 10000, 1.0, limit=5 * LEN) as (m, fin, fout):
        for _ in range(8):
            assert bpf.test_run(fin, frame())[0] == ecnq.TC_ACT_OK
        assert queue(m) == (5 * LEN, 0)       # three more would overflow the TBF: dropped


def test_step_marks_by_the_queue_left_behind_and_keeps_checksums():
    with programs(K, K, 1.0) as (m, fin, fout):
        for _ in range(20):
            bpf.test_run(fin, frame())
        marked = []
        for i in range(20):
            ret, out = bpf.test_run(fout, frame(tos=2 if i % 2 else 1))   # ECT(0) / ECT(1)
            assert ret == ecnq.XDP_PASS and len(out) == LEN
            behind = (19 - i) * LEN
            assert (out[15] & 3 == 3) == (behind > K), (i, behind)
            assert out[15] >> 2 == 0 and checksum_ok(out)
            marked.append(out[15] & 3 == 3)
        assert queue(m) == (0, sum(marked))
        assert sum(marked) == len([i for i in range(20) if (19 - i) * LEN > K])


def test_red_profile_between_kmin_and_kmax():
    kmin, kmax = 20000, 200000
    with programs(kmin, kmax, 0.5) as (m, fin, fout):
        seen = {}
        for _ in range(6):                     # six passes over a queue of 80 frames
            for _ in range(80):
                bpf.test_run(fin, frame())
            for i in range(80):
                _, out = bpf.test_run(fout, frame())
                q = (79 - i) * LEN
                band = "over" if q > kmax else "under" if q <= kmin else "mid"
                seen.setdefault(band, []).append(out[15] & 3 == 3)
        assert all(seen["over"]) and not any(seen["under"])
        mid = seen["mid"]
        expected = sum(0.5 * ((79 - i) * LEN - kmin) / (kmax - kmin)
                       for i in range(80) if kmin < (79 - i) * LEN <= kmax) * 6
        assert 0.6 * expected < sum(mid) < 1.4 * expected, (sum(mid), expected)


def test_not_ect_ce_or_not_ipv4_is_left_alone():
    with programs(1000, 1000, 1.0) as (m, fin, fout):
        arp = bytes(Ether() / ARP()).ljust(LEN, b"\0")
        for pkt in (frame(tos=0), frame(tos=3), arp):
            for _ in range(3):
                bpf.test_run(fin, pkt)
            _, out = bpf.test_run(fout, pkt)
            assert out == pkt
        assert queue(m)[1] == 0


def dequeue_marker(ia, ib, b):
    return ecnq.DequeueMarker(ecn.parse("30KB"), [(ia, f"/run/netns/{b}", ib, RATE)],
                              FRAME, 30.0, FRAME + 14).install()


def burst(lab, gap_s):
    """40 ECT(0) frames through the dequeue marker: b's frames, marks, counted queue,
    the frames the sender sent more than a frame time after the one before."""
    return ecn_burst(lab, dequeue_marker, gap_s)


def test_burst_is_marked_at_the_head_while_k_bytes_wait_behind(lab):
    frames, counted, backlog, pauses = burst(lab, 0)
    assert len(frames) == 40 and backlog == 0
    ce = [int.from_bytes(bytes(f)[PSN_OFF + 1:PSN_OFF + 4], "big") for f in frames
          if bytes(f)[15] & 3 == 3]
    # the frame that leaves with 8 frames (33 kB > K) behind it is the last marked: 31;
    # the first ones may leave before the burst has all arrived.  Each pause of the
    # sender longer than a frame time let the link drain a frame with fewer behind it:
    # one frame unmarked or the last mark a frame earlier, per pause (a burst paused
    # more than 3 times measures the machine, not the marker)
    assert len(pauses) <= 3, f"the sender paused before frames {pauses}"
    assert ce and ce == sorted(set(ce)) and 30 - len(pauses) <= ce[-1] <= 32, (ce, pauses)
    holes = set(range(ce[0], ce[-1] + 1)) - set(ce)
    assert max(0, 30 - ce[-1]) + len(holes) <= len(pauses), (ce, pauses)
    assert len(ce) >= 20 - len(pauses), (ce, pauses)
    assert counted == len(ce)
    for f in frames:
        raw = bytes(f)
        assert icrc(raw) == struct.unpack("<I", raw[-4:])[0]
        assert checksum_ok(raw)


def test_paced_below_the_link_rate_is_never_marked_at_dequeue(lab):
    frames, counted, backlog, _ = burst(lab, 0.0012)
    assert len(frames) == 40 and backlog == 0
    assert counted == 0 and not [f for f in frames if bytes(f)[15] & 3 == 3]


def test_a_link_that_was_down_is_counted_afresh(lab):
    """Frames a TBF sends to a peer that is down never come out: after the link is
    up again ``reset`` takes the TBF's own backlog (dataplane.faults calls it)."""
    ia, ib, b = shaped_veth(lab)
    marker = dequeue_marker(ia, ib, b)
    try:
        run("ip", "link", "set", ib, "down", ns=b)
        send_ect_frames(ia, 10)
        wait_until(lambda: marker.backlog()[ia] >= 10 * FRAME, 5, what="frames counted in")
        run("ip", "link", "set", ib, "up", ns=b)
        time.sleep(0.1)                             # 10 frames drain in 8 ms: into the void
        assert marker.backlog()[ia] >= 10 * FRAME   # still counted: they never came out
        marker.reset([ia])
        assert marker.backlog()[ia] < FRAME         # what the TBF holds: none of them
    finally:
        assert marker.remove() == []

