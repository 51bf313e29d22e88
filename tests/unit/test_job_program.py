"""A job's programs op by op on a fake clock: compute timers, collectives matched by id
across their members, blocking, non-blocking and wait, send/recv pairs, deadlocks."""

import pytest

from traffic.jobs.config import load_job
from traffic.jobs.program import Deadlock, JobProgram

MS = 1_000_000


def job(programs, ranks=None, endpoints=2):
    ranks = ranks if ranks is not None else [r % endpoints for r in range(len(programs))]
    eps = [{"intf": f"eth{i}", "ip": f"10.0.0.{i + 1}", "rate_bps": 40e6}
           for i in range(endpoints)]
    return load_job({"endpoints": eps, "ranks": ranks, "programs": programs})


def coll(cid, members, blocking=True, fabric=True, local_ns=0, nbytes=1024, kind="allreduce"):
    return {"op": "coll", "id": cid, "kind": kind, "group": "DP", "members": members,
            "bytes": nbytes, "blocking": blocking, "fabric": fabric, "local_ns": local_ns}


def compute(ms):
    return {"op": "compute", "ns": ms * MS}


def run(p, events):
    """Advance ``p`` through ``events`` (time -> network instances done then); returns
    {instance id: launch time}.  A launched instance ends when ``events`` says."""
    launched = {}
    now = 0
    for _ in range(100):
        for inst in p.advance(now):
            launched[inst.id] = now
        for cid, t in events.items():
            if cid in launched and t == now and p.instance_times(cid)[1] is None:
                p.network_done(cid, t)
                for inst in p.advance(now):
                    launched[inst.id] = now
        if p.finished():
            return launched
        due = [t for t in [p.next_timer()] + [t for c, t in events.items()
                                               if c in launched and t > now] if t is not None]
        if not due:
            p.check(now)
            raise AssertionError("no progress and no deadlock found")
        now = min(due)
    raise AssertionError("did not finish")


def test_a_collective_starts_when_its_last_member_arrives_and_holds_blocking_ranks():
    j = job([[compute(2), coll("ar", [0, 1])], [compute(5), coll("ar", [0, 1])]])
    p = JobProgram(j.programs, j.instances)
    launched = run(p, {"ar": 9 * MS})
    assert launched == {"ar": 5 * MS}            # rank 1 arrived last, at 5 ms
    assert p.instance_times("ar") == (5 * MS, 9 * MS, 9 * MS)
    r0 = p.rank_records(0)
    assert r0[0] == {"op": "compute", "start_ns": 0, "end_ns": 2 * MS}
    assert r0[1]["start_ns"] == 2 * MS and r0[1]["end_ns"] == 9 * MS    # waited 7 ms
    assert r0[1]["ready_ns"] == 5 * MS and r0[1]["done_ns"] == 9 * MS
    assert p.rank_records(1)[1]["start_ns"] == 5 * MS and p.t == [9 * MS, 9 * MS]


def test_non_blocking_overlaps_compute_and_wait_holds_until_done():
    prog = [coll("g", [0, 1], blocking=False), compute(3), {"op": "wait", "ids": ["g"]},
            compute(1)]
    j = job([prog, list(prog)])
    p = JobProgram(j.programs, j.instances)
    run(p, {"g": 10 * MS})
    ops = p.rank_records(0)
    assert ops[0]["start_ns"] == ops[0]["end_ns"] == 0          # issued, not waited for
    assert ops[1] == {"op": "compute", "start_ns": 0, "end_ns": 3 * MS}   # overlapped
    assert ops[2] == {"op": "wait", "ids": ["g"], "start_ns": 3 * MS, "end_ns": 10 * MS}
    assert ops[3]["end_ns"] == 11 * MS


def test_wait_on_a_collective_done_before_costs_nothing():
    prog = [coll("g", [0, 1], blocking=False), compute(20), {"op": "wait", "ids": ["g"]}]
    j = job([prog, list(prog)])
    p = JobProgram(j.programs, j.instances)
    run(p, {"g": 10 * MS})
    wait = p.rank_records(0)[2]
    assert wait["start_ns"] == wait["end_ns"] == 20 * MS


def test_local_collectives_take_local_ns_and_need_no_network():
    # ranks 0 and 1 share endpoint 0: a TP allreduce over NVLink; fabric false too
    j = job([[coll("tp", [0, 1], local_ns=2 * MS), coll("x", [0, 1], fabric=False,
                                                         local_ns=MS)]] * 2,
            ranks=[0, 0])
    p = JobProgram(j.programs, j.instances)
    assert run(p, {}) == {}
    assert p.instance_times("tp") == (0, None, 2 * MS)
    assert p.instance_times("x") == (2 * MS, None, 3 * MS)


def test_members_sharing_an_endpoint_add_their_local_hop_to_the_network_part():
    # 4 ranks on 2 endpoints, ring 0,1 | 2,3: the network part, then 1 ms of NVLink
    j = job([[coll("ar", [0, 1, 2, 3], local_ns=MS)]] * 4, ranks=[0, 0, 1, 1])
    inst = j.instances["ar"]
    assert inst.endpoints == (0, 1) and inst.local_ns == MS and inst.network
    p = JobProgram(j.programs, j.instances)
    run(p, {"ar": 5 * MS})
    assert p.instance_times("ar") == (0, 5 * MS, 6 * MS)
    assert all(p.rank_records(r)[0]["end_ns"] == 6 * MS for r in range(4))


def test_send_is_eager_and_recv_waits_for_the_delivery():
    j = job([[compute(1), {"op": "send", "id": "pp", "peer": 1, "bytes": 100}],
             [compute(4), {"op": "recv", "id": "pp", "peer": 0, "bytes": 100}]])
    inst = j.instances["pp"]
    assert inst.kind == "p2p" and inst.members == (0, 1) and inst.endpoints == (0, 1)
    p = JobProgram(j.programs, j.instances)
    assert run(p, {"pp": 7 * MS}) == {"pp": MS}      # the sender did not wait for the recv
    send, recv = p.rank_records(0)[1], p.rank_records(1)[1]
    assert send["start_ns"] == MS and send["end_ns"] == 7 * MS      # held until delivered
    assert recv["start_ns"] == 4 * MS and recv["end_ns"] == 7 * MS
    # a recv reached after the delivery does not wait
    j = job([[{"op": "send", "id": "pp", "peer": 1, "bytes": 100}],
             [compute(9), {"op": "recv", "id": "pp", "peer": 0, "bytes": 100}]])
    p = JobProgram(j.programs, j.instances)
    run(p, {"pp": 3 * MS})
    recv = p.rank_records(1)[1]
    assert recv["start_ns"] == recv["end_ns"] == 9 * MS


def test_pipeline_stages_sending_both_ways_do_not_deadlock():
    # stage 0: send fwd, recv bwd; stage 1: send bwd, recv fwd (a rendezvous would hang)
    j = job([[{"op": "send", "id": "f", "peer": 1, "bytes": 9},
              {"op": "recv", "id": "b", "peer": 1, "bytes": 9}],
             [{"op": "send", "id": "b", "peer": 0, "bytes": 9},
              {"op": "recv", "id": "f", "peer": 0, "bytes": 9}]])
    p = JobProgram(j.programs, j.instances)
    assert run(p, {"f": 2 * MS, "b": 3 * MS}) == {"f": 0, "b": 0}
    assert p.t == [3 * MS, 3 * MS]


def test_independent_groups_run_concurrently():
    # DP groups {0,2} and {1,3} on endpoints 0 and 1: both launch at once
    prog = lambda r: [coll(f"dp{r % 2}", [r % 2, r % 2 + 2])]  # noqa: E731
    j = job([prog(r) for r in range(4)], ranks=[0, 0, 1, 1])
    p = JobProgram(j.programs, j.instances)
    assert sorted(i.id for i in p.advance(0)) == ["dp0", "dp1"]


def test_programs_that_wait_on_each_other_are_a_deadlock():
    # rank 0 runs a then b, rank 1 b then a: each waits for the other's arrival
    j = job([[coll("a", [0, 1]), coll("b", [0, 1])], [coll("b", [0, 1]), coll("a", [0, 1])]])
    p = JobProgram(j.programs, j.instances)
    assert p.advance(0) == []
    with pytest.raises(Deadlock, match="rank 0 at op 0 waits for 'a'"):
        p.check(0)


def test_nothing_is_a_deadlock_while_a_timer_or_the_network_runs():
    j = job([[compute(1), coll("a", [0, 1])], [coll("a", [0, 1])]])
    p = JobProgram(j.programs, j.instances)
    p.advance(0)
    p.check(0)                                   # rank 0 computes
    assert [i.id for i in p.advance(MS)] == ["a"]
    p.check(MS)                                  # "a" is on the network
    p.network_done("a", 2 * MS)
    p.advance(2 * MS)
    assert p.finished()


def test_a_compute_ops_label_is_kept_in_its_record():
    j = job([[dict(compute(2), label="it0.L3.fwd"), compute(1)]], endpoints=1)
    p = JobProgram(j.programs, j.instances)
    run(p, {})
    recs = p.rank_records(0)
    assert recs[0]["label"] == "it0.L3.fwd" and "label" not in recs[1]
    assert recs[0]["end_ns"] - recs[0]["start_ns"] == 2 * MS


def until(ms):
    return {"op": "until", "ns": ms * MS}


def test_until_holds_a_rank_to_a_point_of_the_job_clock_and_not_once_past_it():
    j = job([[until(7), coll("ar", [0, 1])], [compute(9), until(4), coll("ar", [0, 1])]])
    p = JobProgram(j.programs, j.instances)
    launched = run(p, {"ar": 12 * MS})
    # rank 0 idles until 7 ms; rank 1 computes to 9 ms, already past its until 4 ms
    assert launched == {"ar": 9 * MS}
    r0, r1 = p.rank_records(0), p.rank_records(1)
    assert r0[0] == {"op": "until", "start_ns": 0, "end_ns": 7 * MS}
    assert r1[1] == {"op": "until", "start_ns": 9 * MS, "end_ns": 9 * MS}


def test_daemon_ranks_need_not_finish_but_a_job_rank_waiting_on_them_must():
    send = {"op": "send", "id": "bg/x1", "peer": 3, "bytes": 4096}
    recv = {"op": "recv", "id": "bg/x1", "peer": 2, "bytes": 4096}
    j = load_job({"endpoints": [{"intf": f"eth{i}", "ip": f"10.0.0.{i + 1}", "rate_bps": 4e7}
                                for i in range(2)],
                  "ranks": [0, 1, 0, 1], "daemons": [2, 3],
                  "programs": [[compute(2)], [compute(3)], [until(1), send, until(50)],
                               [recv]]})
    p = JobProgram(j.programs, j.instances, j.daemons)
    assert [i.id for i in p.advance(1 * MS)] == ["bg/x1"]
    assert not p.finished()                      # the job's ranks still compute
    p.advance(3 * MS)
    assert p.finished()                          # the daemons' transfer still runs
    strict = JobProgram(j.programs, j.instances)
    strict.advance(1 * MS)
    strict.advance(3 * MS)
    assert not strict.finished()                 # without daemons every rank must end


def test_frozen_ranks_take_no_further_op_and_set_no_timer():
    send = {"op": "send", "id": "bg/x1", "peer": 1, "bytes": 4096}
    recv = {"op": "recv", "id": "bg/x1", "peer": 0, "bytes": 4096}
    j = job([[until(5), send], [recv]])
    p = JobProgram(j.programs, j.instances)
    p.advance(0)
    assert p.next_timer() == 5 * MS
    p.freeze([0, 1])
    assert p.advance(6 * MS) == [] and p.next_timer() is None   # the send never starts
    assert p.rank_records(0)[-1]["op"] == "until"
