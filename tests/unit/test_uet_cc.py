"""UET congestion management (traffic.uet.cc, traffic.uet.cc) and entropy (traffic.uet.ev)."""

import pytest

from lab.modes import EvPolicy
from traffic.ranks.config import ACK_BYTES, load_config, uet_config
from traffic.uet import ev as evs
from traffic.uet.cc import BASE_RISE, BASE_SAMPLES, REF_BDP, Credit, Nscc, NsccParams, Scheduler

MS = 1_000_000
RATE = 40e6
RTT = 5 * MS


def nscc(**kw):
    """A window whose base RTT was measured at the network RTT."""
    c = Nscc(NsccParams(RATE, 4096, RTT, **kw))
    c.first_rtts = [RTT] * BASE_SAMPLES
    return c


def acks(c, start, n, rtt, ecn=False, size=4096, step=None):
    """``n`` ACKs of one packet each, ``step`` apart (a frame time by default)."""
    step = step or int(size * 8e9 / RATE)
    t = start
    for _ in range(n):
        c.on_ack(t, size, rtt, ecn)
        t += step
    return t


def test_the_constants_scale_with_the_emulated_bdp_as_htsims_with_theirs():
    p = NsccParams(RATE, 4096, RTT)
    assert p.bdp == pytest.approx(RATE / 8 * RTT / 1e9)
    assert p.a == pytest.approx(p.bdp / REF_BDP)
    assert p.b == 1.0 and p.target_qdelay_ns == RTT
    trimming = NsccParams(RATE, 4096, RTT, trimming=True)
    assert trimming.target_qdelay_ns == int(0.75 * RTT)
    c = Nscc(p)
    assert c.cwnd == pytest.approx(1.5 * p.bdp) == c.maxwnd
    assert c.fi == pytest.approx(5 * 4096 * p.a)


def test_marked_acks_with_delay_above_target_cut_the_window_once_per_rtt():
    c = nscc()
    c.avg_delay = 3 * RTT                      # a standing queue
    before = c.cwnd
    acks(c, 10 * MS, 3, RTT + 2 * RTT, ecn=True, step=1000)
    assert c.stats["decrease"] == 3
    cut = before * max(1 - 0.8 * (c.avg_delay - RTT) / c.avg_delay, 0.5)
    assert c.cwnd == pytest.approx(cut, rel=0.05)   # one cut, not three


def test_a_marked_ack_below_target_changes_nothing():
    c = nscc()
    c.cwnd = 20000
    c.on_ack(MS, 4096, RTT + RTT // 10, ecn=True)
    assert c.stats["noop"] == 1 and c.cwnd == 20000


def test_unmarked_acks_below_target_grow_a_small_window_toward_maxwnd():
    c = nscc()
    c.cwnd = c.min_cwnd
    acks(c, 0, 20, RTT + RTT // 2)
    assert c.stats["proportional"] == 20 and c.stats["fast"] == 0
    assert c.min_cwnd < c.cwnd < c.maxwnd
    acks(c, 0, 400, RTT + RTT // 2)
    assert c.cwnd == c.maxwnd                  # capped at 1.5 BDP


def test_no_queue_for_a_whole_window_brings_the_fast_increase():
    c = nscc()
    c.cwnd = 4 * 4096
    t = acks(c, 0, 4, RTT)                     # a window's worth without delay
    assert c.stats["fast"] == 0
    w = c.cwnd
    acks(c, t, 2, RTT)
    assert c.stats["fast"] == 2 and c.cwnd == pytest.approx(w + 2 * 4096 * c.fi_scale)


def test_a_trim_nack_triggers_quick_adapt_to_what_was_delivered():
    c = nscc(trimming=True)
    c.on_ack(0, 4096, RTT)                      # arms the first quick-adapt period
    c.on_nack(RTT // 2, 4096)
    c.on_nack(3 * RTT, 4096)                    # the period over; little delivered in it
    assert c.stats["quick_adapt"] == 1
    assert c.cwnd == c.min_cwnd
    # the bytes already in flight are not held against it twice
    cw = c.cwnd
    c.on_nack(3 * RTT + 1000, 4096)
    assert c.cwnd == cw


def test_a_timeout_takes_the_lost_bytes_off_the_window():
    c = nscc()
    w = c.cwnd
    c.on_timeout(MS, 4096)
    assert c.cwnd == w - 4096 and c.stats["timeout"] == 1


def test_a_short_rtt_lowers_the_base_but_never_below_the_network_rtt():
    c = nscc()
    c.on_ack(MS, 4096, RTT // 2)
    assert c.base_rtt == RTT
    c2 = Nscc(NsccParams(RATE, 4096, RTT))
    c2.base_rtt = 2 * RTT
    c2.on_ack(MS, 4096, RTT + 1)
    assert c2.base_rtt == RTT + 1


def test_can_send_lets_one_packet_go_when_nothing_is_in_flight():
    c = nscc()
    c.cwnd = 100
    assert c.can_send(0, 4096) and not c.can_send(1, 4096)


def test_the_credit_scheduler_shares_the_receivers_rate_round_robin():
    s = Scheduler(RATE, 4096, now=0, share=1.0)
    s.demand("a", 10 ** 6)
    s.demand("b", 10 ** 6)
    assert s.poll(0) == ["a", "b"]              # the bucket starts with two quanta
    assert s.take("a") == 8192 and s.take("a") == 0
    due = s.next_ns(0)
    assert due == pytest.approx(8192 * 8e9 / RATE, rel=0.01)
    got = {"a": 0, "b": 0}
    t = 0
    for _ in range(100):
        t = s.next_ns(t)
        for k in s.poll(t):
            got[k] += s.take(k)
    assert abs(got["a"] - got["b"]) <= 8192
    # the rate: what was granted over the time it took
    assert s.granted == pytest.approx(RATE / 8 * t / 1e9 + 2 * 8192, rel=0.05)
    s.demand("a", 0)
    s.demand("b", 0)
    assert s.next_ns(t) is None


def test_a_credit_balance_gates_sending():
    c = Credit(4096)
    assert c.can_send(4096) and not c.can_send(4097)
    c.sent(4096)
    c.grant(100)
    assert c.balance == 100 and c.received == 100


def test_ev_ports_are_in_the_dynamic_range_and_differ_by_salt():
    a = [evs.sport(1, i) for i in range(64)]
    b = [evs.sport(2, i) for i in range(64)]
    assert all(0xC000 <= p <= 0xFFFF for p in a + b)
    assert a != b and len(set(a)) > 50


def test_oblivious_spraying_visits_every_value_each_round():
    p = evs.policy(EvPolicy.OBLIVIOUS, 16, salt=7, seed=1)
    assert sorted(p.next(0) for _ in range(16)) == sorted(p.ev_of(i) for i in range(16))


def test_rod_and_a_set_of_one_keep_one_value():
    for p in (evs.policy(EvPolicy.REPS, 16, 3, single=True), evs.policy(EvPolicy.REPS, 1, 3)):
        assert isinstance(p, evs.Single) and len({p.next(t) for t in range(10)}) == 1


def test_reps_recycles_good_values_and_drops_marked_ones():
    p = evs.policy(EvPolicy.REPS, 256, salt=5, seed=2)
    good, marked = p.next(0), p.next(0)
    p.feedback(good, evs.GOOD, 1)
    p.feedback(marked, evs.ECN, 1)
    assert p.next(2) == good                    # the recycled value first
    assert p.counts[evs.ECN] == 1


def test_reps_retires_a_lost_value_freezes_and_then_explores_again():
    p = evs.Reps(64, salt=9, seed=3, freeze_ns=100, hold_ns=1000)
    vals = [p.next(0) for _ in range(4)]
    for v in vals[:3]:
        p.feedback(v, evs.GOOD, 1)
    p.feedback(vals[3], evs.LOST, 10)
    assert p.retired == 1 and p.last_retired_ns == 10 and p.freezes == 1
    dead = p.by_port[vals[3]]
    frozen = [p.next(20 + t) for t in range(12)]
    assert set(frozen) <= set(vals[:3])          # only values that worked
    after = [p.next(200 + t) for t in range(evs.EXPLORE_AFTER_FREEZE)]
    assert vals[3] not in after                  # retired: exploration skips it
    assert p.by_port[vals[3]] == dead
    assert len(set(after)) > 4
    # after the hold, it may be drawn again; a good answer un-retires it
    p.feedback(vals[3], evs.GOOD, 2000)
    assert dead not in p.retired_at


def test_a_value_that_worked_and_then_lost_a_packet_leaves_the_freezes_cycle():
    # a path dies under values recycled before: the freeze cycles only those still alive
    p = evs.Reps(64, salt=9, seed=3, freeze_ns=100, hold_ns=1000)
    vals = [p.next(0) for _ in range(6)]
    for v in vals:
        p.feedback(v, evs.GOOD, 1)
    dead = vals[:2]                               # both worked, then their path died
    for v in dead:
        p.feedback(v, evs.LOST, 10)
    assert p.retired == 2
    frozen = [p.next(20 + t) for t in range(24)]
    assert set(frozen) == set(vals[2:])           # every live value, no dead one


def test_the_base_rtt_is_the_shortest_of_the_first_round_trips_within_a_bound():
    # the switches and engines add their own latency to the links' frame times: the
    # window's bound follows the base RTT measured, at most BASE_RISE network RTTs
    c = Nscc(NsccParams(RATE, 4096, RTT))
    model = c.maxwnd
    acks(c, 0, BASE_SAMPLES - 1, int(1.6 * RTT))
    assert c.base_rtt == RTT and c.maxwnd == model         # not before 8 samples
    acks(c, 10 * MS, 1, int(1.7 * RTT))
    assert c.base_rtt == int(1.6 * RTT) and c.maxwnd == pytest.approx(1.6 * model, rel=1e-3)
    acks(c, 20 * MS, 1, int(1.2 * RTT))                    # later, a shorter one lowers it
    assert c.base_rtt == int(1.2 * RTT)
    c = Nscc(NsccParams(RATE, 4096, RTT))
    acks(c, 0, BASE_SAMPLES, 5 * RTT)                      # a standing queue from the start
    assert c.base_rtt == BASE_RISE * RTT
    c = Nscc(NsccParams(RATE, 4096, RTT))
    acks(c, 0, BASE_SAMPLES, RTT // 2)                     # never below the network RTT
    assert c.base_rtt == RTT and c.maxwnd == model


def test_the_bound_leaves_room_for_what_the_receiver_holds_unacknowledged():
    held = 16384
    p = NsccParams(RATE, 4096, RTT, held_bytes=held)
    c = Nscc(p)
    assert c.maxwnd == pytest.approx(1.5 * p.bdp + held)
    for _ in range(BASE_SAMPLES):                   # a longer measured base RTT
        c.on_ack(0, 4096, rtt_ns=int(1.6 * RTT))
    assert c.maxwnd == pytest.approx(1.5 * 1.6 * p.bdp + held, rel=1e-3)
    with pytest.raises(ValueError):
        NsccParams(RATE, 4096, RTT, held_bytes=-1)


def test_a_ranks_receiver_coalesces_as_htsims_and_its_window_bound_follows():
    ranks = [{"ip": "10.0.0.1", "intf": "eth0"}, {"ip": "10.0.0.2", "intf": "eth0"}]
    cfg = load_config({"rank": 0, "ranks": ranks, "transport": "uet", "cc": "nscc"})
    u = uet_config(cfg)
    assert ACK_BYTES == 16384 and u.pds.ack_bytes == ACK_BYTES      # four 4 KB packets
    assert u.nscc.held_bytes == ACK_BYTES
    assert Nscc(u.nscc).maxwnd == pytest.approx(1.5 * u.nscc.bdp + ACK_BYTES)
    # --cc-param held_bytes overrides the room (0: htsim's bound alone)
    cfg = load_config({"rank": 0, "ranks": ranks, "transport": "uet", "cc": "nscc",
                       "cc_params": {"held_bytes": 0}})
    assert Nscc(uet_config(cfg).nscc).maxwnd == pytest.approx(1.5 * uet_config(cfg).nscc.bdp)
    # 8 KB packets: still 16 KB, two packets an ACK
    cfg = load_config({"rank": 0, "ranks": ranks, "transport": "uet", "cc": "nscc",
                       "mtu": 8192})
    assert uet_config(cfg).pds.ack_bytes == ACK_BYTES
