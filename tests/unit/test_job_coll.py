"""The network part of a job's collective on fake NICs and a fake wire: steps released
in order, timeouts instead of hangs, the end at the last arrival (or ACK)."""

from traffic.jobs.coll import NetRun, steps_of
from traffic.jobs.config import Instance
from traffic.ranks.config import flow_id

MS = 1_000_000
MTU = 1000


class FakeOut:
    def __init__(self, me):
        self.me, self.psn = me, {}

    def packets(self, tag, step, peer, nbytes):
        count = max(1, -(-nbytes // MTU))
        out = []
        for i in range(count):
            psn = self.psn.get(peer, 0)
            self.psn[peer] = psn + 1
            out.append((None, psn, flow_id(self.me, peer, 0), tag, step, i, count))
        return out


class FakeRc:
    def __init__(self):
        self.acked = -1

    def acked_through(self, key, psn):
        return psn <= self.acked


class FakeNic:
    def __init__(self, index, rc=False):
        self.index, self.out = index, FakeOut(index)
        self.chunks, self.corrupt, self.unsent, self.last_rx = {}, {}, {}, {}
        self.done = {}
        self.last_ack, self.queue = None, []
        self.rc = FakeRc() if rc else None

    def enqueue(self, tag, packets):
        self.queue += packets
        self.unsent[tag] = self.unsent.get(tag, 0) + len(packets)

    def complete(self, tag, step, peer):
        e = self.chunks.get((tag, step, peer))
        return e is not None and len(e[1]) >= e[0]

    def step_timeout_ns(self, nbytes):
        return 10 * MS


def deliver(nics, now, drop=()):
    """Every queued packet arrives at once, but those (src, dst, step, index) in ``drop``."""
    for src in nics.values():
        for _tpl, _psn, flow, tag, step, index, count in src.queue:
            dst = nics[(flow >> 8) & 0xFFF]
            src.unsent[tag] -= 1
            if (src.index, dst.index, step, index) in drop:
                continue
            entry = dst.chunks.setdefault((tag, step, src.index), [count, set()])
            entry[1].add(index)
            if len(entry[1]) == count:
                dst.done.setdefault(tag, []).append((step, src.index))
            dst.last_rx[tag] = now
        src.queue = []


def inst(kind="allreduce", eps=(0, 1, 2), nbytes=3000):
    return Instance("x", 7, kind, "DP", eps, nbytes, eps, 0)


def drive(run, nics, drop=(), until=200 * MS, step=MS):
    now = 0
    while now < until:
        if run.poll(now):
            return now
        deliver(nics, now, drop)
        now += step
    raise AssertionError("never ended")


def test_ring_allreduce_completes_step_by_step():
    nics = {i: FakeNic(i) for i in (0, 1, 2)}
    run = NetRun(inst(), nics, 0)
    done = drive(run, nics)
    # 2(n-1) = 4 steps, each released one pass after the chunk it forwards arrived
    assert done == 4 * MS and run.end == 3 * MS       # the last arrival, not the pass
    assert run.wrong() == (0, 0)
    assert all(p.released == 4 and p.ok == {0, 1, 2, 3} for p in run.parts)


def test_a_lost_chunk_times_out_instead_of_hanging():
    nics = {i: FakeNic(i) for i in (0, 1, 2)}
    run = NetRun(inst(), nics, 0)
    done = drive(run, nics, drop={(0, 1, 1, 0)})      # 0 -> 1, step 1, packet 0
    assert run.wrong() == (1, 0)
    # the dependent step waited for the 10 ms timeout; the end for two more timeouts
    assert 10 * MS < done < 60 * MS


def test_the_end_waits_for_the_acks_and_is_the_last_ack():
    nics = {i: FakeNic(i, rc=True) for i in (0, 1)}
    run = NetRun(inst(eps=(0, 1), nbytes=2000), nics, 0)
    for now in range(0, 5 * MS, MS):
        assert not run.poll(now)
        deliver(nics, now)
    for n in nics.values():
        n.rc.acked, n.last_ack = 10, 4 * MS + 5
    assert run.poll(5 * MS) and run.end == 4 * MS + 5


def test_point_to_point_and_broadcast_steps_name_endpoints():
    p2p = Instance("p", 3, "p2p", "PP", (4, 9), 500, (4, 9), 0)
    (send,), (recv,) = steps_of(p2p)
    assert send.sends[0].peer == 9 and recv.recvs[0].peer == 4 and not recv.sends
    nics = {i: FakeNic(i) for i in (5, 6, 7)}
    run = NetRun(inst("broadcast", eps=(6, 5, 7)), nics, 0)
    drive(run, nics)
    assert run.wrong() == (0, 0)
    # the root (6) sent everything to 5, which forwarded it to 7; 7 sent nothing
    assert nics[7].out.psn == {} and sum(nics[6].out.psn.values()) == 3


def test_a_chunk_that_arrived_before_its_step_was_released_counts_at_the_release():
    # endpoint 1 runs ahead: its step-1 chunk reaches 0 before 0 has its step-0 chunk
    # (so before 0 released step 1); no later arrival comes to wake 0 up
    nics = {i: FakeNic(i) for i in (0, 1)}
    run = NetRun(inst(eps=(0, 1), nbytes=2 * MTU), nics, 0)
    assert not run.poll(0)                               # both release step 0
    held = [x for x in nics[1].queue if x[4] == 0]       # 1's step-0 chunk to 0, held back
    nics[1].queue = [x for x in nics[1].queue if x[4] != 0]
    deliver(nics, 0)
    assert not run.poll(MS)                              # 1 has step 0: releases step 1
    deliver(nics, MS)                                    # its step-1 chunk reaches 0
    assert not run.poll(2 * MS)
    nics[1].queue = held
    deliver(nics, 2 * MS)                                # 0's step 0 completes at last
    end = drive(run, nics, until=20 * MS)
    assert end is not None and end < 10 * MS             # no step timeout (10 ms)
    assert run.wrong() == (0, 0)
