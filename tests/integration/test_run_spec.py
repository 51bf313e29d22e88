"""``run.yaml`` in a run's results directory reruns that run (``run --spec``): the same
fabric, modes and seeds; options given beside it override its fields."""

import json
import re

import yaml

from tests.conftest import emulator, results_of

# no pass of its own under FABRIC_LAB_LAYOUT: its subject is run.yaml, not the datapath
LAYOUT_INDEPENDENT = True

ARGS = ["-P", "hosts_per_leaf=1", "-P", "leaves=2", "-P", "spines=2", "--duration", "1",
        "--hash-seed", "7", "--failover", "controller", "--queue-ms", "20"]


def doc_of(run):
    with open(run / "run.yaml") as f:
        doc = yaml.safe_load(f)
    return {k: v for k, v in doc.items() if k not in ("id", "run")}


def topology_of(run):
    text = (run / "topology.json").read_text()
    doc = json.loads(text)
    tag = doc.pop("run")
    return json.loads(re.sub(rf"fl{tag}", "flTAG", json.dumps(doc)))


def test_a_run_yaml_reruns_the_same_run_and_flags_override_its_fields(tmp_path):
    p = emulator("run", *ARGS, "--results", str(tmp_path / "a"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    first, a = results_of(tmp_path / "a")
    spec = yaml.safe_load((a / "run.yaml").read_text())
    assert spec["control"]["failover"] == "controller" and spec["control"]["hash_seed"] == 7
    assert spec["versions"]["commit"] and spec["versions"]["openvswitch"]
    assert spec["transport"]["job_seed"] is not None        # drawn once, written down
    with open(a / "topology.json") as f:
        assert json.load(f)["modes"]["failover"] == "controller"   # the controller's input

    p = emulator("run", "--spec", str(a / "run.yaml"), "--results", str(tmp_path / "b"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    _, b = results_of(tmp_path / "b")
    same_a, same_b = doc_of(a), doc_of(b)
    assert same_b == same_a, "run --spec changed a field"
    assert topology_of(b) == topology_of(a)

    p = emulator("run", "--spec", str(a / "run.yaml"), "--duration", "2", "--lb", "spray",
                 "--results", str(tmp_path / "c"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    _, c = results_of(tmp_path / "c")
    changed = doc_of(c)
    assert changed["workload"]["duration"] == 2 and changed["control"]["lb"] == "spray"
    changed["workload"]["duration"], changed["control"]["lb"] = 1.0, "ecmp"
    assert changed == same_a, "an override changed another field"


def test_a_run_yaml_that_is_not_one_is_refused(tmp_path):
    bad = tmp_path / "run.yaml"
    bad.write_text("control: {lb: wcmp}\n")
    p = emulator("run", "--spec", str(bad))
    assert p.returncode == 2 and "not a run specification" in p.stderr
    bad.write_text(yaml.safe_dump({"fabric": {"document": {"name": "x"}}, "control":
                                   {"lbb": "ecmp"}}))
    p = emulator("run", "--spec", str(bad))
    assert p.returncode == 2 and "error:" in p.stderr
