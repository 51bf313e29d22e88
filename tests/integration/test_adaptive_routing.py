"""The switches' own adaptive routing on real fabrics (root, OVS, os-ken):

- a cut uplink with nothing else to repair it (``--failover none``): the flows
  whose own leaf decides leave the dead uplink within the detection delay and
  a few packets, timestamped in the data plane (the leaf's end stays up, its
  egress rescuing what Open vSwitch still held); the flows only a remote switch
  could save lose the whole fault;
- the same cut with the controller repairing: the remote leaf's data plane
  stops using the dead path once the controller's push has reached it;
- a lossless fabric: the stage's program runs after PFC's on every interface
  (one XDP program per interface, chained) and the collective is whole;
- a competing stream mid-collective: the data plane moves the collective off
  the stream's uplink, where hashing leaves it.
"""

import json
import subprocess
import sys

from tests.conftest import REPO, assert_contract

SMALL = ["-P", "spines=2", "-P", "leaves=2"]


def emulator(tmp_path, *argv, timeout=600):
    p = subprocess.run([sys.executable, "-m", "emulator", *argv, "--results", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def test_a_dead_uplink_is_left_by_the_deciding_switch_alone(tmp_path):
    out = emulator(tmp_path, "drill", *SMALL, "-P", "hosts_per_leaf=1", "--lb", "dlb",
                   "--failover", "none", "--repeat", "2")
    doc = json.loads(next(tmp_path.glob("drill-*/drill.json")).read_text())
    assert_contract("drill.json", doc)
    m = doc["modes"][0]
    a = m["summary"]["adaptive"]
    assert all(r["fidelity"]["verdict"] == "faithful" for r in m["repeats"]), out[-2000:]
    # 1 ms detection + the packets in flight (3-4 ms on an idle machine); a generous
    # bound, far below the fault's 1 s that nothing else would repair
    assert a["local_loss_window_ms"]["max"] <= 20.0, a
    assert a["remote_loss_window_ms"]["median"] >= 10 * a["local_loss_window_ms"]["max"], a
    assert a["first_elsewhere_after_cut_ms"]["max"] <= 20.0, a
    assert a["detect_ms"]["median"] >= 0.9                  # the modelled 1 ms
    assert m["summary"]["non_crossing_lost_packets"] == 0
    assert "flows whose own switch decides" in out and "reaction to carrier loss" in out
    # the cut set spine1's end down and kept leaf1's up, its egress rescuing frames
    # held in Open vSwitch's backlog (counted per repeat, however many)
    cuts = [json.loads(line) for line in next(tmp_path.glob("drill-*/*/faults.jsonl"))
            .read_text().splitlines() if '"link_down"' in line]
    assert cuts and all(len(c["kept_up"]) == 1 for c in cuts), cuts
    assert a["rescued_frames"]["n"] == 2, a


def test_the_remote_leaf_drops_the_dead_path_once_the_controller_has_repaired(tmp_path):
    out = emulator(tmp_path, "drill", *SMALL, "-P", "hosts_per_leaf=1", "--lb", "packet",
                   "--failover", "controller", "--repeat", "1")
    doc = json.loads(next(tmp_path.glob("drill-*/drill.json")).read_text())
    m = doc["modes"][0]
    a = m["summary"]["adaptive"]
    # leaf2's route to h1 loses spine1 with the controller's push, not before it
    conv = m["repeats"][0]["controller"]
    assert a["withdrawn_after_cut_ms"]["n"] == 1, a
    assert a["withdrawn_after_cut_ms"]["median"] >= a["detect_ms"]["median"], a
    # the flows into leaf1 through spine1 lose until then: not the fault's whole second
    assert a["remote_loss_window_ms"]["max"] <= 300.0, (a, conv)
    # the dead uplink's loss, split: decided before the cut, or during the detection
    assert a["lost_before_cut_frames"]["n"] == 1, a
    assert "withdrew the dead path's candidates" in out


def test_on_a_lossless_fabric_the_stage_follows_pfc_on_every_interface(tmp_path):
    out = emulator(tmp_path, "run", *SMALL, "-P", "hosts_per_leaf=2", "-P", "lossless=true",
                   "--workload", "allreduce", "--sizes", "1M", "--lb", "packet")
    r = json.loads(next(tmp_path.glob("*/results.json")).read_text())
    assert r["adaptive"]["frames"] > 100, r["adaptive"]
    assert r["collective"]["rows"][-1]["wrong"] == 0
    assert r["lossless"]["ingress_drops"] == 0 and r["lossless"]["watchdog_drops"] == 0
    assert "adaptive routing in the switches (packet" in out


def test_a_competing_stream_is_left_to_its_uplink(tmp_path):
    out = emulator(tmp_path, "compare", "-P", "spines=4", "-P", "leaves=2",
                   "-P", "hosts_per_leaf=3", "--ring", "strided", "--qps", "2", "--sizes", "2M",
                   "--reps", "1", "--retries", "0", "--modes", "dlb", "--stream", "h3:h6")
    doc = json.loads(next(tmp_path.glob("*compare/compare.json")).read_text())
    rows = {r["mode"]: r for r in doc["rows"]}
    streamed = [r for r in doc["runs"] if r.get("stream")]
    assert len(streamed) == 1 and all(r["stream"]["started"] and not r["stream"]["error"]
                                      for r in streamed), streamed
    assert all(r["stream"]["uplink"].startswith("leaf1:") for r in streamed)
    # the stream takes its uplink's full rate; balanced, a QP of the collective was
    # there (4 QPs on 4 uplinks): the switches move it, so the collective keeps its
    # pace and the uplink's queue stays short (a QP left beside it: hundreds of ms)
    assert rows["dlb"]["loss"] <= 0.1, out[-1500:]
    assert rows["dlb"]["queue_p99_ms"] < 50, out[-1500:]
    assert rows["dlb"]["wrong"] == 0
