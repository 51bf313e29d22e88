"""How a training job's result is timed (pure): iterations, compute on the critical
path, exposed communication, both scales, EndToEnd.csv."""

import csv
from types import SimpleNamespace as NS

import pytest

from emulator.errors import ConfigError
from emulator.experiments.training import launch as training
from emulator.report.training import training_lines

T = 10 ** 8                     # one unit of the example: 0.1 s


def rec(op, start, end, **kw):
    return dict(op=op, start_ns=start * T, end_ns=end * T, **kw)


# two ranks, two iterations: compute 10, a blocking collective, a non-blocking one
# waited for at the end of the iteration; rank 1 computes longer in iteration 1
RESULT = {
    "job": {"t0_ns": 123456789, "wrong": 0, "aborted": None, "failed_qps": []},
    "ranks": [
        {"rank": 0, "end_ns": 100 * T, "ops": [
            rec("compute", 0, 10), rec("coll", 10, 30, id="it0.L0.fwd.TP0"),
            rec("compute", 30, 40), rec("coll", 40, 40, id="it0.L0.wg.DP0"),
            rec("wait", 40, 50, ids=["it0.L0.wg.DP0"]),
            rec("compute", 50, 60), rec("coll", 60, 80, id="it1.L0.fwd.TP0"),
            rec("compute", 80, 90), rec("coll", 90, 90, id="it1.L0.wg.DP0"),
            rec("wait", 90, 100, ids=["it1.L0.wg.DP0"])]},
        {"rank": 1, "end_ns": 100 * T, "ops": [
            rec("compute", 0, 10), rec("coll", 10, 30, id="it0.L0.fwd.TP0"),
            rec("compute", 30, 45), rec("coll", 45, 45, id="it0.L0.wg.DP0"),
            rec("wait", 45, 50, ids=["it0.L0.wg.DP0"]),
            rec("compute", 50, 60), rec("coll", 60, 80, id="it1.L0.fwd.TP0"),
            rec("compute", 80, 95), rec("coll", 95, 95, id="it1.L0.wg.DP0"),
            rec("wait", 95, 100, ids=["it1.L0.wg.DP0"])]}],
    "collectives": [
        {"id": f"it{i}.L0.{ph}.{g}0", "group": g, "bytes": 1000, "time_s": 2.0,
         "busbw_Mbps": 30.0 + i} for i in (0, 1) for ph, g in (("fwd", "TP"), ("wg", "DP"))],
    "endpoints": [], "engine": {"cpu_share": 0.1, "socket_drops": 0}}


def job():
    layer = NS(name="layer0")
    wl = NS(path="w.txt", policy="HYBRID_TRANSFORMER", parallel={"tp": 2}, layers=(layer,),
            unknown=(), unknown_rows=())
    summary = {k: {"collectives": 0} for k in ("TP", "DP", "EP", "DP_EP", "PP")}
    summary["TP"] = {"collectives": 2, "bytes": 4000, "scaled_bytes": 2000, "fabric": 2,
                     "local": 0}
    summary["DP"] = {"collectives": 2, "bytes": 4000, "scaled_bytes": 2000, "fabric": 2,
                     "local": 0}
    return NS(workload=wl, placement=(0, 1), options=NS(iterations=2), scale=2.0,
              stretch=5.0, rate_ratio=10.0, latency_bound=(), summary=summary)


EST = {"iteration_s": 10.0, "compute_s": 5.0, "exposed_s": 4.0}


def test_iterations_end_with_their_last_rank_and_count_from_the_jobs_start():
    assert training.iterations_of(RESULT, 2) == [(0, 50 * T, 0), (50 * T, 100 * T, 0)]


def test_compute_is_counted_within_the_window_only():
    r1 = RESULT["ranks"][1]
    assert training.compute_between(r1, 0, 50 * T) == (10 + 15) * T
    assert training.compute_between(r1, 35 * T, 85 * T) == (10 + 10 + 5) * T


def test_the_document_has_both_scales_and_the_exposed_communication():
    d = training.document(job(), RESULT, EST)
    assert d["iterations"] == [5.0, 5.0]
    assert d["compute_s"] == pytest.approx(2.0)        # rank 0 ended each iteration last
    assert d["exposed_comm_s"] == pytest.approx(3.0)
    assert d["real_iteration_s"] == pytest.approx(1.0)  # / r/s = 5
    assert d["groups"]["TP"] == {"collectives": 2, "real_bytes": 4000, "bytes": 2000,
                                 "fabric": 2, "local": 0, "busbw_Mbps": 30.5}
    lines = training_lines(d)
    assert any(line.startswith("  it1") for line in lines)


def test_end_to_end_has_simais_columns_a_row_per_layer_and_a_sum(tmp_path):
    path = tmp_path / "EndToEnd.csv"
    training.end_to_end(job(), RESULT, str(path))
    rows = list(csv.reader(open(path)))
    assert rows[0][2:8] == ["fwd compute", "wg compute", "ig compute", "fwd exposed comm",
                            "wg exposed comm", "ig exposed comm"]
    assert [r[0] for r in rows[1:]] == ["layer0", "SUM"]
    us = 1e3 * 5.0                                  # ns emulated -> us real-equivalent
    # rank 0 (the last to end): fwd compute 10 + 10, exposed fwd 20 + 20, wg waits 10 + 10
    assert float(rows[1][2]) == pytest.approx(20 * T / us)
    assert float(rows[1][5]) == pytest.approx(40 * T / us)
    assert float(rows[1][6]) == pytest.approx(20 * T / us)


def test_a_workload_spec_names_an_existing_file(tmp_path):
    assert training.workload_path("mix") is None
    with pytest.raises(ConfigError):
        training.workload_path("simai:")
    with pytest.raises(ConfigError, match="no such file"):
        training.workload_path(f"simai:{tmp_path}/missing.txt")


def test_the_drill_judges_the_iteration_that_held_the_fault():
    from emulator.experiments.drill.stats import training_verdict as judge
    t = training.document(job(), RESULT, EST)
    t["per_iteration"][1]["time_s"] = 7.5                 # the disturbed one was slower
    t0 = RESULT["job"]["t0_ns"]
    v = judge(t, t0 + 70 * T)
    assert v["disturbed"] == 1 and v["slowdown"] == 1.5 and v["undisturbed_s"] == 5.0
    assert not v["job_died"] and v["wrong"] == 0
    assert judge(t, t0 + 200 * T)["disturbed"] is None   # after the job: nothing disturbed


def test_the_ring_option_orders_the_hosts_a_job_is_placed_on():
    from emulator.experiments.compare.training import ordered_topo
    from emulator.fabric import addressing, presets
    topo = addressing.plan(presets.build("leaf-spine", {"leaves": "2", "hosts_per_leaf": "2"}))
    names = lambda t: [h["name"] for h in t["hosts"]]          # noqa: E731
    assert names(ordered_topo(topo, "naive")) == ["h1", "h2", "h3", "h4"]
    assert names(ordered_topo(topo, "topology")) == ["h1", "h2", "h3", "h4"]
    assert names(ordered_topo(topo, "strided")) == ["h1", "h3", "h2", "h4"]
    with pytest.raises(ConfigError):
        ordered_topo(topo, "random")


def test_a_training_jobs_nics_run_dcqcn_unless_told_otherwise():
    from emulator.experiments.spec.build import implied_cc
    assert implied_cc("simai:x.txt", "rc", None) == "dcqcn"
    assert implied_cc("adversarial", "rc", None) == "dcqcn"
    assert implied_cc("allreduce", "rc", None) == "none"
    for cc, transport in (("none", "rc"), ("timely", "rc"), (None, "none")):
        assert implied_cc("simai:x.txt", transport, cc) == (cc or "none")