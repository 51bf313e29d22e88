"""Two small training jobs and a checkpoint flow on one fabric (``run --workload
jobs:FILE --baseline``): one job engine for all of them, each job's slowdown against
itself alone, the flow's report, the uplinks' owners; and a bad jobs file refused
before anything is built."""

import yaml

from tests.conftest import REPO, assert_contract, emulator, results_of, unless_stolen, \
    verdict_of

LLAMA = f"{REPO}/tests/data/simai/L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt"


def jobs_file(tmp_path, placement="spread", extra=None):
    doc = {"jobs": [{"name": n, "workload": LLAMA, "ranks": 4, "gpus_per_host": 2,
                     "placement": placement, "iterations": 2} for n in ("a", "b")],
           "background": [{"kind": "checkpoint", "name": "ckpt", "job": "a",
                           "storage": ["h8"], "bytes": "1M", "every": "2s",
                           "start": "500ms"}]}
    doc.update(extra or {})
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def worst(doc):
    """The first fidelity document of the shared run that is not faithful (together,
    then each job alone), else the together run's."""
    s = doc["shared"]
    docs = [s["fidelity"]] + [j["alone_fidelity_detail"] for j in s["jobs"]]
    return next((d for d in docs if d["verdict"] != "faithful"), docs[0])


def test_two_jobs_and_a_checkpoint_share_a_fabric_and_each_job_is_held_to_itself_alone(
        tmp_path):
    path = jobs_file(tmp_path)

    def measure(attempt):
        base = tmp_path / f"try{attempt}"
        p = emulator("run", "--workload", f"jobs:{path}", "--baseline", "--size-scale",
                     "2000", "--results", str(base), timeout=400)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        return (p, *results_of(base))
    p, doc, run = unless_stolen(measure, lambda m: worst(m[1]))
    assert_contract("results.json", doc)
    s = doc["shared"]
    assert s["verdict"] == "faithful", verdict_of(worst(doc))
    assert s["wrong"] == 0 and not s["aborted"] and s["baseline"]
    a, b = s["jobs"]
    # spread over the 4 leaves, 2 hosts each, no host shared
    assert a["hosts"] == ["h1", "h3"] and b["hosts"] == ["h2", "h4"]
    for j in (a, b):
        assert len(j["iterations"]) == 2 and len(j["alone_iterations"]) == 2
        assert j["wrong"] == 0 and j["alone_wrong"] == 0
        # together over alone, each rounded to 4 places after the division
        assert abs(j["slowdown"] - j["iteration_s"] / j["alone_s"]) < 2e-4, j
        assert 0.8 < j["slowdown"] < 3, j
        assert j["training"]["ranks"] == 4 and j["training"]["layers"] == 76
    # the checkpoint: a's two hosts write 1 MiB each to h8 every 2 s from 0.5 s
    (ck,) = s["background"]
    assert ck["pairs"] == 2 and ck["transfers"] >= 2 and ck["wrong"] == 0
    assert ck["bytes"] == ck["transfers"] * (1 << 20)
    # the uplinks: the switches' per-flow counts of a link add up to its interface
    # counter (ARP and the like aside), and agree with the flows' traced paths
    assert s["attributable"] and s["shares_from"] == "switch counters" and s["uplinks"]
    for u in s["uplinks"]:
        owned = sum(u["owners"].values())
        assert owned + u["control_bytes"] <= u["bytes"] + 100, u
        assert u["unattributed_bytes"] <= 0.01 * u["bytes"] + 5000, u
        assert u["control_bytes"] < 0.05 * u["bytes"], u
    assert max(s["traced_agreement"].values()) < 0.1, s["traced_agreement"]
    hottest = s["uplinks"][0]
    assert hottest["bytes"] > 1 << 20 and set(hottest["owners"]) <= {"a", "b", "ckpt"}
    # each job's own EndToEnd.csv, and run.yaml keeps the jobs file for a rerun
    assert (run / "shared" / "a" / "EndToEnd.csv").is_file()
    spec = yaml.safe_load((run / "run.yaml").read_text())
    assert spec["workload"]["jobs"]["jobs"][0]["workload"] == LLAMA
    assert spec["workload"]["baseline"] is True
    assert "slowdown" in p.stdout and "hottest uplinks" in p.stdout


def test_a_jobs_file_asking_for_a_host_the_fabric_lacks_is_refused_before_anything_is_built(
        tmp_path):
    path = jobs_file(tmp_path, placement="explicit")
    doc = yaml.safe_load(path.read_text())
    doc["jobs"][0]["hosts"] = ["h1", "h99"]
    doc["jobs"][1]["hosts"] = ["h1", "h2"]
    path.write_text(yaml.safe_dump(doc))
    p = emulator("run", "--workload", f"jobs:{path}", "--results", str(tmp_path / "r"))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "unknown host 'h99'" in p.stderr and "line" in p.stderr
    assert not (tmp_path / "r").exists()
    doc["jobs"][0]["hosts"] = ["h1", "h3"]
    path.write_text(yaml.safe_dump(doc))
    p = emulator("run", "--workload", f"jobs:{path}", "--results", str(tmp_path / "r"))
    assert p.returncode == 2 and "host h1 is job" in p.stderr, p.stderr
    assert not (tmp_path / "r").exists()
