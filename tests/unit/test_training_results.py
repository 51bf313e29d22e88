"""How a training job's result is timed (pure): iterations, compute on the critical
path, exposed communication, the real-equivalent iteration's bandwidth and latency
parts, EndToEnd.csv and layers.csv; every figure worked out by hand."""

import csv
from types import SimpleNamespace as NS

import pytest

from emulator.errors import ConfigError
from emulator.experiments.training import accounts, hops, simai
from emulator.experiments.training import launch as training
from emulator.report.training import training_lines

T = 10 ** 8                     # one unit of the example: 0.1 s
MTU = 4096
RATE = 40e6


def rec(op, start, end, **kw):
    return dict(op=op, start_ns=start * T, end_ns=end * T, **kw)


def coll(cid, start, end, done, blocking=True):
    return rec("coll", start, end, id=cid, ready_ns=None, done_ns=done * T)


# Two ranks on two NICs.  Before the job: three calibration AllReduces (one frame per
# chunk over the two NICs: 2 steps each) and a barrier, over at 10.  Then two iterations
# of 50 from b = 10 + 50k.  Row 0 (layer0): compute 10, a blocking TP AllReduce of 20,
# wg compute, a non-blocking DP AllReduce waited for at the end.  Row 1 (layer1) has
# compute only (forward, 5), between row 0's forward collective and its wg compute.
WORKLOAD = simai.parse_text("HYBRID_TRANSFORMER model_parallel_NPU_group: 2\n2\n"
                            "layer0 -1 1 ALLREDUCE 1000000000 1 NONE 0 1 ALLREDUCE 1000000000 0\n"
                            "layer1 -1 1 NONE 0 1 NONE 0 1 NONE 0 0\n", "w.txt")
HOP = (0.002, 0.003, 0.005)     # the calibration's per-step latencies: median 3 ms


def rank_ops(wg):
    ops = [coll(f"cal.hop{k}", 3 * k, 3 * k + 3, 3 * k + 3) for k in range(3)]
    ops.append(coll("cal.barrier", 9, 10, 10))
    for k in range(2):
        b = 10 + 50 * k
        ops += [rec("compute", b, b + 10, label=f"it{k}.L0.fwd"),
                coll(f"it{k}.L0.fwd.TP0", b + 10, b + 30, b + 30),
                rec("compute", b + 30, b + 35, label=f"it{k}.L1.fwd"),
                rec("compute", b + 35, b + 35 + wg, label=f"it{k}.L0.wg"),
                coll(f"it{k}.L0.wg.DP0", b + 35 + wg, b + 35 + wg, b + 50, blocking=False),
                rec("wait", b + 35 + wg, b + 50, ids=[f"it{k}.L0.wg.DP0"])]
    return ops


def instance(cid, start, end, network=True, members=(0, 1), nbytes=1000, **kw):
    return dict(id=cid, kind="allreduce", group=cid.split(".")[-1][:2], members=list(members),
                endpoints=["h1", "h2"] if network else ["h1"], network=network,
                bytes=nbytes, start_ns=start * T, end_ns=end * T,
                time_s=(end - start) * T / 1e9, **kw)


WIRE = 2 * (2 - 1) / 2 * 2 * MTU * 8 / RATE          # a calibration ring edge at 40 Mbit/s
RESULT = {
    "job": {"t0_ns": 123456789, "wrong": 0, "aborted": None, "failed_qps": []},
    "ranks": [{"rank": 0, "end_ns": 110 * T, "ops": rank_ops(5)},
              {"rank": 1, "end_ns": 110 * T, "ops": rank_ops(10)}],
    "collectives": [
        *[instance(f"cal.hop{k}", 3 * k, 3 * k + 3, nbytes=2 * MTU,
                   network_s=WIRE + 2 * h) for k, h in enumerate(HOP)],
        instance("cal.barrier", 9, 10, network=False, network_s=None),
        *[instance(f"it{k}.L0.fwd.TP0", 10 + 50 * k + 10, 10 + 50 * k + 30,
                   busbw_Mbps=30.0 + k) for k in (0, 1)],
        *[instance(f"it{k}.L0.wg.DP0", 10 + 50 * k + 45, 10 + 50 * k + 50,
                   busbw_Mbps=20.0) for k in (0, 1)]],
    "endpoints": [], "engine": {"cpu_share": 0.1, "socket_drops": 0}}


def job():
    summary = {k: {"collectives": 0} for k in ("TP", "DP", "EP", "DP_EP", "PP")}
    summary["TP"] = {"collectives": 2, "bytes": 4000, "scaled_bytes": 2000, "fabric": 2,
                     "local": 0}
    summary["DP"] = {"collectives": 2, "bytes": 4000, "scaled_bytes": 2000, "fabric": 2,
                     "local": 0}
    nic = NS(rate_bps=RATE)
    return NS(workload=WORKLOAD, placement=(NS(nic=nic), NS(nic=nic)),
              options=NS(iterations=2, real_hop_s=14e-6), scale=2.0, stretch=5.0,
              rate_ratio=10.0, latency_bound=(), summary=summary)


EST = {"iteration_s": 10.0, "compute_s": 5.0, "exposed_s": 4.0}


def test_iterations_start_after_the_calibration_and_end_with_their_last_rank():
    assert training.iterations_of(RESULT, 2) == [(10 * T, 60 * T, 0), (60 * T, 110 * T, 0)]


def test_compute_is_counted_within_the_window_only():
    r1 = RESULT["ranks"][1]
    assert training.compute_between(r1, 10 * T, 60 * T) == (10 + 5 + 10) * T
    assert training.compute_between(r1, 45 * T, 95 * T) == (10 + 10 + 5) * T


def test_the_hop_latency_is_the_calibrations_median_step_without_its_wire_time():
    h, samples = hops.hop_latency(RESULT, RATE)
    assert samples == pytest.approx(list(HOP)) and h == pytest.approx(0.003)
    assert hops.steps("allreduce", 8) == 14 and hops.steps("allgather", 8) == 7
    assert hops.steps("broadcast", 4) == 3 and hops.steps("alltoall", 4) == 1
    assert hops.steps("p2p", 2) == 1 and hops.steps("allreduce", 1) == 0


def test_real_iteration_is_a_bandwidth_part_and_a_latency_part_worked_by_hand():
    d = training.document(job(), RESULT, EST)
    assert d["iterations"] == [5.0, 5.0]
    assert d["compute_s"] == pytest.approx(2.0)        # rank 0 ended each iteration last
    assert d["exposed_comm_s"] == pytest.approx(3.0)
    # by hand: per iteration rank 0 waits through the blocking TP AllReduce over 2 NICs
    # (2 steps) and the wait for the DP AllReduce over 2 NICs (2 steps); its non-blocking
    # issue held it for no time: N = 4
    assert d["ring_steps"] == 4 and [it["ring_steps"] for it in d["per_iteration"]] == [4, 4]
    bandwidth = (5.0 - 0.003 * 4) / 5.0                 # (emulated - h_emu x N) / (r/s)
    latency = 14e-6 * 4                                 # h_real x N
    assert d["real_bandwidth_s"] == pytest.approx(bandwidth)
    assert d["real_latency_s"] == pytest.approx(latency)
    assert d["real_iteration_s"] == pytest.approx(bandwidth + latency)
    assert d["real_iteration_s"] != pytest.approx(5.0 / 5.0)    # not emulated / (r/s)
    assert d["real_compute_s"] == pytest.approx(2.0 / 5.0)
    assert d["real_exposed_comm_s"] == pytest.approx(bandwidth + latency - 0.4)
    assert d["hop"] == {"emulated_s": pytest.approx(0.003), "samples_s": pytest.approx(HOP),
                        "real_s": 14e-6}
    assert d["groups"]["TP"] == {"collectives": 2, "real_bytes": 4000, "bytes": 2000,
                                 "fabric": 2, "local": 0, "busbw_Mbps": 30.5}
    lines = training_lines(d)
    assert any(line.startswith("  it1") for line in lines)
    assert any("bandwidth" in line and "latency" in line for line in lines)


def test_without_a_calibration_the_real_iteration_has_no_latency_part():
    result = dict(RESULT, collectives=[c for c in RESULT["collectives"]
                                       if not c["id"].startswith("cal.hop")])
    d = training.document(job(), result, EST)
    assert d["hop"]["emulated_s"] is None and d["real_latency_s"] == 0
    assert d["real_iteration_s"] == pytest.approx(5.0 / 5.0)


def read_csv(path):
    return list(csv.reader(open(path)))


def test_end_to_end_is_simais_format_and_adds_every_phases_compute_to_its_own_row(tmp_path):
    acc = training.reports(job(), RESULT, str(tmp_path))
    rows = read_csv(tmp_path / "EndToEnd.csv")
    assert rows[0] == ["layer_name", "fabric-lab", "fwd compute", "wg compute", "ig compute",
                       "fwd exposed comm", "wg exposed comm", "ig exposed comm",
                       "fwd total comm", "algbw", "busbw", "wg total comm", "algbw", "busbw",
                       "ig total comm", "algbw", "busbw", "workload finished at"]
    assert [r[0] for r in rows[1:]] == ["layer0", "layer1", "SUM", "total exposed comm"]
    assert acc.rank == 0 and acc.other_ns == 0
    us = T / (1e3 * 5.0)                          # one unit, in real-equivalent us
    layer0 = [float(x) for x in rows[1][2:18]]
    layer1 = [float(x) for x in rows[2][2:18]]
    # rank 0 over both iterations: row 0 fwd compute 10 + 10, wg compute 5 + 5, fwd
    # exposed 20 + 20, wg exposed (the waits) 10 + 10, fwd total 20 + 20, wg total (issue to
    # end) 10 + 10; row 1's forward compute, 5 + 5, stays on row 1
    assert layer0[:6] == pytest.approx([20 * us, 10 * us, 0, 40 * us, 20 * us, 0])
    assert layer0[6] == pytest.approx(40 * us) and layer0[9] == pytest.approx(20 * us)
    assert layer1[:9] == pytest.approx([10 * us, 0, 0, 0, 0, 0, 0, 0, 0])
    assert layer0[15] == layer1[15] == pytest.approx(100 * us)     # finished at
    # SimAI's bandwidths: the file's bytes over the total comm, GB = 2^30 (busbw factor 1)
    assert layer0[7] == pytest.approx(2e9 / (40 * T / 1e9 / 5.0) / 2 ** 30, rel=1e-6)
    assert layer0[8] == pytest.approx(layer0[7])
    sum_row = rows[3]
    assert sum_row[9:11] == sum_row[12:14] == sum_row[15:17] == ["NONE", "NONE"]
    compute = sum(float(x) for x in sum_row[2:5])
    exposed = sum(float(x) for x in sum_row[5:8])
    assert compute == pytest.approx(30 * us + 10 * us)
    assert rows[4] == ["total exposed comm", f"{60 * us:.6f}", "total comp",
                       f"{40 * us:.6f}", "total time", f"{100 * us:.6f}"]
    # the columns add up to the run: compute + exposed = the time from the calibration's
    # end to the job's end, and to the document's iterations
    assert compute + exposed == pytest.approx(100 * us)
    d = training.document(job(), RESULT, EST)
    assert compute == pytest.approx(sum(i["compute_s"] for i in d["per_iteration"]) / 5 * 1e6)
    assert exposed == pytest.approx(
        sum(i["exposed_comm_s"] for i in d["per_iteration"]) / 5 * 1e6)


def test_layers_csv_has_per_iteration_medians_and_byte_weighted_bandwidths(tmp_path):
    training.reports(job(), RESULT, str(tmp_path))
    rows = read_csv(tmp_path / "layers.csv")
    head = rows[0]
    assert head[:7] == ["layer_name", "fwd compute", "wg compute", "ig compute",
                        "fwd exposed comm", "wg exposed comm", "ig exposed comm"]
    assert [r[0] for r in rows[1:]] == ["layer0", "layer1", "SUM"]
    us = T / (1e3 * 5.0)
    layer0 = dict(zip(head[1:], map(float, rows[1][1:])))
    assert layer0["fwd compute"] == pytest.approx(10 * us)       # per iteration
    assert layer0["wg exposed comm"] == pytest.approx(10 * us)
    assert layer0["fwd bytes"] == layer0["wg bytes"] == 1e9
    # the collectives' own time: TP 20 each, DP 5 each (from the last arrival)
    assert layer0["fwd algbw"] == pytest.approx(2e9 / (40 * T / 1e9 / 5.0) / 2 ** 30, rel=1e-6)
    assert layer0["wg algbw"] == pytest.approx(2e9 / (10 * T / 1e9 / 5.0) / 2 ** 30, rel=1e-6)
    total = dict(zip(head[1:], map(float, rows[3][1:])))
    assert total["fwd compute"] == pytest.approx(15 * us)        # 10 + 5, per iteration
    # SUM's bandwidth: every row's bytes over every row's time, not a mean over rows
    assert total["fwd algbw"] == pytest.approx(layer0["fwd algbw"])


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

def test_ring_steps_count_only_network_ops_that_held_the_rank():
    rank = {"ops": [
        rec("recv", 0, 0, id="it0.mb0.act.0>4"),           # arrived before: no wait
        rec("recv", 0, 1, id="it0.mb1.act.0>4"),           # waited: one hop
        coll("it0.L1.fwd.TP0", 1, 2, 2),                   # over 4 NICs: 2(4-1)
        coll("it0.L2.fwd.TP0", 2, 3, 3),                   # NVLink only: no hop
        coll("it0.L2.wg.DP0", 3, 3, 5, blocking=False),    # overlapped: no hop
        rec("compute", 3, 6, label="it0.L2.ig"),
        rec("send", 6, 7, id="it0.mb1.grad.4>0"),          # held until delivered: one hop
        coll("it1.L1.fwd.TP0", 7, 8, 8)]}                  # the next iteration
    eps4 = ["h1", "h2", "h3", "h4"]
    result = {"collectives": [
        dict(id="it0.mb0.act.0>4", kind="p2p", endpoints=["h1", "h5"], network=True),
        dict(id="it0.mb1.act.0>4", kind="p2p", endpoints=["h1", "h5"], network=True),
        dict(id="it0.L1.fwd.TP0", kind="allreduce", endpoints=eps4, network=True),
        dict(id="it0.L2.fwd.TP0", kind="allreduce", endpoints=["h5"], network=False),
        dict(id="it0.L2.wg.DP0", kind="allgather", endpoints=eps4, network=True),
        dict(id="it0.mb1.grad.4>0", kind="p2p", endpoints=["h5", "h1"], network=True),
        dict(id="it1.L1.fwd.TP0", kind="allreduce", endpoints=eps4, network=True)]}
    assert hops.ring_steps(result, rank, 0) == 1 + 6 + 1
    assert hops.ring_steps(result, rank, 1) == 6


def test_pipeline_transfers_go_to_a_pipeline_row_and_an_early_receive_costs_nothing():
    w = simai.parse_text("HYBRID_TRANSFORMER pp: 2 pp_comm: 1000000\n1\n"
                         "l0 -1 1 NONE 0 1 NONE 0 1 NONE 0 0\n", "w.txt")
    ops = [rec("recv", 0, 0, id="it0.mb0.act.0>1", done_ns=-5 * T),   # arrived earlier
           rec("compute", 0, 10, label="it0.L0.fwd"),
           rec("recv", 10, 12, id="it0.mb0.grad.0>1", done_ns=12 * T),
           rec("send", 12, 15, id="it0.mb0.grad.1>0", done_ns=15 * T)]
    result = {"ranks": [{"rank": 1, "end_ns": 15 * T, "ops": ops}], "collectives": [
        dict(id=i, kind="p2p", group="PP", members=[0, 1], endpoints=["h1", "h2"],
             network=True, bytes=500, end_ns=e * T, time_s=d * T / 1e9)
        for i, e, d in (("it0.mb0.act.0>1", -5, 1), ("it0.mb0.grad.0>1", 12, 2),
                        ("it0.mb0.grad.1>0", 15, 3))]}
    j = NS(workload=w, options=NS(iterations=1))
    acc = accounts.account(j, result)
    tot = accounts.totals(acc)
    fwd, ig = tot[(accounts.PIPELINE, "fwd")], tot[(accounts.PIPELINE, "ig")]
    assert (fwd.exposed, fwd.total, fwd.bytes) == (0, 0, 1000000)
    assert (ig.exposed, ig.total, ig.bytes) == (5 * T, 5 * T, 2000000)
    assert tot[(0, "fwd")].compute == 10 * T and acc.other_ns == 0
    assert acc.rows(["l0"]) == [0, accounts.PIPELINE]
