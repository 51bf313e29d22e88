"""Receiver accounting on synthetic sequences, and the token bucket."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from traffic.nic.accounting import PSN_MOD, Accounting, FlowAccount, unwrap
from traffic.nic.pacing import TokenBucket

MS = 1_000_000


def feed(seq, step_ns=100_000, gaps=None, first_psn=None, **kw):
    """Account PSNs ``seq`` arriving every ``step_ns`` (plus extra gaps by index)."""
    fa = FlowAccount(1, first_psn=first_psn, **kw)
    t = 0
    for i, psn in enumerate(seq):
        t += step_ns + (gaps or {}).get(i, 0)
        fa.add(psn % PSN_MOD, t, 100)
    return fa


def test_clean_flow():
    s = feed(range(1000)).summary(sent=1000)
    assert s["received_packets"] == 1000
    assert s["dropped_packets"] == s["duplicated_packets"] == s["reordered_packets"] == 0
    assert s["total_disruptions"] == 0


def test_loss_dups_reordering():
    seq = list(range(100))
    del seq[40:45]                     # 5 lost
    seq.insert(10, 3)                  # duplicate of 3
    seq[20], seq[21] = seq[21], seq[20]   # one late packet
    s = feed(seq).summary(sent=100)
    assert s["dropped_packets"] == 5
    assert s["duplicated_packets"] == s["total_duplications"] == 1
    assert s["reordered_packets"] == 1
    assert s["received_packets"] == len(seq)


def test_loss_inferred_without_sent_count():
    s = feed([0, 1, 2, 7, 8]).summary()
    assert s["dropped_packets"] == 4


def test_psn_wrap():
    start = PSN_MOD - 50
    seq = list(range(start, start + 100))
    seq[60], seq[61] = seq[61], seq[60]
    fa = feed(seq, first_psn=start % PSN_MOD)
    s = fa.summary(sent=100)
    assert s["dropped_packets"] == 0 and s["duplicated_packets"] == 0
    assert s["reordered_packets"] == 1
    assert fa.highest - fa.lowest == 99


def test_unwrap():
    assert unwrap(2, PSN_MOD - 3) == PSN_MOD + 2
    assert unwrap(PSN_MOD - 3, PSN_MOD + 2) == PSN_MOD - 3
    assert unwrap(10, 12) == 10


def test_injected_gap_is_one_disruption():
    # 100 µs spacing; a 30 ms silence after packet 499 with 20 packets lost in it.
    seq = list(range(500)) + list(range(520, 1000))
    s = feed(seq, gaps={500: 30 * MS}, gap_threshold_ns=10 * MS).summary(sent=1000)
    assert s["total_disruptions"] == 1
    assert abs(s["longest_disruption_ms"] - 30.1) < 1e-6
    assert abs(s["longest_disruption"] - 0.0301) < 1e-9
    assert s["disrupted_packets"] == 20
    assert s["dropped_packets"] == 20


def test_a_gap_counts_as_lost_only_the_skipped_sequences_that_never_arrived():
    # a flow moved to a shorter path: 10..19 overtaken by 20.., 3 of them never arrive
    seq = list(range(10)) + list(range(20, 40)) + [10, 11, 12, 13, 15, 17, 19] + \
        list(range(40, 60))
    s = feed(seq, gaps={10: 30 * MS}, gap_threshold_ns=10 * MS).summary(sent=60)
    (gap,) = s["disruptions"]
    assert gap["skipped"] == 10 and gap["never_arrived"] == 3
    assert s["dropped_packets"] == 3 and s["reordered_packets"] == 7
    s = feed(list(range(500)) + list(range(520, 600)), gaps={500: 30 * MS},
             gap_threshold_ns=10 * MS).summary()
    assert s["disruptions"][0]["never_arrived"] == 20


def test_pause_gap_skips_nothing():
    s = feed(range(100), gaps={50: 20 * MS, 80: 12 * MS},
             gap_threshold_ns=10 * MS).summary()
    assert s["total_disruptions"] == 2
    assert s["disrupted_packets"] == 0
    assert abs(s["longest_disruption_ms"] - 20.1) < 1e-6


def test_timeline_1ms_bins():
    acct = Accounting()
    for i in range(30):                 # 10 packets/ms of 125 bytes = 10 Mbit/s
        acct.add(1, i, i * 100_000, 125)
    tl = acct.timeline_mbps()
    assert tl == [10.0, 10.0, 10.0]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 400), drop=st.floats(0, 0.5), dup=st.floats(0, 0.3),
       swaps=st.integers(0, 20), seed=st.integers(0, 1000),
       start=st.integers(0, PSN_MOD - 1))
def test_random_sequences_conserve_counts(n, drop, dup, swaps, seed, start):
    rng = random.Random(seed)
    kept = [start + i for i in range(n) if rng.random() >= drop]
    arrivals = []
    for s in kept:
        arrivals.append(s)
        if rng.random() < dup:
            arrivals.append(s)
    for _ in range(swaps):
        if len(arrivals) > 1:
            i = rng.randrange(len(arrivals) - 1)
            arrivals[i], arrivals[i + 1] = arrivals[i + 1], arrivals[i]
    s = feed(arrivals, first_psn=start % PSN_MOD).summary(sent=n)
    assert s["received_packets"] == len(arrivals)
    assert s["duplicated_packets"] == len(arrivals) - len(set(kept))
    assert s["dropped_packets"] == n - len(set(kept))
    assert s["reordered_packets"] <= swaps


def test_token_bucket_rate_and_burst():
    now = 0
    tb = TokenBucket(rate=1000, depth=10, now_ns=now)   # 1000 tokens/s
    assert tb.refill(now) == 10
    tb.consume(10)
    assert tb.wait_ns(1) == 1_000_001
    now += 5_000_000
    assert abs(tb.refill(now) - 5) < 1e-9
    now += 10**9                                           # idle: capped at depth
    assert tb.refill(now) == 10
    # long-run rate: spend whenever a token is there
    sent = 0
    for _ in range(100_000):
        now += 10_000
        tb.refill(now)
        while tb.tokens >= 1:
            tb.consume(1)
            sent += 1
    assert abs(sent - 1000) <= 11
