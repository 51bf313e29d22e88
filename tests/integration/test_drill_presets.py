"""Failover drills on the dual-homed and multi-rail presets (root), through ``emulator drill``.

Each case is one ``python -m emulator drill`` (``emulator.__main__.main``,
fast-failover, one repeat, short hold) on a small instance; the test reads
its ``drill.json`` and its printed table.  The drill traces every probe flow
(``ofproto/trace`` hop by hop, a bonded host's NIC switch included) and
calls it *crossing* when its path leaves a node by the faulty link or passes
the crashed switch.  Asserted per case:

* some flows cross the fault and some do not (the classification is not
  trivially all or nothing);
* the crossing flows lost packets (the fault was real and on their path)
  and every one recovered long before the restore: loss window < 1000 ms
  and < the hold, recovery < the hold;
* the non-crossing flows lost nothing;
* the report carries the loss window: ``drill.json``'s summary and the
  printed table give the crossing flows' median.

Dual-ToR instances have three ToR pairs with one host each, so a ToR crash
leaves a probe pair (h2 -> h3) that never touches the crashed ToR.  The
multi-plane case probes both rails; its faults are on rail 2 (plane 2's
leaf3-spine3 link, plane 2's spine3), so every rail-1 flow must lose nothing.
"""

import glob
import json
import os

import pytest

from emulator.__main__ import main as cli
from tests.conftest import unless_stolen, verdict_of

HOLD_S = 1.2
DUAL_TOR = ["-P", "tor_pairs=3", "-P", "hosts_per_pair=1"]
CASES = [
    ("dual-tor", DUAL_TOR + ["-P", "mode=active-standby"], "h1-leaf1"),
    ("dual-tor", DUAL_TOR + ["-P", "mode=active-standby"], "leaf1:crash"),
    ("dual-tor", DUAL_TOR + ["-P", "mode=active-active"], "h1-leaf1"),
    ("dual-tor", DUAL_TOR + ["-P", "mode=active-active"], "leaf1:crash"),
    ("dual-plane", DUAL_TOR + ["-P", "spines=2"], "h1-leaf1"),
    ("multi-plane", ["-P", "hosts_per_leaf=1"], "leaf3-spine3"),
    ("multi-plane", ["-P", "hosts_per_leaf=1"], "spine3:crash"),
    # Open vSwitch's own carrier polling instead of the modeled 1 ms detection, and
    # no --fault: the drill cuts the first uplink of the first leaf (leaf1-spine1)
    ("leaf-spine", ["-P", "spines=2", "-P", "leaves=2", "-P", "hosts_per_leaf=1",
                    "--detect", "os"], None),
]


def run_drill(preset, params, fault, tmp_path, capsys):
    """The drill (again if ``unless_stolen`` says so): (drill.json, what it printed)."""
    def measure(attempt):
        base = tmp_path / f"try{attempt}"
        argv = ["drill", "-p", preset, *params, *(["--fault", fault] if fault else []),
                "--failover", "fast-failover",
                "--repeat", "1", "--at", "0.4", "--hold", str(HOLD_S), "--post", "0.5",
                "--results", str(base)]
        status = cli(argv)
        printed = capsys.readouterr().out
        assert status == 0, printed[-2000:]
        [path] = glob.glob(os.path.join(str(base), "drill-*", "drill.json"))
        with open(path) as f:
            return json.load(f), printed
    return unless_stolen(measure, lambda m: m[0]["modes"][0]["repeats"][0]["fidelity"])


@pytest.mark.parametrize("preset,params,fault", CASES,
                         ids=[f"{p}-{'-'.join(a.split('=')[-1] for a in ps[1::2])}-{f}"
                              for p, ps, f in CASES])
def test_drill_on_a_dual_homed_or_multi_rail_fabric(preset, params, fault, tmp_path, capsys):
    doc, printed = run_drill(preset, params, fault, tmp_path, capsys)
    if fault is None:
        assert "no --fault given: cutting leaf1-spine1" in printed
        assert [e["target"] for e in doc["events"]] == ["leaf1-spine1"] * 2
    [mode] = doc["modes"]
    assert mode["controller_problems"] == []
    [rep] = mode["repeats"]
    flows = rep["flows"]
    crossing = {k: f for k, f in flows.items() if f["crosses"]}
    others = {k: f for k, f in flows.items() if not f["crosses"]}
    assert crossing and others, {k: f["path"] for k, f in flows.items()}
    # the fault hit the flows said to cross it, and only those
    assert sum(f["fault_lost_packets"] for f in crossing.values()) > 0, crossing
    assert {k: f["fault_lost_packets"] for k, f in others.items()} == {k: 0 for k in others}, (
        verdict_of(rep["fidelity"]))
    # the switches were told of the fault by the modeled detection, unless --detect os
    assert ("detect" in rep["events"][0]) == ("os" not in params), rep["events"][0]
    hold_ms = (rep["events"][1]["t_ns"] - rep["events"][0]["t_ns"]) / 1e6
    assert hold_ms >= HOLD_S * 1000 * 0.9
    for k, f in crossing.items():
        assert f["sent_packets"] > 0 and f["received_packets"] > 0, (k, f)
        assert f["loss_window_ms"] < min(1000.0, hold_ms), (k, f)
        assert f["recovery_ms"] < hold_ms, (k, f)        # recovered before the restore
    if preset == "dual-tor" and "mode=active-standby" in params:
        # everything to and from h1 goes through ToR A (leaf1) and h1's link to it
        # (via h1's NIC switch); h1 is the only host under leaf1
        assert set(crossing) == {k for k, f in flows.items()
                                 if f["path"][0].startswith("h1:") or f["path"][-1] == "h1"}
    if preset == "multi-plane":
        # rail 1 is plane 1 (leaf1, leaf2): probed, untouched by the rail-2 fault
        rail1 = {k for k, f in flows.items() if f["path"][1].split(":")[0] in ("leaf1", "leaf2")}
        assert rail1 and not rail1 & set(crossing), {k: f["path"] for k, f in flows.items()}
        assert all(flows[k]["fault_lost_packets"] == 0 for k in rail1)
    # the report: the crossing flows' loss window, in drill.json and in the printed table
    summary = mode["summary"]["loss_window_ms"]
    assert summary["n"] == len(crossing)
    windows = sorted(f["loss_window_ms"] for f in crossing.values())
    assert windows[0] <= summary["median"] <= windows[-1]
    assert mode["summary"]["non_crossing_lost_packets"] == 0
    line = next(ln for ln in printed.splitlines() if ln.startswith("fast-failover"))
    assert f"{summary['median']:.2f}" in line.split()
    assert "loss window" in printed
