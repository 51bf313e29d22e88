"""Two small training jobs and a checkpoint flow on one fabric (``run --workload
jobs:FILE --baseline``): one job engine for all of them, each job's slowdown against
itself alone, the flow's report, the uplinks' owners; a cut during two jobs
(``drill jobs``) charged to the job whose ring crosses it; and a bad jobs file refused
before anything is built."""

import yaml

from tests.conftest import (REPO, assert_contract, drill_unless_stolen, emulator, results_of,
                            unless_stolen, verdict_of)

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): its runs name their
# layout (shared, what 2 cores choose); the datapath instances are tested elsewhere
LAYOUT_INDEPENDENT = True
LAYOUT = ("--layout", "shared")

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
        p = emulator("run", *LAYOUT, "--workload", f"jobs:{path}", "--baseline",
                     "--size-scale", "2000", "--results", str(base), timeout=400)
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
    # each job's most crowded link and what fair sharing of it predicts: shared fairly,
    # the job's bytes there are through after min(link's bytes, owners x its own);
    # k is that over the job's busiest link's own bytes (at least its own here), and
    # the prediction lies between no slowdown (no exposed communication) and k (all
    # of the iteration communication)
    top = {u["link"]: u for u in s["uplinks"]}
    for j in (a, b):
        k = j["crowding"]
        assert k is not None and k >= 1, j
        assert sorted(x.rstrip("0123456789") for x in j["crowded_link"].split("->")) == [
            "leaf", "spine"], j
        if j["crowded_link"] in top:
            owners = top[j["crowded_link"]]["owners"]
            own, n = owners[j["name"]], sum(1 for v in owners.values() if v)
            through = min(sum(owners.values()), n * own)
            assert k <= round(through / own, 4) + 1e-4, (j, owners)
        assert 1 <= j["fair_share_slowdown"] <= k + 1e-4, j


def test_a_cut_during_two_jobs_is_charged_to_the_job_whose_ring_crosses_it(tmp_path):
    # one spine: every byte between leaves crosses it, so a (h1 on leaf1, h3 on leaf2)
    # crosses the cut of leaf1-spine1 and b (h5, h6, both on leaf3) never leaves its
    # leaf.  The cut holds longer than an iteration, so a's ring sends into it whatever
    # phase its iteration is in, and comes back before a QP runs out of retries.
    path = jobs_file(tmp_path, placement="explicit", extra={"background": []})
    doc = yaml.safe_load(path.read_text())
    doc["jobs"][0]["hosts"], doc["jobs"][1]["hosts"] = ["h1", "h3"], ["h5", "h6"]
    for j in doc["jobs"]:
        j["iterations"] = 3
    path.write_text(yaml.safe_dump(doc))

    p, doc = drill_unless_stolen(tmp_path, "jobs", *LAYOUT, "--workload", f"jobs:{path}",
                                 "-P", "spines=1", "--size-scale", "2000", "--fault",
                                 "leaf1-spine1", "--hold", "3", "--failover",
                                 "fast-failover", "--repeat", "1")
    assert_contract("drill.json", doc)
    (mode,) = doc["modes"]
    (rep,) = mode["repeats"]
    assert rep["fidelity"] == "faithful", verdict_of(rep["fidelity_detail"])
    down, up = rep["events"]
    assert (down["kind"], down["target"], up["kind"]) == ("link_down", "leaf1-spine1",
                                                          "link_up")
    assert rep["shared_links"] == []          # b is on no inter-switch link
    a, b = rep["jobs"]["a"], rep["jobs"]["b"]
    for j in (a, b):
        assert len(j["iterations"]) == 3 and j["disturbed"] is not None, j
        assert not j["job_died"] and j["wrong"] == 0, j
    # a lost frames in the cut, resent them after timeouts, and its iteration that held
    # the cut waited for the link; b lost nothing (the cut link is the only one that
    # dropped a frame), timed out on nothing and kept its pace
    assert a["retransmitted"] > 0 and a["timeouts"] > 0 and a["retransmitted_bytes"] > 0, a
    assert a["slowdown"] > 1.3, a
    assert list(rep["fidelity_detail"]["network_drops"]["by_link"]) == [
        "leaf1->spine1, spine1->leaf1"], rep["fidelity_detail"]["network_drops"]
    assert b["timeouts"] == 0 and b["slowdown"] < 1.15, b
    # b's retransmissions are mostly none, not always: in 1 of 18 runs on the 2-core VM
    # (and one CI run) a frame between h5 and h6 (one switch, one path, nothing dropped)
    # arrived behind the next, during the restore, and RC's receiver NAKed it and the
    # sender went back N.  Any that come, come by NAK.
    assert (b["retransmitted"] == 0) == (b["naks"] == 0) == (b["retransmitted_bytes"] == 0), b
    # the summary over repeats, per job, and the table's line per job
    ja, jb = mode["jobs"]["a"], mode["jobs"]["b"]
    assert ja["retransmitted_median"] == a["retransmitted"] and ja["slowdown_max"] == a[
        "slowdown"] and ja["jobs_died"] == 0
    assert jb["retransmitted_median"] == b["retransmitted"] and jb["slowdown_max"] == b[
        "slowdown"]
    assert mode["summary"]["jobs_died"] == 0 and mode["summary"]["faithful"] == 1
    rows = {ln.split()[1]: ln.split() for ln in p.stdout.splitlines()
            if ln.startswith("fast-failover ")}
    assert [int(rows[j][4]) for j in "ab"] == [a["retransmitted"], b["retransmitted"]], p.stdout


def test_a_jobs_file_asking_for_a_host_the_fabric_lacks_is_refused_before_anything_is_built(
        tmp_path):
    path = jobs_file(tmp_path, placement="explicit")
    doc = yaml.safe_load(path.read_text())
    doc["jobs"][0]["hosts"] = ["h1", "h99"]
    doc["jobs"][1]["hosts"] = ["h1", "h2"]
    path.write_text(yaml.safe_dump(doc))
    p = emulator("run", *LAYOUT, "--workload", f"jobs:{path}", "--results",
                 str(tmp_path / "r"))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "unknown host 'h99'" in p.stderr and "line" in p.stderr
    assert not (tmp_path / "r").exists()
    doc["jobs"][0]["hosts"] = ["h1", "h3"]
    path.write_text(yaml.safe_dump(doc))
    p = emulator("run", *LAYOUT, "--workload", f"jobs:{path}", "--results",
                 str(tmp_path / "r"))
    assert p.returncode == 2 and "host h1 is job" in p.stderr, p.stderr
    assert not (tmp_path / "r").exists()
