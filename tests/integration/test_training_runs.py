"""A SimAI workload file run end to end on the default fabric (``run --workload
simai:FILE``): every rank in one job process, the training results, EndToEnd.csv."""

import csv
import json

from tests.conftest import REPO, assert_contract, emulator, results_of, unless_stolen, verdict_of

MICRO = f"{REPO}/tests/data/simai/microAllReduce.txt"


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
    # both scales: the real-equivalent iteration is the emulated one over r/s
    assert abs(t["real_iteration_s"] * t["compute_scale"] - t["iteration_s"]) < 1e-3
    assert t["groups"]["TP"]["collectives"] == 2 * 2 and t["groups"]["TP"]["busbw_Mbps"] > 0
    rows = list(csv.reader(open(run / "EndToEnd.csv")))
    assert rows[0][:5] == ["layer_name", "run", "fwd compute", "wg compute", "ig compute"]
    assert [r[0] for r in rows[1:]] == ["embedding_layer", "embedding_layer", "SUM"]
    assert float(rows[-1][5]) > 0                  # the forward's exposed communication
    assert "iteration" in p.stdout and "exposed communication" in p.stdout


def test_a_workload_with_more_ranks_than_the_fabric_is_refused_before_anything_is_built(
        tmp_path):
    p = emulator("run", "--workload", f"simai:{MICRO}", "--gpus-per-host", "1",
                 "-P", "leaves=2", "-P", "hosts_per_leaf=2", "--results", str(tmp_path))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "all_gpus" in p.stderr or "8" in p.stderr
    assert not any(tmp_path.iterdir())


def test_a_drill_under_a_training_job_finds_the_disturbed_iteration(tmp_path):
    def measure(attempt):
        base = tmp_path / f"try{attempt}"
        p = emulator("drill", "--workload", f"simai:{MICRO}", "--gpus-per-host", "1",
                     "--size-scale", "40", "--fault", "leaf1-spine1", "--failover",
                     "fast-failover", "--repeat", "1", "--results", str(base), timeout=400)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        (d,) = [x for x in base.iterdir() if x.name.startswith("drill-")]
        return p, json.loads((d / "drill.json").read_text())
    p, doc = unless_stolen(measure,
                           lambda m: m[1]["modes"][0]["repeats"][0]["fidelity_detail"])
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
