"""Collective schedules: matching sends/receives, data flow, busbw formulas."""

import pytest

from traffic.ranks.collectives import (
    BUSBW_FACTOR,
    COLLECTIVES,
    Transfer,
    bytes_per_rank,
    chunk_bytes,
    cross_leaf_hops,
    ring_order,
    schedule,
)
from traffic.ranks.report import bandwidths

NS = [2, 3, 4, 5, 8]


@pytest.mark.parametrize("coll", COLLECTIVES)
@pytest.mark.parametrize("n", NS)
def test_every_send_matches_a_receive(coll, n):
    ring = ring_order(range(n), {r: r % 2 for r in range(n)})
    size = 1000 * n + 7                      # not divisible: uneven chunks
    scheds = {r: schedule(coll, n, r, size, ring) for r in range(n)}
    for r, steps in scheds.items():
        for st in steps:
            for t in st.sends:
                peer_step = scheds[t.peer][st.index]
                match = [x for x in peer_step.recvs if x.peer == r]
                assert match == [type(t)(r, t.chunk, t.nbytes)]
            for dep in st.after:
                assert dep < st.index


@pytest.mark.parametrize("coll", [c for c in COLLECTIVES if c not in ("incast", "broadcast")])
@pytest.mark.parametrize("n", NS)
def test_bytes_per_rank_follow_busbw_factor(coll, n):
    size = 4096 * n
    for r in range(n):
        sent = sum(t.nbytes for st in schedule(coll, n, r, size) for t in st.sends)
        recv = sum(t.nbytes for st in schedule(coll, n, r, size) for t in st.recvs)
        assert sent == recv == BUSBW_FACTOR[coll](n) * size
    assert bytes_per_rank(coll, n, size) == BUSBW_FACTOR[coll](n) * size


@pytest.mark.parametrize("n", NS)
def test_broadcast_forwards_every_chunk_once_down_the_ring(n):
    ring = list(reversed(range(n)))              # the root is ring[0]
    size = 1000 * n + 7
    scheds = {r: schedule("broadcast", n, r, size, ring) for r in range(n)}
    have = {r: set(range(n)) if r == ring[0] else set() for r in range(n)}
    for k in range(len(scheds[ring[0]])):
        for r in range(n):
            for t in scheds[r][k].sends:
                assert t.chunk in have[r]        # forwarded only once it arrived
                assert all(d < k for d in scheds[r][k].after)
        for r in range(n):
            for t in scheds[r][k].sends:
                have[t.peer].add(t.chunk)
    assert all(have[r] == set(range(n)) for r in range(n))
    sent = [sum(t.nbytes for st in scheds[r] for t in st.sends) for r in ring]
    assert sent == [size] * (n - 1) + [0]
    assert bytes_per_rank("broadcast", n, size) == BUSBW_FACTOR["broadcast"](n) * size


@pytest.mark.parametrize("n", NS)
def test_incast_every_rank_writes_to_rank_0(n):
    size = 4096
    root = schedule("incast", n, 0, size)
    assert [len(st.recvs) for st in root] == ([n - 1] if n > 1 else [])
    assert sum(t.nbytes for st in root for t in st.recvs) == BUSBW_FACTOR["incast"](n) * size
    for r in range(1, n):
        (st,) = schedule("incast", n, r, size)
        assert st.sends == (Transfer(0, r, size),) and st.recvs == ()


def simulate_ring(coll, n, ring):
    """Run the schedule on sets of contributions; returns each rank's buffer."""
    buf = {r: {c: ({r} if coll != "allgather" or c == ring.index(r) else set())
               for c in range(n)} for r in range(n)}
    scheds = {r: schedule(coll, n, r, 100 * n, ring) for r in range(n)}
    reduce_steps = n - 1 if coll in ("allreduce", "reducescatter") else 0
    for k in range(len(scheds[0])):
        msgs = [(r, t.peer, t.chunk, set(buf[r][t.chunk]))
                for r in range(n) for t in scheds[r][k].sends]
        for src, dst, chunk, data in msgs:
            # the receiver expects exactly this chunk from this peer in step k
            assert scheds[dst][k].recvs[0].chunk == chunk
            if k < reduce_steps:
                buf[dst][chunk] |= data      # reduce
            else:
                buf[dst][chunk] = data       # copy
    return buf


@pytest.mark.parametrize("n", NS)
def test_ring_allreduce_reduces_everything_everywhere(n):
    ring = list(reversed(range(n)))
    buf = simulate_ring("allreduce", n, ring)
    assert all(buf[r][c] == set(range(n)) for r in range(n) for c in range(n))


@pytest.mark.parametrize("n", NS)
def test_ring_reducescatter_and_allgather(n):
    ring = list(range(n))
    buf = simulate_ring("reducescatter", n, ring)
    assert all(buf[r][ring.index(r)] == set(range(n)) for r in range(n))
    buf = simulate_ring("allgather", n, ring)
    # AllGather: everyone ends with every rank's own chunk
    for r in range(n):
        assert {c: buf[r][c] for c in range(n)} == {
            ring.index(q): {q} for q in range(n)}


def test_ring_dependencies_chain():
    steps = schedule("allreduce", 4, 2, 4000)
    assert len(steps) == 6
    assert [s.after for s in steps] == [(), (0,), (1,), (2,), (3,), (4,)]
    # what a rank forwards in step k is what it received in step k-1 (RS phase)
    for k in range(1, 3):
        assert steps[k].sends[0].chunk == steps[k - 1].recvs[0].chunk


def test_alltoall_has_no_dependencies_and_covers_all_peers():
    steps = schedule("alltoall", 5, 1, 5000)
    assert sorted(s.sends[0].peer for s in steps) == [0, 2, 3, 4]
    assert sorted(s.recvs[0].peer for s in steps) == [0, 2, 3, 4]
    assert all(s.after == () for s in steps)


def test_topology_aware_ring_minimises_cross_leaf_hops():
    leaf = {0: "a", 1: "b", 2: "a", 3: "b", 4: "a", 5: "b"}
    naive = ring_order(range(6))
    aware = ring_order(range(6), leaf)
    assert cross_leaf_hops(naive, leaf) == 6
    assert cross_leaf_hops(aware, leaf) == 2
    assert sorted(aware) == list(range(6))
    assert aware == [0, 2, 4, 1, 3, 5]


def test_chunks_cover_the_buffer():
    assert sum(chunk_bytes(1001, 7, i) for i in range(7)) == 1001


def test_bad_arguments():
    with pytest.raises(ValueError):
        schedule("gather", 4, 0, 100)
    with pytest.raises(ValueError):
        schedule("allreduce", 4, 4, 100)
    with pytest.raises(ValueError):
        schedule("allreduce", 3, 0, 100, ring=[0, 1, 1])


@pytest.mark.parametrize("coll,n,factor", [("allreduce", 4, 1.5), ("allreduce", 8, 1.75),
                                           ("allgather", 4, 0.75), ("alltoall", 8, 0.875),
                                           ("reducescatter", 2, 0.5)])
def test_busbw_formula(coll, n, factor):
    bw = bandwidths(coll, n, size=10**9, seconds=2.0)
    assert bw["algbw_GBps"] == pytest.approx(0.5)
    assert bw["busbw_GBps"] == pytest.approx(0.5 * factor)
    assert bw["algbw_Mbps"] == pytest.approx(4000)
    assert bw["busbw_Mbps"] == pytest.approx(4000 * factor)


def test_uet_ranks_add_up_to_one_report_with_its_lines():
    from traffic.ranks.report import combine, table

    def rank(i, retired, last, windows):
        tr = {"pdcs_opened": 1, "retransmitted_packets": 3, "retransmitted_by_nack": 0,
              "retransmitted_by_trim": 2, "retransmitted_by_timeout": 1,
              "placed_out_of_order": 5, "trimmed_received": 2, "evs_retired": retired}
        return {"rank": i, "name": f"h{i + 1}", "collective": "allreduce", "nranks": 2,
                "link_bps": 40e6, "transport": tr, "rc": {}, "failed_qps": [],
                "results": [{"size": 1 << 20, "time_s": 1.0, "bytes_sent": 1 << 20,
                             "bytes_received": 1 << 20, "chunks_missing": 0,
                             "chunks_corrupted": 0, "transport": tr}],
                "uet": {"evs_retired": retired, "last_retired_ms": last, "ev_freezes": 1,
                        "ev_policy": "reps", "ev_set": 256, "cc": "nscc",
                        "network_rtt_ms": 5.4, "windows": windows}}
    rep = combine([rank(0, 2, 812.5, {"1:0": [(0.0, 40000), (1.0, 30000)]}),
                   rank(1, 0, None, {"0:0": [(0.0, 40000)]})])
    u = rep["uet"]
    assert u["evs_retired"] == 2 and u["last_retired_ms"] == 812.5 and u["ev_freezes"] == 2
    assert set(u["windows"]) == {"h1->h2 pdc0", "h2->h1 pdc0"}
    text = table(rep)
    assert "# transport uet: 6 packets retransmitted (0 by NACK, 4 by trim, 2 by timeout), " \
           "10 placed out of order, 4 trimmed received, 2 EVs retired" in text
    assert "# uet: nscc, EV policy reps over 256 values; 2 EVs retired, the last 812 ms" in text


def test_a_call_whose_ranks_started_apart_reports_its_span_on_one_clock():
    # an incast: the senders started 400 ms before the receiver, whose own time leaves
    # out what had arrived by then (a paused fabric held it)
    from traffic.ranks.report import combine, table

    def rank(i, start_ms, time_s):
        return {"rank": i, "collective": "incast", "nranks": 3, "link_bps": 40e6,
                "results": [{"size": 1 << 18, "time_s": time_s, "bytes_sent": 0,
                             "bytes_received": 0, "chunks_missing": 0, "chunks_corrupted": 0,
                             "t_start_ns": int(start_ms * 1e6)}]}
    rep = combine([rank(0, 1400, 0.234), rank(1, 1000, 0.25), rank(2, 1010, 0.26)])
    (row,) = rep["rows"]
    assert row["time_s"] == 0.26                       # the slowest rank's own time
    assert row["span_s"] == pytest.approx(0.634)       # 1000 ms -> 1634 ms
    assert row["start_skew_s"] == pytest.approx(0.4)
    assert "started 400 ms apart; from the first start to the last end 634.0 ms" in table(rep)
    # ranks that started together get no such line
    rep = combine([rank(0, 1000, 0.3), rank(1, 1001, 0.3), rank(2, 1002, 0.3)])
    assert "apart" not in table(rep)
