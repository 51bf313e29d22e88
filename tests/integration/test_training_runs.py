"""A SimAI workload file run end to end on the default fabric (``run --workload
simai:FILE``): every rank in one job process, the training results, EndToEnd.csv."""

import csv
import json

from emulator.experiments.training import simai
from tests.conftest import (REPO, assert_contract, drill_unless_stolen, emulator, results_of,
                            unless_stolen, verdict_of)

# no pass of its own under FABRIC_LAB_LAYOUT: its subject is the job engine and its
# report; the hosts it runs on are never in a datapath instance
LAYOUT_INDEPENDENT = True

MICRO = f"{REPO}/tests/data/simai/microAllReduce.txt"
PP2 = f"{REPO}/tests/data/simai/aicb_gpt7b_l4_tp2_pp2_ga4_aiob.txt"


def test_a_simai_micro_workload_runs_and_reports_the_iteration(tmp_path):
    def measure(attempt):
        base = tmp_path / f"try{attempt}"
        p = emulator("run", "--workload", f"simai:{MICRO}", "--gpus-per-host", "1",
                     "--size-scale", "40", "--iterations", "2", "--results", str(base),
                     timeout=400)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        return (p, *results_of(base))
    p, doc, run = unless_stolen(measure, lambda m: m[1]["training"]["fidelity"])
    t = doc["training"]
    assert t["fidelity"]["verdict"] == "faithful", verdict_of(t["fidelity"])
    assert t["ranks"] == 8 and t["layers"] == 2 and t["unknown_rows"] == 0
    assert t["wrong"] == 0 and not t["aborted"]
    assert len(t["iterations"]) == 2 and all(x > 0 for x in t["iterations"])
    assert t["exposed_comm_s"] > 0 and t["compute_s"] > 0
    assert t["size_scale"] == 40 and t["compute_scale"] == doc["training"]["rate_ratio"] / 40
    # the real-equivalent iteration, worked by hand from the file's ops: each iteration
    # the last rank waits through 2 blocking AllReduces over 8 NICs, 2 x 2(8-1) = 28 ring
    # steps; the emulated hops (the calibration's, milliseconds) come off the emulated
    # time before dividing by r/s, and 28 real hops (14 us, NCCL's figure) go on
    assert t["ring_steps"] == 28 and all(i["ring_steps"] == 28 for i in t["per_iteration"])
    hop = t["hop"]["emulated_s"]
    assert 1e-4 < hop < 20e-3 and t["hop"]["real_s"] == 14e-6
    bandwidth = (t["iteration_s"] - hop * 28) / t["compute_scale"]
    assert abs(t["real_bandwidth_s"] - bandwidth) < 1e-3 * bandwidth
    assert abs(t["real_latency_s"] - 28 * 14e-6) < 1e-12
    assert abs(t["real_iteration_s"] - bandwidth - 28 * 14e-6) < 1e-3 * bandwidth
    assert t["groups"]["TP"]["collectives"] == 2 * 2 and t["groups"]["TP"]["busbw_Mbps"] > 0
    rows = list(csv.reader(open(run / "EndToEnd.csv")))
    assert rows[0][:5] == ["layer_name", "fabric-lab", "fwd compute", "wg compute",
                           "ig compute"]
    assert [r[0] for r in rows[1:]] == ["embedding_layer", "embedding_layer", "SUM",
                                        "total exposed comm"]
    assert float(rows[-2][5]) > 0                  # the forward's exposed communication
    assert "iteration" in p.stdout and "exposed communication" in p.stdout


def test_an_aicb_pp2_job_runs_its_layout_and_end_to_end_csv_adds_up(tmp_path):
    """AICB's pp = 2, ga = 4 file (tests/data/simai/README.md): prefix, four micro-batches
    1F1B over two stages on different hosts, suffix; EndToEnd.csv holds every row's
    compute, and its columns add up to the iterations' compute and exposed time."""
    def measure(attempt):
        base = tmp_path / f"try{attempt}"
        p = emulator("run", "--workload", f"simai:{PP2}", "--gpus-per-host", "1",
                     "--size-scale", "1000", "--iterations", "2", "--results", str(base),
                     timeout=400)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        return (p, *results_of(base))
    p, doc, run = unless_stolen(measure, lambda m: m[1]["training"]["fidelity"])
    t = doc["training"]
    assert t["fidelity"]["verdict"] == "faithful", verdict_of(t["fidelity"])
    assert t["wrong"] == 0 and not t["aborted"] and t["parallel"]["pp"] == 2
    assert (t["layout"]["prefix"], t["layout"]["micro_batches"], t["layout"]["block"],
            t["layout"]["suffix"]) == (7, 4, 5, 7)
    # every stage sends activations and gradients once per micro-batch and iteration:
    # 4 rank pairs x 4 micro-batches x 2 directions x 2 iterations, over the network
    assert t["groups"]["PP"]["collectives"] == 64 and t["groups"]["PP"]["busbw_Mbps"] > 0
    w = simai.parse(PP2)
    rows = list(csv.reader(open(run / "EndToEnd.csv")))
    names = [r[0] for r in rows[1:]]
    assert names == [x.name for x in w.layers] + ["pipeline", "SUM", "total exposed comm"]
    assert all(float(x) >= 0 for r in rows[1:-1] for x in r[2:] if x != "NONE")
    sum_row, totals = rows[-2], rows[-1]
    compute = sum(float(x) for x in sum_row[2:5])
    exposed = sum(float(x) for x in sum_row[5:8])
    stretch = t["compute_scale"]
    # every row's compute, once per iteration, as the file says (ns -> us), times r/s / r/s
    by_hand = 2 * sum(x.fwd_ns + x.ig_ns + x.wg_ns for x in w.layers) / 1e3
    assert abs(compute - by_hand) <= 1e-3 * by_hand
    # the columns add up to the iterations' compute and exposed communication (the
    # document's, per iteration on the rank that ended it last) within 2 %
    doc_compute = sum(i["compute_s"] for i in t["per_iteration"]) / stretch * 1e6
    doc_exposed = sum(i["exposed_comm_s"] for i in t["per_iteration"]) / stretch * 1e6
    assert abs(compute - doc_compute) <= 0.02 * doc_compute
    assert abs(exposed - doc_exposed) <= 0.02 * doc_exposed
    assert abs(float(totals[3]) - compute) < 1e-3 and totals[0] == "total exposed comm"
    assert abs(float(totals[5]) - sum(t["iterations"]) / stretch * 1e6) <= 1e-3 * float(
        totals[5])
    layers = list(csv.reader(open(run / "layers.csv")))
    assert [r[0] for r in layers[1:]] == names[:-2] + ["SUM"]
    assert t["real_latency_s"] > 0 and t["real_bandwidth_s"] > 0
    assert "layout: prefix 7 rows, 4 micro-batches of 5 rows, suffix 7 rows" in p.stdout


def test_a_workload_with_more_ranks_than_the_fabric_is_refused_before_anything_is_built(
        tmp_path):
    p = emulator("run", "--workload", f"simai:{MICRO}", "--gpus-per-host", "1",
                 "-P", "leaves=2", "-P", "hosts_per_leaf=2", "--results", str(tmp_path))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "all_gpus" in p.stderr or "8" in p.stderr
    assert not any(tmp_path.iterdir())


def test_a_drill_under_a_training_job_finds_the_disturbed_iteration(tmp_path):
    p, doc = drill_unless_stolen(tmp_path, "--workload", f"simai:{MICRO}", "--gpus-per-host",
                                 "1", "--size-scale", "40", "--fault", "leaf1-spine1",
                                 "--failover", "fast-failover", "--repeat", "1")
    assert_contract("drill.json", doc)
    (mode,) = doc["modes"]
    (rep,) = mode["repeats"]
    assert rep["fidelity"] == "faithful", verdict_of(rep["fidelity_detail"])
    assert len(rep["iterations"]) == 3 and rep["disturbed"] is not None
    assert rep["slowdown"] > 0.8 and not rep["job_died"] and rep["wrong"] == 0
    assert rep["events"][0]["kind"] == "link_down" and rep["events"][0]["target"] == "leaf1-spine1"
    assert "slowdown med" in p.stdout


def test_compare_runs_the_job_under_each_mode(tmp_path):
    def measure(attempt):
        base = tmp_path / f"try{attempt}"
        p = emulator("compare", "--modes", "ecmp,spray", "--workload", f"simai:{MICRO}",
                     "--gpus-per-host", "1", "--size-scale", "40", "--reps", "1",
                     "--results", str(base), timeout=400)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        (d,) = [x for x in base.iterdir() if x.is_dir()]
        return p, json.loads((d / "compare.json").read_text())
    p, doc = unless_stolen(measure, lambda m: next(
        (r["fidelity"] for r in m[1]["runs"] if r["fidelity"]["verdict"] != "faithful"),
        m[1]["runs"][0]["fidelity"]))
    assert_contract("compare.json", doc)
    assert [r["mode"] for r in doc["rows"]] == ["ecmp", "spray"]
    for r in doc["runs"]:
        assert r["fidelity"]["verdict"] == "faithful", verdict_of(r["fidelity"])
        assert r["wrong"] == 0 and r["iteration_s"] > 0 and r["busbw_Mbps"]["TP"] > 0
