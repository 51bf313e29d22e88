"""compare.json as users' scripts read it: its pinned top-level keys
(tests/unit/contract.json; results.json and drill.json are checked where the
run and drill tests read them)."""

import json

from tests.conftest import assert_contract, emulator

# no pass of its own under FABRIC_LAB_LAYOUT: its subject is compare.json's keys
LAYOUT_INDEPENDENT = True


def test_compare_writes_the_pinned_keys(tmp_path):
    p = emulator("compare", "--modes", "ecmp", "--workload", "allreduce", "--reps", "1",
                 "-P", "leaves=2", "-P", "spines=2", "-P", "hosts_per_leaf=1",
                 "--sizes", "256K", "--results", str(tmp_path), timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (base,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    doc = json.loads((base / "compare.json").read_text())
    assert_contract("compare.json", doc)
    assert [row["mode"] for row in doc["rows"]] == ["ecmp"]
