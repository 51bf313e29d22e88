"""DCQCN's reaction point against the paper's equations; CNP pacing; ECN thresholds."""

import pytest

from emulator.dataplane.lossless import ecn
from emulator.errors import ConfigError
from traffic.roce.dcqcn import MS, CnpPacer, Dcqcn, DcqcnParams

LINE = 40e6


def test_cnp_cuts_by_half_alpha_and_raises_alpha():
    p = DcqcnParams(LINE, g=1 / 16)
    r = Dcqcn(p, 0)
    r.cnp(0)                                  # alpha = 1: RC = RC (1 - 1/2)
    assert r.rt == LINE and r.rc == LINE / 2
    assert r.alpha == pytest.approx(1.0)      # (1 - g) * 1 + g
    r.advance(p.alpha_timer_ns)               # no CNP for one alpha period
    assert r.alpha == pytest.approx(15 / 16)


def test_fast_recovery_then_additive_increase():
    p = DcqcnParams(LINE, increase_timer_ns=MS, byte_counter=10 ** 9)
    r = Dcqcn(p, 0)
    r.cnp(0)
    rt, rc = r.rt, r.rc
    for k in range(1, 5):                     # T < F: RC halves the distance to RT
        r.advance(k * MS)
        rc = (rt + rc) / 2
        assert r.rc == pytest.approx(rc) and r.rt == rt
    r.advance(5 * MS)                         # T = F: additive increase of RT by Rai
    assert r.rt == pytest.approx(min(LINE, rt + p.rai_bps))


def test_timers_keep_their_length_in_frame_times_at_any_line_rate():
    """Tuned at 40 Mbit/s (20 ms timers, a 10 ms CNP interval); ten times as long at
    4 Mbit/s, where a frame takes ten times as long; a value given is kept."""
    p = DcqcnParams(LINE)
    assert (p.alpha_timer_ns, p.increase_timer_ns, p.cnp_interval_ns) == (
        20 * MS, 20 * MS, 10 * MS)
    slow = DcqcnParams(4e6)
    assert (slow.alpha_timer_ns, slow.increase_timer_ns, slow.cnp_interval_ns) == (
        200 * MS, 200 * MS, 100 * MS)
    assert (slow.rai_bps, slow.min_bps) == (4e6 / 40, 4e6 / 100)
    assert DcqcnParams(4e6, cnp_interval_ns=5 * MS).cnp_interval_ns == 5 * MS
    with pytest.raises(ValueError, match="increase_timer_ns"):
        DcqcnParams(4e6, increase_timer_ns=0)


def test_rate_never_exceeds_line_nor_falls_below_min():
    p = DcqcnParams(LINE)
    r = Dcqcn(p, 0)
    for _ in range(50):
        r.cnp(0)
    assert r.rc == p.min_bps
    r.advance(10 ** 10)
    assert r.rc <= LINE


def test_cnp_pacer_one_per_interval_per_qp():
    pace = CnpPacer(MS)
    assert pace("a", 0) and not pace("a", MS - 1) and pace("b", 1) and pace("a", MS)
    assert pace.sent == 3


def test_ecn_thresholds_parse_and_rules():
    step = ecn.parse("30KB")
    assert step.step and step.levels() == [(30000, 1.0)]
    red = ecn.parse("20KB:80KB:0.2")
    levels = red.levels()
    assert levels[0] == (20000, pytest.approx(0.05)) and levels[-1] == (80000, 1.0)
    rules = ecn.chain_rules(red, 40e6, 4000)
    assert rules[0] == rules[-1] == "ip ecn ce counter"
    # a virtual queue of 4000-byte frames at 40 Mbit/s: 1250 frames/s, K/4000 deep
    assert "burst 20 packets" in rules[-2] and "numgen" not in rules[-2]
    assert "limit rate over 1250/second burst 5 packets" in rules[1]
    assert rules[1].startswith("ip length > 2000 ")
    assert ecn.parse("off") is None
    for bad in ("30XB", "80KB:20KB:0.2", "20KB:80KB:2", "1:2"):
        with pytest.raises(ConfigError):
            ecn.parse(bad)


def test_congestion_analysis_finds_the_bottleneck_and_its_busy_window():
    from emulator.experiments.compare.congestion import analyse, summarize, table
    from emulator.experiments.measure.stats import jain
    times = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    ports = [{"name": "leaf1->h1", "rate_bps": 8e6}, {"name": "spine1->leaf1", "rate_bps": 8e6}]
    # leaf1->h1 sends at its full 1 MB/s from 0.1 to 0.4 s with a queue; the other idles
    sent = [[0, 0, 100_000, 200_000, 300_000, 300_050], [0, 10, 20, 30, 40, 50]]
    backlog = [[0, 5000, 40000, 60000, 0, 0], [0, 0, 0, 0, 0, 0]]
    drops = [[0, 0, 0, 2, 3, 3], [0, 0, 0, 0, 0, 0]]
    a = analyse(times, ports, backlog, sent, drops, kmin=10000)
    assert a["port"] == "leaf1->h1"
    assert a["busy_s"] == 0.3 and a["utilisation"] == 1.0      # hellos after 0.4 s ignored
    assert a["queue_max_bytes"] == 60000 and a["drops"] == 3
    assert jain([1, 1, 1]) == 1.0 and jain([1, 0]) == 0.5 and jain([]) is None
    runs = [{"cc": "dcqcn", "rep": 0, "time_s": 1.0, "bottleneck": a, "jain": 1.0,
             "retransmitted": 0, "timeouts": 0, "cnps": 5, "marks": 7, "wrong": 0,
             "fidelity": "faithful"}]
    (row,) = summarize(runs, kmax=30000)
    assert row["queue_p99_over_kmax"] == 2.0 and row["faithful"] == 1 and row["cnps"] == 5
    assert row["died"] == 0
    # back under Kmin = 10 kB only in the last busy sample: the loop never ended
    assert a["queue_p99_late_bytes"] is None and row["queue_p99_late"] is None
    assert "p99late" in table([row]).splitlines()[0]


def test_queue_after_the_first_loop():
    from emulator.experiments.compare.congestion import after_first_loop, analyse
    # over Kmin (10), back to it, then a second, smaller swing
    q = [0, 5, 30, 80, 40, 10, 0, 20, 25, 8]
    assert after_first_loop(q, 10) == [10, 0, 20, 25, 8]
    assert after_first_loop([0, 50, 60, 40, 30, 30, 30, 30, 30, 30, 5], 10) == []
    assert after_first_loop([0, 5, 9], 10) == [0, 5, 9]       # never congested
    assert after_first_loop([0, 50, 60], 10) == []             # never recovered
    times = [i * 0.1 for i in range(len(q))]
    sent = [[i * 100_000 for i in range(len(q))]]
    a = analyse(times, [{"name": "p", "rate_bps": 8e6}], [q], sent, [[0] * len(q)], kmin=10)
    assert a["queue_max_bytes"] == 80 and a["queue_p99_late_bytes"] == 25
    # a median over the repetitions whose first loop ended says over how many
    from emulator.experiments.compare.congestion import summarize, table
    never = dict(a, queue_p99_late_bytes=None)
    runs = [{"cc": "dcqcn", "rep": i, "time_s": 1.0, "bottleneck": b, "jain": 1.0,
             "retransmitted": 0, "timeouts": 0, "cnps": 5, "marks": 7, "wrong": 0,
             "fidelity": "faithful"} for i, b in enumerate((a, never, a))]
    (row,) = summarize(runs, kmax=40)
    assert row["queue_p99_late"] == 25 and row["late_reps"] == 2
    assert "median of the 2 of 3 repetitions" in table([row])
    assert "median of" not in table([dict(row, late_reps=3)])


def test_timely_follows_the_rtt_and_its_gradient():
    from traffic.roce.timely import Timely, TimelyParams
    p = TimelyParams(LINE, t_low_ns=4 * MS, t_high_ns=25 * MS, min_rtt_ns=2 * MS, beta=0.8)
    t = Timely(p)
    t.rtt(10 * MS)                               # the first sample only sets the reference
    assert t.rate_bps == LINE
    t.rtt(50 * MS)                               # above t_high: x (1 - beta (1 - 25/50))
    assert t.rate_bps == pytest.approx(LINE * (1 - 0.8 * 0.5))
    r = t.rate_bps
    t.rtt(2 * MS)                                # below t_low: + delta
    assert t.rate_bps == pytest.approx(r + p.delta_bps)
    t2 = Timely(p)
    t2.rate_bps = LINE / 2
    t2.rtt(10 * MS)
    t2.rtt(12 * MS)                              # rising inside the band: cut by beta x gradient
    grad = 0.875 * 2 * MS / p.min_rtt_ns
    assert t2.rate_bps == pytest.approx(LINE / 2 * (1 - 0.8 * min(grad, 1.0)))
    t3 = Timely(p)
    t3.rate_bps = p.min_bps
    for rtt in (20, 19, 18, 17, 16, 15, 14):     # falling: + delta, 5 delta after five
        t3.rtt(rtt * MS)
    assert t3.negative == 6
    assert t3.rate_bps == pytest.approx(p.min_bps + 4 * p.delta_bps + 2 * 5 * p.delta_bps)


def test_timely_samples_first_transmissions_only():
    from traffic.roce.qps import RankQPs
    from traffic.roce.rcframes import ACKNOWLEDGE, ControlTemplate, parse_control
    from traffic.roce.timely import TimelyParams
    from traffic.roce.transport import RcParams
    q = RankQPs(RcParams(), lambda f: None, "02:00:00:00:00:01", "10.0.0.1",
                timely=TimelyParams(LINE))
    q.add_qp((1, 0), 0x66)
    ack = ControlTemplate(ACKNOWLEDGE, "02:00:00:00:00:02", "02:00:00:00:00:01", "10.0.0.2",
                          "10.0.0.1", 0x66)
    for psn in range(4):
        q.sent((1, 0), psn, ("pkt", psn), psn * MS)
    q.control(parse_control(ack.frame(1)), 11 * MS)      # psn 1 sent at 1 ms: 10 ms RTT
    assert q.rp[(1, 0)].prev == 10 * MS
    q.sent((1, 0), 2, ("pkt", 2), 12 * MS, again=True)     # went twice: no sample from it
    q.control(parse_control(ack.frame(3)), 30 * MS)
    assert q.rp[(1, 0)].samples == 1


def test_compare_ecn_default_fits_a_shallow_buffer():
    from emulator.dataplane.lossless.ecn import DEFAULT_ECN, default_ecn
    from emulator.fabric import presets
    fabric = presets.build("leaf-spine", {})
    deep = default_ecn(fabric, 2000)
    assert deep == ecn.parse(DEFAULT_ECN)                  # 100KB:400KB:1 at dequeue
    shallow = default_ecn(fabric, 30, at="enqueue")        # 40 Mbit/s x 30 ms: ~158 kB
    assert shallow.at == "enqueue" and shallow.pmax == deep.pmax
    assert 2 * shallow.kmax <= 158_000 and shallow.kmax == 4 * shallow.kmin


def test_dcqcn_without_ecn_marks_at_the_default_thresholds():
    # DCQCN with no marking never hears of congestion: `run --cc dcqcn` marks at
    # compare's default unless --ecn says otherwise (or off)
    from emulator.dataplane.lossless.ecn import default_ecn
    from emulator.experiments.spec import build
    from emulator.fabric import presets
    from emulator.fabric.runspec import RunSpec
    fabric = presets.build("leaf-spine", {})

    def marking(**kw):
        spec = build.complete(RunSpec(fabric, **dict({"cc": "dcqcn", "queue_ms": 30}, **kw)))
        return ecn.parse(spec.ecn, at=spec.ecn_at)
    assert marking() == default_ecn(fabric, 30)
    assert marking(ecn="30KB") == ecn.parse("30KB")
    assert marking(ecn="off") is None
    assert marking(cc="timely") is None
    assert marking(cc="none", transport="none") is None
    with pytest.raises(ConfigError, match="needs --transport rc"):
        marking(cc="timely", transport="none")
