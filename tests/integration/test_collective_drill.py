"""A failover drill under a collective (root): ``drill --workload allreduce``
cuts a leaf uplink that a connection of the ring crosses, in the middle of the
calls; the report names the disturbed iteration, its slowdown and the
retransmissions, and the job survives a repaired cut with #wrong 0."""

import json
import subprocess
import sys

from tests.conftest import REPO, assert_contract


def test_the_job_survives_a_cut_and_the_disturbed_iteration_is_found(tmp_path):
    p = subprocess.run([sys.executable, "-m", "emulator", "drill", "--workload", "allreduce",
                        "--sizes", "512K", "--iterations", "6", "--repeat", "1",
                        "--failover", "fast-failover", "--results", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "the first leaf uplink a connection of the allreduce crosses" in p.stdout
    (base,) = [d for d in tmp_path.iterdir() if d.name.startswith("drill-")]
    doc = json.loads((base / "drill.json").read_text())
    assert_contract("drill.json", doc)
    (mode,) = doc["modes"]
    assert mode["crossing"]                       # the cut link carries the job
    (rep,) = mode["repeats"]
    assert len(rep["calls"]) == 6
    k = rep["disturbed"]
    assert k is not None and 0 <= k < 6
    t_cut = rep["events"][0]["t_ns"]
    call = rep["calls"][k]
    assert call["t_start_ns"] <= t_cut <= call["t_start_ns"] + call["time_s"] * 1e9 or \
        call["t_start_ns"] > t_cut
    assert rep["slowdown"] is not None and rep["slowdown"] > 0
    assert not rep["job_died"] and rep["wrong"] == 0
    assert "job died" in p.stdout and "fast-failover" in p.stdout
    # the fabric's results directory has its page, with the cut from faults.jsonl
    page = (base / mode["results_dir"].rsplit("/", 1)[-1] / "report.html").read_text()
    assert '"kind":"link_down"' in page
