"""RC transport: go-back-N, timers, retry limit, ACK coalescing (pure, injected time)."""

import pytest

from traffic.roce.qps import RankQPs
from traffic.roce.rcframes import (
    ACKNOWLEDGE,
    CNP,
    SYN_ACK,
    SYN_NAK_SEQ,
    ControlTemplate,
    parse_control,
)
from traffic.roce.transport import RcParams, Requester, Responder, psn_diff

MS = 1_000_000


def params(**kw):
    base = dict(timeout_exp=14, retry_cnt=3, backoff_cap=2, ack_every=4, ack_delay_ns=MS)
    base.update(kw)
    return RcParams(**base)


def send(req, psns, now=0):
    for p in psns:
        req.sent(p, f"pkt{p}", now)


def drain(req):
    out = []
    while True:
        item = req.next_resend()
        if item is None:
            return out
        out.append(item[0])


def test_psn_diff_wraps():
    assert psn_diff(1, 0xFFFFFF) == 2
    assert psn_diff(0xFFFFFF, 1) == -2
    assert psn_diff(5, 5) == 0


def test_timeout_is_ncc_ib_timeout_and_backs_off():
    p = params(timeout_exp=14)
    assert p.timeout_ns == 4096 * 2 ** 14          # 67.1 ms
    assert [p.rto_ns(k) // p.timeout_ns for k in range(5)] == [1, 2, 4, 4, 4]
    assert p.give_up_ns() == p.timeout_ns * (1 + 2 + 4 + 4)
    with pytest.raises(ValueError):
        RcParams(retry_cnt=8)


def test_cumulative_ack_empties_the_window_and_stops_the_timer():
    r = Requester(params())
    send(r, range(5))
    assert r.deadline == params().timeout_ns
    assert r.ack(2, 10) is True
    assert [p for p, _ in r.window] == [3, 4]
    assert r.deadline == 10 + params().timeout_ns    # progress restarts the timer
    assert r.ack(2, 20) is False                     # duplicate ACK: no progress
    assert r.deadline == 10 + params().timeout_ns    # ... and does not push the timer
    r.ack(4, 30)
    assert not r.busy and r.deadline is None


def test_nak_goes_back_to_the_expected_psn_in_order():
    r = Requester(params())
    send(r, range(10))
    r.nak(4, 5)                     # 0..3 arrived, 4 is missing
    assert r.naks == 1
    assert drain(r) == [4, 5, 6, 7, 8, 9]
    assert not r.window


def test_second_nak_while_resending_keeps_psn_order():
    r = Requester(params())
    send(r, range(10))
    r.nak(4, 5)
    first = r.next_resend()
    r.sent(first[0], first[1], 6, again=True)       # 4 went again; 5..9 wait
    r.nak(4, 7)                                     # 4 lost again
    assert drain(r) == [4, 5, 6, 7, 8, 9]
    assert r.retransmitted == 1


def test_timeout_goes_back_to_the_oldest_with_backoff():
    p = params()
    r = Requester(p)
    send(r, range(3))
    assert not r.poll(p.timeout_ns - 1)
    assert r.poll(p.timeout_ns)
    assert r.timeouts == 1 and drain(r) == [0, 1, 2]
    assert r.deadline == p.timeout_ns + 2 * p.timeout_ns     # doubled


def test_a_go_back_survives_packets_the_nic_had_queued_before_it():
    """A NIC hands frames to its interface ahead of the QP's bookkeeping: after a
    NAK, a new frame the interface had refused (its transmit ring, a paused link)
    leaves before the resends.  The window stays in PSN order: an ACK frees the
    resent packets it covers, and a timeout goes back to the oldest outstanding."""
    p = params(retry_cnt=7)
    r = Requester(p)
    send(r, range(10))
    r.nak(3, 1)                                     # 0..2 arrived
    r.sent(10, "pkt10", 2)                          # the ring's frame, new, leaves first
    for psn, pkt in [r.next_resend() for _ in range(3)]:
        r.sent(psn, pkt, 3, again=True)             # 3, 4, 5 go again; 6..9 wait
    assert [x[0] for x in r.window] == [3, 4, 5, 10]
    assert r.ack(4, 4) and [x[0] for x in r.window] == [5, 10]
    assert r.poll(4 + p.timeout_ns)                 # nothing more: the timer fires
    assert drain(r) == [5, 6, 7, 8, 9, 10]          # from the oldest, not the head 10


def test_a_timeout_before_the_resends_left_goes_back_to_them():
    p = params(retry_cnt=7)
    r = Requester(p)
    send(r, range(6))
    r.nak(2, 1)
    r.sent(6, "pkt6", 2)                            # the ring's frame; 2..5 still wait
    assert r.poll(2 + p.timeout_ns)
    assert drain(r) == [2, 3, 4, 5, 6]


def test_retry_limit_fails_the_qp():
    p = params(retry_cnt=2)
    r = Requester(p)
    send(r, [0])
    now = 0
    for _ in range(2):
        now = r.deadline
        assert r.poll(now)
        for psn, pkt in [r.next_resend()]:
            r.sent(psn, pkt, now, again=True)
        assert not r.failed
    assert r.poll(r.deadline)
    assert r.failed and r.deadline is None and r.next_resend() is None


def test_progress_gives_the_retries_back():
    p = params(retry_cnt=1)
    r = Requester(p)
    send(r, [0, 1])
    r.poll(r.deadline)
    drain(r)
    r.sent(0, "a", p.timeout_ns, again=True)
    r.sent(1, "b", p.timeout_ns, again=True)
    r.ack(0, p.timeout_ns + 5)                    # progress
    assert r.retries == 0
    r.poll(r.deadline)
    assert not r.failed


def test_responder_coalesces_acks():
    s = Responder(params(ack_every=4))
    replies = [s.data(psn, 0)[1] for psn in range(8)]
    assert replies == [None, None, None, ("ack", 3), None, None, None, ("ack", 7)]
    assert s.data(8, 0, ackreq=True) == (Responder.ACCEPT, ("ack", 8))


def test_responder_acks_after_the_delay():
    s = Responder(params(ack_every=100, ack_delay_ns=MS))
    s.data(0, 10)
    s.data(1, 20)
    assert s.deadline() == 10 + MS
    assert s.poll(10 + MS - 1) is None
    assert s.poll(10 + MS) == ("ack", 1)
    assert s.deadline() is None


def test_responder_naks_once_per_gap_and_drops_out_of_sequence():
    s = Responder(params())
    s.data(0, 0)
    assert s.data(2, 0) == (Responder.OUT_OF_SEQUENCE, ("nak", 1))
    assert s.data(3, 0) == (Responder.OUT_OF_SEQUENCE, None)      # no second NAK
    assert s.data(1, 0)[0] == Responder.ACCEPT
    assert s.data(3, 0) == (Responder.OUT_OF_SEQUENCE, ("nak", 2))  # a new gap
    assert s.naks == 2 and s.out_of_sequence == 3


def test_responder_answers_duplicates_once():
    s = Responder(params())
    for psn in range(3):
        s.data(psn, 0)
    assert s.data(1, 0) == (Responder.DUPLICATE, ("ack", 2))
    assert s.data(2, 0) == (Responder.DUPLICATE, None)
    assert s.duplicates == 2


def test_lossy_channel_delivers_everything_in_order():
    """Requester and responder over a channel that drops every 7th frame either way."""
    p = params(ack_every=2, retry_cnt=7)
    req, resp = Requester(p), Responder(p)
    delivered, count, now, nxt = [], [0], 0, 0
    total = 200

    def lossy():
        count[0] += 1
        return count[0] % 7 == 0

    while len(delivered) < total and not req.failed:
        now += 100_000
        batch = []
        item = req.next_resend()
        if item is not None:
            batch.append((item[0], True))
        elif nxt < total:
            batch.append((nxt, False))
            nxt += 1
        for psn, again in batch:
            req.sent(psn, psn, now, again)
            if lossy():
                continue
            verdict, reply = resp.data(psn, now, ackreq=psn == total - 1)
            if verdict == Responder.ACCEPT:
                delivered.append(psn)
            if reply and not lossy():
                (req.ack if reply[0] == "ack" else req.nak)(reply[1], now)
        late = resp.poll(now)
        if late and not lossy():
            req.ack(late[1], now)
        req.poll(now)
    assert delivered == list(range(total))
    assert req.retransmitted > 0 and not req.failed


def test_ack_and_nak_frames_round_trip_with_valid_icrc():
    t = ControlTemplate(ACKNOWLEDGE, "02:00:00:00:00:01", "02:00:00:00:00:02",
                        "10.0.0.1", "10.0.0.2", dqpn=0x4321)
    ack = parse_control(t.frame(77, SYN_ACK, msn=5))
    assert ack.is_ack and not ack.is_nak and ack.psn == 77 and ack.msn == 5
    assert ack.dqpn == 0x4321 and ack.icrc_ok
    nak = t.frame(78, SYN_NAK_SEQ)
    assert parse_control(nak).is_nak
    bad = bytearray(nak)
    bad[-10] ^= 1
    assert not parse_control(bytes(bad)).icrc_ok
    cnp = parse_control(ControlTemplate(CNP, "02:00:00:00:00:01", "02:00:00:00:00:02",
                                        "10.0.0.1", "10.0.0.2", dqpn=9).frame())
    assert cnp.opcode == CNP and cnp.icrc_ok and len(t.frame()) == 62


def test_rank_qps_answer_a_gap_with_a_nak_frame():
    wire = []
    q = RankQPs(params(), wire.append, "02:00:00:00:00:01", "10.0.0.1")
    peer = bytes([10, 0, 0, 2])
    args = (peer, "02:00:00:00:00:02", "10.0.0.2", 0x55)
    assert q.arrived(*args, 0, False, 0)
    assert not q.arrived(*args, 2, False, 0)        # 1 is missing
    c = parse_control(wire[-1])
    assert c.is_nak and c.psn == 1 and c.dqpn == 0x55
    assert q.counters()["naks_sent"] == 1
    # the requester side: a NAK for our QP queues its packets again
    q.add_qp((1, 0), 0x66)
    for psn in range(3):
        q.sent((1, 0), psn, ("pkt", psn), 0)
    c.dqpn = 0x66
    q.control(c, 10)
    again = q.resends(8)
    assert [psn for _, psn, _ in again] == [1, 2]
    for key, psn, pkt in again:
        q.sent(key, psn, pkt, 11, again=True)
    assert q.busy() and q.counters()["retransmitted_packets"] == 2
    q.control(parse_control(ControlTemplate(ACKNOWLEDGE, "02:00:00:00:00:02", "02:00:00:00:00:01",
                                            "10.0.0.2", "10.0.0.1", 0x66).frame(2)), 12)
    assert not q.busy()


def test_out_of_order_responder_places_ahead_and_acks_the_prefix():
    s = Responder(params(ack_every=100), ooo=True)
    assert s.data(1, 0) == (Responder.ACCEPT, None)        # ahead: placed, no NAK
    assert s.data(2, 0) == (Responder.ACCEPT, None)
    assert s.data(2, 0) == (Responder.DUPLICATE, None)
    assert s.data(0, 0, ackreq=True) == (Responder.ACCEPT, ("ack", 2))   # prefix 0..2
    assert s.naks == 0 and s.expected == 3


def test_out_of_order_responder_naks_a_gap_older_than_its_window_once():
    s = Responder(params(ack_every=100, ooo_window=3), ooo=True)
    assert s.data(1, 0) == (Responder.ACCEPT, None)
    assert s.data(2, 0) == (Responder.ACCEPT, None)
    assert s.data(3, 0) == (Responder.ACCEPT, ("nak", 0))  # 3 placed past the gap: lost
    assert s.data(4, 0) == (Responder.ACCEPT, None)        # one NAK per gap
    assert s.data(0, 0) == (Responder.ACCEPT, None)        # the go-back fills it
    assert s.expected == 5 and s.naks == 1
    assert s.data(6, 0) == (Responder.ACCEPT, None)        # a new gap: NAK allowed again
    assert s.data(7, 0) == (Responder.ACCEPT, None)
    assert s.data(8, 0) == (Responder.ACCEPT, ("nak", 5))


def test_an_ackreq_that_came_out_of_order_is_answered_when_the_gap_fills():
    """A sprayed message's last packet (AckReq) overtakes an earlier one: the ACK
    is due when the gap fills, not a coalescing delay later (the receiver may be
    done by then and the sender would wait for its timer)."""
    s = Responder(params(ack_every=100), ooo=True)
    assert s.data(1, 0) == (Responder.ACCEPT, None)
    assert s.data(2, 0, ackreq=True) == (Responder.ACCEPT, None)   # the last, early
    assert s.data(0, 0) == (Responder.ACCEPT, ("ack", 2))          # the gap fills
    assert s.data(4, 0) == (Responder.ACCEPT, None)                # no AckReq ahead
    assert s.data(3, 0) == (Responder.ACCEPT, None)                # coalesced as usual


def test_a_rate_limited_qp_catches_up_within_its_slack_after_a_late_look():
    """A caller waking on a tick (the job engine) lets a QP under DCQCN send what fell
    due meanwhile, up to ``rate_slack_ns``; without slack (a rank) one packet per look."""
    from traffic.roce.dcqcn import DcqcnParams
    ms = 1_000_000
    for slack, allowed in ((0, 1), (4 * ms, 3)):
        q = RankQPs(params(), lambda f: None, "02:00:00:00:00:01", "10.0.0.1",
                    dcqcn=DcqcnParams(8e6), rate_slack_ns=slack)
        q.add_qp((1, 0), 0x66)
        cnp = parse_control(ControlTemplate(CNP, "02:00:00:00:00:02", "02:00:00:00:00:01",
                                            "10.0.0.2", "10.0.0.1", 0x66).frame())
        q.control(cnp, 0)                       # cut to 4 Mbit/s: a 1000-byte packet / 2 ms
        assert q.rp[(1, 0)].rate_bps == 4e6
        now, sent = 10 * ms, 0                  # looked at 10 ms late
        while q.may_send((1, 0), now):
            q.charge((1, 0), 1000, now)
            sent += 1
        assert sent == allowed
