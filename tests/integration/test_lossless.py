"""The lossless fabric on real fabrics (root): an 8:1 incast without a drop or a
retransmission, a PFC storm caught by the watchdog (and a short one not), the lossy
fabric left as it was, and bad input refused."""

import argparse
import os
import subprocess

import pytest

from emulator.dataplane.faults import Injector
from emulator.dataplane.session import Session
from emulator.experiments.drill import drill
from emulator.experiments.drill import traffic as drill_traffic
from emulator.experiments.measure import paths as traced
from emulator.experiments.spec import scenario
from emulator.experiments.workloads import collective
from emulator.fabric import presets
from tests.conftest import emulator, stolen, unless_stolen, verdict_of

PARAMS = {"spines": "2", "leaves": "3", "hosts_per_leaf": "3"}     # 9 hosts: an 8:1 incast
ARGS = argparse.Namespace(pps=200.0, frame_len=128, post=1.5, gap_ms=1.0, qps=1)


def lossless_fabric(mode="pfc"):
    return presets.build("leaf-spine", {**PARAMS, "flow_control": mode})


def tc(netns, *args):
    cmd = ["tc", *args] if netns is None else ["nsenter", f"--net={netns}", "tc", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("mode", ["pfc", "credit"])
def test_incast_is_lossless_and_the_pauses_are_counted(tmp_path, mode):
    import urllib.request

    from emulator.dataplane.session import free_port

    def measure(attempt):
        port = free_port()
        with Session(lossless_fabric(mode), results_base=str(tmp_path / str(attempt)),
                     telemetry=port) as s:
            report = collective.run_collective(s, "incast", [1 << 19], warmup=0,
                                               rank_extra={"transport": "rc"})
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                metrics = r.read().decode()
            leaf1 = s.topo["switches"][0]
            port = leaf1["ports"][0]                         # leaf1 -> h1, the incast's root
            classes = tc(s.net.switch_netns("leaf1"), "-s", "class", "show", "dev",
                         port["intf"])
        return s, report, metrics, classes

    # a pause the emulator made too late (its own ingress drops) is measured again
    s, report, metrics, classes = unless_stolen(measure, lambda m: m[1]["fidelity"])
    assert report["fidelity"]["network_drops"]["total"] == 0, report["fidelity"]
    assert report["transport"]["retransmitted_packets"] == 0
    assert sum(r["wrong"] for r in report["rows"]) == 0
    doc = s.results["lossless"]
    assert s.results["flow_control"] == doc["flow_control"] == mode
    assert doc["ingress_drops"] == 0 and doc["gate_errors"] == []
    assert doc["pauses"] > 0
    if mode == "pfc":       # XOFF + XON at least; credits send no PFC frames
        assert doc["pause_frames"] >= 2 * doc["pauses"]
    else:
        assert doc["pause_frames"] == 0
        xoff, xon = (doc["thresholds"]["leaf1:eth1"][k] for k in ("xoff", "xon"))
        assert xoff - xon == 4238                        # one frame's credit
    # the pauses took hold: generous bounds (bench/bench_lossless.py measures it)
    assert doc["reaction_frames"]["count"] > 0
    assert doc["reaction_frames"]["median"] <= 10
    # the data went through the lossless class (10:20) of the port's shaper
    lossless_class = classes.split("class htb 10:20")[1].split("class htb")[0]
    sent = int(lossless_class.split("Sent ")[1].split(" bytes")[0])
    assert sent > 8 * (1 << 19) // 2
    # live counters: the pauses the root's leaf asked of its uplinks and senders
    pauses = sum(float(line.split()[-1]) for line in metrics.splitlines()
                 if line.startswith("fabric_pfc_pauses_sent_total{"))
    assert pauses > 0
    assert 'fabric_pfc_ingress_drops_total{port="leaf1:eth1"} 0.0' in metrics


def worst(fids):
    """Of the verdicts of one measurement's repeats, the first that ``stolen`` would
    measure again, else the first."""
    return next((f for f in fids if stolen(f)), fids[0])


def test_storm_is_caught_by_the_watchdog_and_a_short_one_is_not(tmp_path):
    fabric = lossless_fabric()
    with Session(fabric, results_base=str(tmp_path)) as s:
        detect = 1.0                                      # PfcConfig's default
        pairs = drill.probe_pairs(s.topo, ARGS.qps)
        paths = traced.flow_paths(s, pairs, ARGS.qps)
        inj = Injector(s)
        tries = []

        def measure(attempt):
            tries.append(attempt)
            flows, fids = {}, []
            for name, hold in (("short", 0.5 * detect), ("long", 3 * detect)):
                events = scenario.fault_spec("h1:pfc-storm", at_s=0.5, hold_s=hold)
                scenario.check_targets(events, s.topo, fabric.flow_control)
                sent, recv, _, _, fid = drill_traffic.repeat(
                    s, inj, pairs, events, ARGS, str(tmp_path / f"{name}{attempt}"))
                flows[name] = {k: (n, (recv.get(k) or {}).get("received_packets", 0),
                                   traced.crosses(paths[k], events, s.topo))
                               for k, n in sent.items()}
                fids.append(fid)
            return flows, worst(fids)
        try:
            flows, fid = unless_stolen(measure, lambda m: m[1])
        finally:
            inj.close()
    storms = s.results["lossless"]["storms"]
    assert [st["end"] for st in storms] == ["h1:eth0", "h1:eth0"] * len(tries)
    short, long = storms[-2:]                             # the measurement kept
    assert short["detected_after_s"] is None
    assert long["queue"] == "leaf1:eth1"
    assert detect <= long["detected_after_s"] <= detect + 0.1 + 0.15     # + one poll
    assert long["restored_after_stop_s"] is not None
    # flows that do not go to the storming host lose nothing: the fabric is lossless
    # and the watchdog ends the pause spreading from leaf1
    for name, fl in flows.items():
        others = {k: v for k, v in fl.items() if not v[2]}
        assert others, name
        assert all(recv == n for n, recv, _ in others.values()), (
            name, others, verdict_of(fid))
    assert any(v[2] for v in flows["long"].values())      # some probes go to h1


def test_lossy_fabric_is_left_as_it_was(tmp_path):
    fabric = presets.build("leaf-spine", {"spines": "1", "leaves": "2", "hosts_per_leaf": "1"})
    with Session(fabric, results_base=str(tmp_path)) as s:
        port = s.topo["switches"][0]["ports"][0]
        qdiscs = tc(s.net.switch_netns("leaf1"), "qdisc", "show", "dev", port["intf"])
        assert s.pfc is None
    assert "htb" not in qdiscs and "tbf 1: root" in qdiscs
    assert "lossless" not in s.results and s.results["flow_control"] == "none"


def test_bad_lossless_input_is_one_error():
    p = emulator("run", "-P", "lossless=maybe")
    assert p.returncode == 2 and "lossless" in p.stderr and "true or false" in p.stderr
    p = emulator("drill", "--fault", "h1:pfc-storm")
    assert p.returncode == 2 and "needs a lossless fabric" in p.stderr
    p = emulator("drill", "-P", "lossless=true", "--fault", "h99:pfc-storm")
    assert p.returncode == 2 and "h99" in p.stderr


def test_deadlock_is_detected_named_and_broken_by_the_watchdog(tmp_path):
    """The route change of fabric.lossless.deadlock_plan under its four streams at
    line rate: the paused queues form the ring S1->L2->S2->L3, the report names it,
    the watchdog's drops break it, and traffic flows again once the routes go."""
    from emulator.experiments.compare.lossless import drive_deadlock
    fabric = presets.build("leaf-spine", {"spines": "2", "leaves": "4", "hosts_per_leaf": "2",
                                          "lossless": "true"})
    with Session(fabric, results_base=str(tmp_path)) as s:
        # until the watchdog acts on the ring (a condition, 10 s at most)
        _, res = drive_deadlock(s, str(tmp_path), 10, until=lambda: any(s.pfc.drops().values()))
    doc = s.results["lossless"]
    assert doc["deadlocks"], doc
    cycle = doc["deadlocks"][0]["cycle"]
    assert sorted(cycle) == ["leaf2", "leaf3", "spine1", "spine2"]
    # the watchdog mitigated a queue of the ring (which one is the machine's timing;
    # the paused senders' NICs behind it may be caught too)
    ring = {f"{sw['name']}:{p['name']}" for sw in s.topo["switches"] for p in sw["ports"]
            for a, b in zip(cycle, cycle[1:] + cycle[:1]) if sw["name"] == a and p["peer"] == b}
    assert len(ring) == 4, ring
    storms = {port for ev, _, port in doc["watchdog_events"] if ev == "storm"}
    assert ring & storms, (ring, storms)
    assert doc["watchdog_drops"] > 0
    # after the routes were taken back, every stream delivered again
    for rx in res["receivers"]:
        for bins in rx["timelines"].values():
            assert sum(bins[-8:]) > 0, rx["name"]


def test_cli_storms_and_shows_the_pauses(tmp_path):
    import io
    import logging

    from mininet.log import lg, setLogLevel

    from emulator.experiments.cli import FabricCLI
    script = tmp_path / "commands"
    script.write_text("storm h1\nh2 ping -c 3 -i 0.05 -W 1 h1\npfc\nstorm h1 off\n"
                      "storm nosuch\n")
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    lg.addHandler(handler)
    fabric = presets.build("leaf-spine", {"spines": "1", "leaves": "2", "hosts_per_leaf": "1",
                                          "lossless": "true"})
    try:
        with Session(fabric, results_base=str(tmp_path)) as s, open(os.devnull) as null:
            setLogLevel("output")
            FabricCLI(s, stdin=null, script=str(script))
    finally:
        lg.removeHandler(handler)
        setLogLevel("error")
    text = buf.getvalue()
    assert "h1:eth0 pauses its peer forever" in text
    assert "h1:eth0 stopped pausing" in text
    table = text.split("paused_s")[1]
    assert any(line.split()[:3] == ["h1:eth0", "0", "1"] for line in
               (x.split("log.py:137")[-1] for x in table.splitlines()) if line.split())
    # pings ride the control class: the storm pauses RoCE data only
    assert "3 packets transmitted, 3 received" in text
    assert "error:" in text and "nosuch" in text
    assert [st["end"] for st in s.results["lossless"]["storms"]] == ["h1:eth0"]


def test_fabric_file_storm_starts_once_reachable(tmp_path):
    from emulator.fabric import spec
    fabric = presets.build("leaf-spine", {"spines": "1", "leaves": "2", "hosts_per_leaf": "1",
                                          "lossless": "true"})
    text = spec.dump(fabric).replace("endpoints: ['h1:eth0', 'leaf1:eth1']",
                                     "endpoints: ['h1:eth0', 'leaf1:eth1']\n    pfc_storm: h1")
    fabric = spec.load_text(text)
    assert fabric.links[0].pfc_storm == "h1", text
    with Session(fabric, results_base=str(tmp_path)) as s:
        assert s.results["impairments"] == ["h1:leaf1: PFC storm from h1:eth0"]
    assert [st["end"] for st in s.results["lossless"]["storms"]] == ["h1:eth0"]


def test_storm_with_the_forward_action_loses_nothing(tmp_path):
    """pfc_watchdog=forward: the stormed queue ignores the pauses once caught and
    still delivers; every flow, the storming host's too, loses nothing."""
    fabric = presets.build("leaf-spine", {**PARAMS, "lossless": "true",
                                          "pfc_watchdog": "forward"})
    with Session(fabric, results_base=str(tmp_path)) as s:
        pairs = drill.probe_pairs(s.topo, ARGS.qps)
        paths = traced.flow_paths(s, pairs, ARGS.qps)
        inj = Injector(s)
        events = scenario.fault_spec("h1:pfc-storm", at_s=0.5, hold_s=2.5)
        tries = []

        def measure(attempt):
            tries.append(attempt)
            return drill_traffic.repeat(s, inj, pairs, events, ARGS,
                                        str(tmp_path / f"forward{attempt}"))
        try:
            sent, recv, _, _, fid = unless_stolen(measure, lambda m: m[4])
        finally:
            inj.close()
    assert any(traced.crosses(paths[k], events, s.topo) for k in sent)
    for k, n in sent.items():
        assert (recv.get(k) or {}).get("received_packets") == n, (k, verdict_of(fid))
    doc = s.results["lossless"]
    assert len(doc["storms"]) == len(tries) and doc["storms"][-1]["detected_after_s"] is not None
    assert doc["watchdog_drops"] == 0 and doc["settings"]["wd_action"] == "forward"
