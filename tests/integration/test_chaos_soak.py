"""The chaos soak on a real fabric (root): random faults under the probes.

* a short soak (2 spines x 2 leaves x 1 host, 15 s, a fault every ~3 s) runs the
  faults ``--seed`` draws, reports a row per fault, and every invariant holds,
  the reliable jobs' (every packet their QPs sent delivered or the QP dead)
  with packets sent, the injector's log against the rows, and every results
  file whole; each allowance says how many packets it excused;
* an interface of a run left on the machine breaks ``nothing_left_behind``;
* a soak interrupted with Ctrl-C (SIGINT) exits 130, repairs the active fault,
  and still writes drill.json with a row per fault injected (as the injector's
  log has them) and nothing of the run left behind.
"""

import json
import signal
import subprocess
import sys
import time

from emulator.dataplane import cleanup
from emulator.experiments.drill import chaos as drill_chaos
from emulator.fabric import addressing, presets
from tests.conftest import REPO, assert_contract, emulator

SMALL = ["-p", "leaf-spine", "-P", "spines=2", "-P", "leaves=2", "-P", "hosts_per_leaf=1"]
PARAMS = {"spines": 2, "leaves": 2, "hosts_per_leaf": 1}


def drawn(seed, duration, mtbf, mttr=1.0):
    links, switches = drill_chaos.fault_targets(
        addressing.plan(presets.build("leaf-spine", PARAMS)))
    return drill_chaos.draw(seed, duration, mtbf, mttr, links, switches)


def test_a_short_soak_reports_every_fault_and_keeps_the_invariants(tmp_path):
    p = emulator("drill", *SMALL, "--chaos", "--duration", "15", "--mtbf", "3",
                 "--seed", "11", "--results", str(tmp_path), timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    (doc_path,) = list(tmp_path.glob("drill-*/drill.json"))
    doc = json.loads(doc_path.read_text())
    assert_contract("drill.json", doc)
    chaos = doc["chaos"]
    want = drawn(11, 15, 3)
    assert [(f["kind"], f["target"], f["at_s"]) for f in chaos["faults"]] == \
        [(f["kind"], f["target"], f["at_s"]) for f in want]
    assert chaos["injected"] == len(want) > 0 and not chaos["interrupted"]
    assert chaos["invariants"] == {"every_fault_reported": True, "every_fault_repaired": True,
                                   "no_emulation_drops": True,
                                   "untouched_flows_lost_nothing": True,
                                   "reliable_qps_delivered_or_dead": True,
                                   "nothing_left_behind": True,
                                   "results_complete": True}, chaos
    # the injector's own log has every drawn fault, at most 200 ms from the soak's time
    log = chaos["fault_log"]
    assert log["rows"] == len(want) and log["logged_changes"] >= 2 * len(want), log
    assert chaos["results_files"]["checked"] >= 5          # run.yaml x2, topology, faults...
    # each allowance in force says what it excused
    assert set(chaos["allowances"]) == {"in_flight", "lossy_path", "sender_catch_up",
                                        "ovsdb_stats_lag", "faulted_links", "aborted_job"}
    for name, a in chaos["allowances"].items():
        assert isinstance(a["excused_packets"], int), (name, a)
        assert f"allowance {name} (" in p.stdout
    t = chaos["totals"]              # the probes' alone (the jobs' frames are not probes)
    assert 0 < t["received_packets"] <= t["sent_packets"], t
    rel = chaos["job"]["reliable"]
    assert chaos["job"]["instances"] >= 1 and rel["qps"] > 0 and rel["sent_packets"] > 0
    assert rel["delivered_packets"] > 0, chaos["job"]
    assert chaos["fabric"] == "lossy" and len(chaos["probe_paths"]) >= 2
    for row in chaos["faults"]:
        assert {"kind", "target", "detection_ms", "recovery_ms", "lost_packets",
                "untouched_lost_packets", "untouched_queue_lost_packets",
                "queue_drops"} <= set(row)
        if row["kind"] in ("cut", "flap"):
            assert row["detection_ms"] is not None, row     # the controller heard of it
    assert "invariant nothing_left_behind: true" in p.stdout
    # the fabric's page: the soak's printout as its summary, its faults on the axis
    (mode,) = doc["modes"]
    page = (doc_path.parent / mode["results_dir"].rsplit("/", 1)[-1] / "report.html")
    assert "invariant untouched_flows_lost_nothing: true" in page.read_text()


def test_a_leftover_interface_breaks_nothing_left_behind():
    taken = set(cleanup.our_interfaces().values()) | set(cleanup.our_bridges().values())
    tag = next(t for t in (f"{i:04x}" for i in range(0xfe00, 0xff00)) if t not in taken)
    name = f"fl{tag}x9"
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", f"{name}-e1"],
                   check=True, timeout=10)
    try:
        holds, left = drill_chaos.left_behind(tag)
        assert holds is False and sorted(left["interfaces"]) == [name, f"{name}-e1"], left
    finally:
        subprocess.run(["ip", "link", "del", name], check=True, timeout=10)
    assert drill_chaos.left_behind(tag) == (True, {})


def test_a_soak_interrupted_with_ctrl_c_still_writes_its_document(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "emulator", "drill", *SMALL, "--chaos",
                             "--duration", "40", "--mtbf", "1", "--seed", "3",
                             "--results", str(tmp_path)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = []
    try:
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            lines.append(line)
            if "fault 3/" in line:
                break
            assert time.monotonic() < deadline, "".join(lines[-20:])
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 130, "".join(lines[-20:]) + rest[-2000:]
    (doc_path,) = list(tmp_path.glob("drill-*/drill.json"))
    chaos = json.loads(doc_path.read_text())["chaos"]
    assert chaos["interrupted"] is True
    # the third fault gets a row if Ctrl-C came after its first change, none if before
    assert chaos["injected"] >= 2 and len(chaos["faults"]) == chaos["injected"]
    assert chaos["invariants"]["every_fault_reported"] is True, chaos["fault_log"]
    assert chaos["invariants"]["every_fault_repaired"] is True, chaos["fault_log"]
    assert chaos["invariants"]["results_complete"] is True, chaos["results_files"]
    assert chaos["invariants"]["nothing_left_behind"] is True, chaos.get("left_behind")
