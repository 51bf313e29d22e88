"""The traffic engine's pure parts: the pacing schedule, plan validation, percentiles."""

import pytest

from traffic.engine import percentiles
from traffic.nic.pacing import Schedule
from traffic.plan import PlanError, load_plan

MS = 1_000_000


def test_schedule_sends_what_is_due_and_nothing_early():
    s = Schedule(interval_ns=1 * MS, start_ns=0, end_ns=10 * MS)
    assert s.due(0, 64) == 1                 # packet 0 is due at the start
    assert s.due(0, 64) == 0
    assert s.due(int(3.5 * MS), 64) == 3     # packets 1, 2, 3
    assert s.next_ns() == 4 * MS
    assert s.due(100 * MS, 64) == 6          # the rest, capped at the end
    assert s.sent == 10 and s.skipped == 0
    assert s.next_ns() is None and s.done(100 * MS)


def test_schedule_skips_instead_of_bursting_when_far_behind():
    s = Schedule(interval_ns=1 * MS, start_ns=0, max_lag_ns=5 * MS, late_ns=2 * MS)
    s.due(0, 64)
    n = s.due(50 * MS, 64)                   # woke 50 ms late: 50 packets due
    assert n == 6                            # only the last 5 ms (+1) go out
    assert s.skipped == 44
    assert s.late == 6                       # and they were late
    assert s.max_late_ns >= 5 * MS


def test_a_larger_lag_counts_what_it_let_leave_beyond_the_default():
    s = Schedule(interval_ns=1 * MS, start_ns=0, max_lag_ns=100 * MS)
    s.due(0, 64)
    n = s.due(50 * MS, 64)                   # woke 50 ms late: packets 1..50 due
    assert n == 50 and s.skipped == 0
    assert s.caught_up == 29                 # packets 1..29: more than 20 ms late
    d = Schedule(interval_ns=1 * MS, start_ns=0)     # the default lag skips them instead
    d.due(0, 64)
    d.due(50 * MS, 64)
    assert d.skipped == s.caught_up and d.caught_up == 0


def test_schedule_respects_the_batch_limit():
    s = Schedule(interval_ns=1 * MS, start_ns=0, late_ns=20 * MS)
    assert s.due(9 * MS, 4) == 4
    assert s.due(9 * MS, 4) == 4
    assert s.due(9 * MS, 4) == 2
    assert s.late == 0


def test_schedule_rejects_a_nonpositive_interval():
    with pytest.raises(ValueError):
        Schedule(0, 0)


def test_plan_defaults_and_errors():
    plan = load_plan({"streams": [{"intf": "eth0", "src_ip": "10.0.0.1", "dst_ip": "10.0.0.2",
                                   "dst_mac": "02:00:00:00:00:02", "rate_bps": 1e6}]})
    assert plan["tick_ms"] == 2.0 and plan["frame_len"] == 4170
    with pytest.raises(PlanError, match="unknown plan keys: bogus"):
        load_plan({"bogus": 1})
    with pytest.raises(PlanError, match=r"streams\[0\]"):
        load_plan({"streams": [{"intf": "eth0"}]})
    with pytest.raises(PlanError, match="rate_bps or rate_pps"):
        load_plan({"streams": [{"intf": "e", "src_ip": "a", "dst_ip": "b", "dst_mac": "m"}]})
    with pytest.raises(PlanError, match="must be positive"):
        load_plan({"streams": [{"intf": "e", "src_ip": "a", "dst_ip": "b", "dst_mac": "m",
                                "rate_bps": 0}]})
    with pytest.raises(PlanError, match="phase"):
        load_plan({"streams": [{"intf": "e", "src_ip": "a", "dst_ip": "b", "dst_mac": "m",
                                "rate_pps": 100, "phase": 1.0}]})
    with pytest.raises(PlanError, match=r"receivers\[0\]"):
        load_plan({"receivers": [{"netns": "/x"}]})
    assert plan["progress_ms"] is None
    with pytest.raises(PlanError, match="progress_ms"):
        load_plan({"progress_ms": 0})


def test_percentiles_from_a_histogram():
    hist = [0] * 100
    hist[0] = 90          # 90 packets under 0.1 ms
    hist[49] = 9          # 9 at 4.9-5.0 ms
    hist[99] = 1          # one at the top bin
    p = percentiles(hist, 100_000)
    assert p["p50"] == 0.1 and p["p90"] == 0.1
    assert p["p99"] == 5.0 and p["p99.9"] == 10.0
    assert percentiles([0, 0], 100_000)["p50"] is None


def test_fast_parser_agrees_with_parse_and_catches_corruption():
    from traffic.roce.frames import FastParser, FrameTemplate, parse
    tpl = FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2",
                        dst_qpn=0x123, frame_len=4170)
    fast = FastParser()
    for psn in (0, 1, 0xFFFFFF):
        frame = bytearray(tpl.frame(psn, tx_ns=123456789, flow=7))
        slow = parse(frame)
        got = fast(memoryview(frame), len(frame))
        assert got == (slow.src_ip, slow.flow, slow.psn, slow.tx_ns, True)
        assert got[2] == psn and slow.icrc_ok
    frame[3000] ^= 0x01                              # a flipped payload bit
    assert fast(memoryview(frame), len(frame))[4] is False
    assert parse(frame).icrc_ok is False
    frame = bytearray(tpl.frame(5))
    frame[15] |= 0x03                                # ECN CE set in flight: TOS is masked
    assert fast(memoryview(frame), len(frame))[4] is True
    assert fast(memoryview(b"\x00" * 60), 60) is None


def test_fill_head_writes_the_same_frame_as_fill():
    from traffic.roce.frames import FrameTemplate, parse
    a, b = FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2",
                         dst_qpn=5, frame_len=4170), \
        FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.3",
                      dst_qpn=9, frame_len=4170)
    slow, fast = bytearray(9216), bytearray(9216)
    a.fill_head(fast, 1, 10, 2, True)
    for tpl, psn in ((a, 77), (b, 0xFFFFFF), (a, 5)):   # headers only: the padding is shared
        assert tpl.tail_sig == a.tail_sig
        tpl.fill(slow, psn, 123456789, 4)
        n = tpl.fill_head(fast, psn, 123456789, 4, False)
        assert fast[:n] == slow[:n] and parse(fast[:n]).icrc_ok


def drain_setup(frames):
    """A datagram socket holding ``frames`` frames, and what ``Engine._drain`` reads
    it with: a parser that takes every frame, an accounting that counts them, and a
    clock that advances 1 ms a frame."""
    import socket
    import types
    from array import array

    from traffic.engine import LAT_BINS, Engine
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    b.setblocking(False)
    for i in range(frames):
        a.send(i.to_bytes(4, "big"))
    ticks = iter(range(0, 10 ** 9, MS))
    added = []
    eng = types.SimpleNamespace(
        parse=lambda mv, n: (b"\0" * 4, 1, int.from_bytes(mv[:4], "big"), 0, True),
        rt_offset=0, clock=lambda: next(ticks))
    rx = types.SimpleNamespace(
        sock=b, names={}, other=0, lat_sum=0, lat_n=0, lat_max=0,
        hist=array("I", bytes(4 * LAT_BINS)),
        acct=types.SimpleNamespace(add=lambda key, psn, *rest: added.append(psn)))
    return (lambda **kw: Engine._drain(eng, rx, bytearray(64), **kw)), added, (a, b)


def test_a_drain_stops_when_a_send_falls_due_and_reads_the_rest_later():
    drain, added, socks = drain_setup(40)
    try:
        # the clock passes the next send's time after 16 frames: it stops there,
        # at a multiple of ``every``, saying frames may be left
        assert drain(until=16 * MS - 1, every=8) == (16, True)
        assert added == list(range(16))
        # the next pass reads on, in order, to the end: nothing left
        assert drain() == (24, False)
        assert added == list(range(40))
    finally:
        for s in socks:
            s.close()


def test_a_drain_at_its_limit_says_frames_may_be_left():
    drain, added, socks = drain_setup(10)
    try:
        assert drain(limit=4) == (4, True)
        assert drain(limit=100) == (6, False)
        assert drain() == (0, False)
    finally:
        for s in socks:
            s.close()
