"""A NIC's UET PDCs end to end (traffic.uet.pdcs with the rank engine's UetOutbound):
two NICs joined by a simulated network that delays, reorders, drops, marks and
trims frames; set-up, delivery, recovery by cause, and teardown."""

import random

import pytest

from lab.modes import CC, EvPolicy
from traffic.nic.sendq import SendQueues
from traffic.ranks.uet_outbound import UetOutbound
from traffic.uet import layout
from traffic.uet.cc import NsccParams
from traffic.uet.control import parse_control
from traffic.uet.pdcs import UetConfig, UetPdcs, packet_key
from traffic.uet.pds import PdsParams

MAC = {0: "02:00:00:00:00:01", 1: "02:00:00:00:00:02"}
IP = {0: "10.0.0.1", 1: "10.0.1.2"}
RATE = 40e6
MS = 1_000_000


class Net:
    """Frames in flight: (arrival ns, destination NIC, bytes)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.flight = []
        self.now = 0
        self.sent_ctl = []

    def to(self, dst):
        def send(frame):
            self.sent_ctl.append((dst, frame))
            self.flight.append((self.now + 2 * MS + self.rng.randrange(MS), dst, frame))
        return send

    def due(self):
        self.flight.sort(key=lambda x: x[0])
        while self.flight and self.flight[0][0] <= self.now:
            yield self.flight.pop(0)[1:]


def config(cc=CC.NSCC, rod=False, policy=EvPolicy.REPS, close_ms=50):
    return UetConfig(line_bps=RATE, pds=PdsParams(rod=rod, rto_ns=100 * MS, rto_min_ns=10 * MS),
                     cc=cc, ev_policy=policy, nscc=NsccParams(RATE, network_rtt_ns=4 * MS),
                     initial_credit=30000, close_idle_ns=close_ms * MS)


def nic(me, cfg, net, seed):
    other = 1 - me
    pd = UetPdcs(cfg, net.to(other), MAC[me], IP[me], seed=seed, peer_ip={other: IP[other]},
                 peer_mac={other: MAC[other]})
    out = UetOutbound(me, IP[me], MAC[me], {other: IP[other]}, {other: MAC[other]}, 4096,
                      1, pd)
    out.prepare(other)
    return pd, out


def transfer(npackets=64, drop=0.0, trim=0.0, mark=0.0, reorder=0.0, cc=CC.NSCC, rod=False,
             policy=EvPolicy.REPS, seed=1, after_ms=0):
    """Send ``npackets`` from NIC 0 to NIC 1; returns (ns taken, chunks placed, total,
    sender counters, receiver counters, the sender's PDCs, the network)."""
    rng = random.Random(seed)
    net = Net(seed)
    cfg = config(cc, rod, policy)
    a, aout = nic(0, cfg, net, 11)
    b, _ = nic(1, cfg, net, 22)
    queue = SendQueues(packet_key)
    packets = aout.packets(1, 0, 1, npackets * 4096, 0)
    queue.extend(packets)
    got, buf = set(), bytearray(9216)
    frame_ns = int(layout.frame_len_for_mtu(4096) * 8e9 / RATE)
    next_tx, done_at = 0, None
    while net.now < 30_000 * MS:
        if net.now >= next_tx:
            batch, again = aout.next_batch(queue, 1, net.now)
            for w, p, re in zip(aout.wire(batch, net.now, again), batch, again):
                f = bytearray(buf[:w[0].fill_packet(buf, w[1], net.now, *w[2:], True)])
                r = rng.random()
                if r >= drop:
                    if r < drop + trim:
                        f = f[:layout.TRIM_BYTES]
                        f[15] = (layout.TRIM_DSCP << 2) | (f[15] & 3)
                    elif rng.random() < mark:
                        f[15] |= 3
                    late = rng.randrange(3 * MS) if rng.random() < reorder else 0
                    net.flight.append((net.now + 3 * MS + late, 1, bytes(f)))
                a.sent(packet_key(p), p[1], p, net.now, re)
            if batch:
                next_tx = net.now + frame_ns
        for dst, f in net.due():
            r = (b if dst == 1 else a).receive(f, len(f), net.now, lambda ip: (MAC[0], IP[0]))
            if r is not None and r[1]:
                got.add((r[0].tag, r[0].chunk, r[0].index))
        a.poll(net.now)
        b.poll(net.now)
        if done_at is None and len(got) == len(packets) and not a.busy():
            done_at = net.now
        if done_at is not None and net.now >= done_at + after_ms * MS:
            break
        net.now += 100_000
    return done_at, len(got), len(packets), a.counters(), b.counters(), a, net


def test_a_clean_transfer_opens_one_pdc_and_places_everything_once():
    t, got, n, ca, cb, a, net = transfer()
    assert got == n == 64
    assert ca["pdcs_opened"] == 1 and cb["targets_opened"] == 1
    assert ca["retransmitted_packets"] == 0 and cb["duplicates_received"] == 0
    assert cb["placed_packets"] == 64
    assert cb["acks_sent"] < 64                       # coalesced
    assert t < 64 * 1.2 * 0.84 * MS + 20 * MS         # near the line rate


def test_losses_are_recovered_by_timeout_and_their_evs_retired():
    t, got, n, ca, cb, *_ = transfer(drop=0.05, seed=3)
    assert got == n
    assert ca["retransmitted_by_timeout"] >= 1 and ca["evs_retired"] >= 1
    assert ca["retransmitted_by_trim"] == 0


def test_trimmed_packets_are_nacked_and_sent_again_without_a_timeout():
    t, got, n, ca, cb, *_ = transfer(trim=0.1, seed=4)
    assert got == n
    assert cb["trimmed_received"] == ca["retransmitted_by_trim"] >= 3
    assert ca["timeouts"] == 0 and cb["naks_sent"] == cb["trimmed_received"]


def test_reordering_is_placed_out_of_order_by_rud_without_retransmission():
    t, got, n, ca, cb, *_ = transfer(reorder=0.5, seed=5)
    assert got == n and cb["placed_out_of_order"] > 0
    assert ca["retransmitted_packets"] == 0


def test_rod_recovers_reordering_by_going_back():
    t, got, n, ca, cb, *_ = transfer(reorder=0.3, rod=True, seed=6)
    assert got == n
    assert cb["placed_out_of_order"] == 0 and cb["dropped_out_of_order"] > 0
    assert ca["retransmitted_by_nack"] > 0


def test_ecn_marks_reach_nscc_and_reps():
    t, got, n, ca, cb, a, _ = transfer(mark=0.5, seed=7)
    assert got == n and cb["ce_received"] > 0 and ca["ev_marked"] > 0
    assert ca["nscc_noop"] + ca["nscc_decrease"] > 0
    assert a.windows()[(1, 0)]                        # the window's trace


@pytest.mark.parametrize("cc,policy", [(CC.RCCC, EvPolicy.REPS),
                                       (CC.NONE, EvPolicy.OBLIVIOUS)])
def test_other_congestion_controls_and_policies_deliver(cc, policy):
    t, got, n, ca, cb, *_ = transfer(cc=cc, policy=policy, seed=8)
    assert got == n and ca["retransmitted_packets"] == 0


def test_an_idle_pdc_closes_on_both_sides():
    t, got, n, ca, cb, a, net = transfer(after_ms=200)
    assert got == n
    assert ca["pdcs_closed"] == 1 and cb["targets_closed"] == 1 and cb["close_acks_sent"] == 1
    closes = [parse_control(f) for dst, f in net.sent_ctl if dst == 1]
    assert [c.ctl_type for c in closes if c and c.ptype == layout.CTRL] == \
        [layout.CTRL_CLOSE_CMD]
    assert ca["placed_packets"] == 0 and cb["placed_packets"] == 64   # kept once closed


def test_a_class_of_its_own_gets_pdcs_of_its_own_with_its_dscp():
    # a job's traffic class (shared clusters): its packets on PDCs of their own, its DSCP
    net = Net(1)
    pd = UetPdcs(config(), net.to(1), MAC[0], IP[0], seed=11, peer_ip={1: IP[1]},
                 peer_mac={1: MAC[1]})
    out = UetOutbound(0, IP[0], MAC[0], {1: IP[1]}, {1: MAC[1]}, 4096, 2, pd, dscp=26,
                      class_dscp=[26, 0], tag_class=[0, 0, 1])
    out.prepare(1)
    default, other = out.packets(1, 0, 1, 4 * 4096, 0), out.packets(2, 0, 1, 4 * 4096, 0)
    assert sorted({packet_key(p)[1] for p in default}) == [0, 1]
    assert sorted({packet_key(p)[1] for p in other}) == [2, 3]
    assert {p[0].raw[15] >> 2 for p in default} == {26}
    assert {p[0].raw[15] >> 2 for p in other} == {0}
    # each PDC numbers its own PSNs; the last packet of the message on each asks for an ACK
    psns = [p[1] for p in other if packet_key(p)[1] == 2]
    assert len(psns) == 2 and psns[1] == psns[0] + 1
    assert [p[0].ar for p in other] == [False, False, True, True]
