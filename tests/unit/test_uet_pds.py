"""UET delivery (traffic.uet.pds): RUD and ROD, SACK, coalesced ACKs, NACKs, timers."""

from traffic.uet.layout import NACK_ROD_OOO, NACK_TRIMMED, PSN_MASK
from traffic.uet.pds import DROPPED, DUPLICATE, PLACED, PdsParams, Receiver, Sender

MS = 1_000_000
START = PSN_MASK - 2          # every test crosses the PSN wrap


def params(**kw):
    base = dict(rto_ns=80 * MS, rto_min_ns=10 * MS, retry_cnt=2, backoff_cap=1,
                ack_bytes=4000, ack_delay_ns=2 * MS)
    base.update(kw)
    return PdsParams(**base)


def psn(i):
    return (START + i) & PSN_MASK


def sender(n, p=None, now=0):
    s = Sender(p or params(), START)
    for i in range(n):
        assert s.assign() == psn(i)
        s.sent(psn(i), f"pkt{i}", 1000, now, ev=0xC000 + i)
    return s


def drain(s):
    out = []
    while (item := s.next_resend()) is not None:
        out.append(item[0])
    return out


def test_the_receiver_places_out_of_order_and_sacks_what_is_past_the_gap():
    r = Receiver(params(), START)
    assert r.data(psn(0), 1000, 0) == (PLACED, ("ack", psn(0), False, False))   # the first
    assert r.data(psn(2), 1000, 1)[0] == PLACED
    assert r.data(psn(3), 1000, 2)[0] == PLACED
    assert r.placed_ooo == 2
    cack, base, bitmap, ooo = r.ack_fields(psn(3))
    assert cack == psn(0) and base == psn(2) and ooo == 2
    assert bitmap == 0b11                   # PSNs 2 and 3 of base 2
    # the gap fills: everything is cumulative now
    verdict, _ = r.data(psn(1), 1000, 3)
    assert verdict == PLACED and r.expected == psn(4) and not r.above
    assert r.data(psn(1), 1000, 4) == (DUPLICATE, ("ack", psn(1), False, False))
    assert r.duplicates == 1


def test_acks_coalesce_by_bytes_and_by_delay_and_come_at_once_when_asked():
    r = Receiver(params(), START)
    r.data(psn(0), 1000, 0)                              # the first: at once
    assert r.data(psn(1), 1000, 0) == (PLACED, None)
    assert r.data(psn(2), 1000, 0) == (PLACED, None)
    assert r.data(psn(3), 1000, 0) == (PLACED, None)
    assert r.data(psn(4), 1000, 0)[1] == ("ack", psn(4), False, False)    # 4000 bytes
    assert r.data(psn(5), 1000, MS) == (PLACED, None)
    assert r.deadline() == 3 * MS
    assert r.poll(2 * MS) is None
    assert r.poll(3 * MS) == ("ack", psn(5), False, False)
    assert r.data(psn(6), 1000, 4 * MS, ecn=True)[1] == ("ack", psn(6), True, False)
    assert r.data(psn(7), 1000, 4 * MS, ar=True)[1] == ("ack", psn(7), False, False)


def test_an_ack_request_ahead_of_a_gap_asks_again_once_the_gap_is_filled():
    r = Receiver(params(ack_bytes=10 ** 6), START)
    r.data(psn(0), 1000, 0)
    assert r.data(psn(2), 1000, 0, ar=True)[1] is not None     # answered, gap open
    assert r.data(psn(1), 1000, 0)[1] == ("ack", psn(1), False, False)


def test_a_trimmed_packet_is_nacked_at_once_unless_it_is_here():
    r = Receiver(params(), START)
    assert r.trimmed(psn(0), 0) == (DROPPED, ("nack", psn(0), NACK_TRIMMED))
    r.data(psn(1), 1000, 0)
    assert r.trimmed(psn(1), 0)[0] == DUPLICATE
    assert r.trimmed_received == 2 and r.nacks == 1


def test_the_sender_takes_the_cumulative_psn_and_the_sack_bitmap():
    s = sender(6)
    r = s.ack(psn(1), psn(4), [psn(3), psn(4)], 5 * MS)
    assert r.acked_bytes == 4000 and r.rtt_ns == 5 * MS
    assert sorted(s.out) == sorted([psn(2), psn(5)])
    assert s.inflight == 2000
    assert [ev for ev, _ in r.evs] == [0xC000, 0xC001, 0xC003, 0xC004]
    assert not s.acked_through(psn(2)) and s.acked_through(psn(1))
    s.ack(psn(5), psn(5), [], 6 * MS)
    assert not s.busy and s.acked_through(psn(5))


def test_an_ecn_echo_marks_only_the_packet_that_made_the_ack_go():
    s = sender(3)
    r = s.ack(psn(2), psn(2), [], MS, ecn=True)
    assert [k for _, k in r.evs] == ["good", "good", "ecn"]


def test_nacks_send_again_by_cause_and_rod_goes_back():
    s = sender(4)
    assert s.nack(psn(1), NACK_TRIMMED, MS) == [(0xC001, "trim")]
    assert s.nack(psn(1), NACK_TRIMMED, MS) == []          # already queued
    assert s.nack(psn(2), 0x03, MS) == [(0xC002, "nack")]
    assert drain(s) == [psn(1), psn(2)]
    assert s.retx_trim == 1 and s.retx_nack == 1
    assert s.inflight == 2000

    rod = sender(4, params(rod=True))
    got = rod.nack(psn(1), NACK_ROD_OOO, MS)
    assert [ev for ev, _ in got] == [0xC001, 0xC002, 0xC003]
    assert drain(rod) == [psn(1), psn(2), psn(3)]


def test_rod_drops_what_is_out_of_order_and_nacks_once_per_gap():
    r = Receiver(params(rod=True), START)
    r.data(psn(0), 1000, 0)
    assert r.data(psn(2), 1000, 0) == (DROPPED, ("nack", psn(1), NACK_ROD_OOO))
    assert r.data(psn(3), 1000, 0) == (DROPPED, None)
    assert r.data(psn(1), 1000, 0)[0] == PLACED
    assert r.data(psn(2), 1000, 0)[0] == PLACED
    assert r.dropped == 2 and r.placed_ooo == 0


def test_a_timer_sends_again_backs_off_and_fails_after_its_retries():
    s = sender(2, now=0)
    assert s.deadline() == 80 * MS                  # no RTT sample yet: the upper bound
    assert s.poll(79 * MS) == []
    assert s.poll(80 * MS) == [(0xC000, "lost"), (0xC001, "lost")]
    assert s.retx_timeout == 2 and s.timeouts_in_row == 1
    assert drain(s) == [psn(0), psn(1)]
    s.sent(psn(0), "pkt0", 1000, 80 * MS, 0xC000, again=True)
    assert s.deadline() == 80 * MS + 160 * MS       # doubled
    s.poll(240 * MS)
    s.sent(psn(0), "pkt0", 1000, 240 * MS, 0xC000, again=True)
    s.poll(400 * MS)
    assert s.failed and not s.resend
    assert s.acked_through(psn(1))                  # a failed PDC holds nothing back


def test_the_timer_follows_karns_samples_between_its_bounds():
    s = sender(3)
    s.ack(psn(0), psn(0), [], 4 * MS)
    assert s.srtt == 4 * MS and s.rto() == 12 * MS          # srtt + 4 * srtt/2
    s.nack(psn(1), NACK_TRIMMED, 5 * MS)
    drain(s)
    s.sent(psn(1), "pkt1", 1000, 5 * MS, 0xC001, again=True)
    s.ack(psn(1), psn(1), [], 6 * MS)                       # sent twice: no sample
    assert s.srtt == 4 * MS
    tiny = sender(1)
    tiny.ack(psn(0), psn(0), [], 1000)
    assert tiny.rto() == 10 * MS                            # the lower bound


def test_an_ack_of_a_packet_queued_again_keeps_the_window_right():
    s = sender(2)
    s.nack(psn(0), NACK_TRIMMED, MS)
    assert s.inflight == 1000
    s.ack(psn(1), psn(1), [], 2 * MS)                        # it arrived after all
    assert s.inflight == 0 and not s.busy
    assert drain(s) == []
    s.sent(psn(0), "pkt0", 1000, 3 * MS, 0xC000, again=True)  # a late resend: nothing
    assert not s.busy


def test_the_sack_bitmap_follows_an_ack_psn_beyond_its_reach():
    r = Receiver(params(window=4096), START)
    for i in (0, 2, 100):
        r.data(psn(i), 1000, 0)
    cack, base, bitmap, _ = r.ack_fields(psn(100))
    assert cack == psn(0) and base == psn(100 - 63)
    assert bitmap == 1 << 63
    assert r.data(psn(5000), 1000, 0) == (DROPPED, None)     # past the tracked window


def test_a_window_lost_together_is_one_loss_each_not_retries_of_one_packet():
    """Packets sent a millisecond apart on a path that then died expire one poll after
    another: each timed out once, none was retried, so the PDC lives (retry_cnt 2)."""
    s = Sender(params(), START)
    for k in range(6):
        s.sent(s.assign(), f"pkt{k}", 1000, k * MS, 0xC000 + k)
    fired = [s.poll(s.deadline()) for _ in range(6)]
    assert [len(f) for f in fired] == [1] * 6 and not s.failed
    assert s.timeouts_in_row == 1            # backed off once, for the window, not six times
    assert fired[1] and s.rto() == 160 * MS
    # one packet that keeps timing out fails it at its retry_cnt + 1-th expiry
    assert drain(s) == [psn(k) for k in range(6)]
    t = 1000 * MS
    for expiry in (2, 3):
        s.sent(psn(0), "pkt0", 1000, t, 0xC000, again=True)
        t = s.deadline()
        s.poll(t)
        drain(s)
        assert s.failed == (expiry == 3)


def test_progress_starts_every_packets_count_again():
    s = sender(2, now=0)                                 # psn 0 and 1 in flight
    s.poll(80 * MS)                                      # both expire once
    assert drain(s) == [psn(0), psn(1)]
    s.sent(psn(0), "pkt0", 1000, 80 * MS, 0xC000, again=True)
    s.sent(psn(1), "pkt1", 1000, 80 * MS, 0xC001, again=True)
    s.ack(psn(0), psn(0), [], 90 * MS, False)            # progress: psn 1's count restarts
    for expiry in (1, 2, 3):
        t = s.deadline()
        s.poll(t)
        assert drain(s) == ([] if s.failed else [psn(1)])
        assert s.failed == (expiry == 3)                 # retry_cnt 2: the third fails
        if not s.failed:
            s.sent(psn(1), "pkt1", 1000, t, 0xC001, again=True)
