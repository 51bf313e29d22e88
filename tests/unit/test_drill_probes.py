"""The drill's probe plan (emulator/experiments/drill/probes.py): one flow per path,
a rate within half the budget, and healthy links that go down during a repeat."""

import pytest

from emulator.experiments.drill import drill
from emulator.experiments.measure import convergence
from emulator.experiments.measure import paths as traced
from emulator.experiments.measure.budget import path_hops
from emulator.experiments.spec import scenario
from tests.unit.test_drill_faults import plan


@pytest.fixture(scope="module")
def default():
    return plan("leaf-spine")          # 4 spines, 4 leaves, 2 hosts per leaf


def test_paths_probe_one_host_per_leaf_on_every_equal_cost_path(default):
    planned = drill.planned_flows(default, "paths", None)
    assert [(s["name"], d["name"], n) for s, d, n in planned] == [
        ("h1", "h3", 4), ("h3", "h5", 4), ("h5", "h7", 4), ("h7", "h1", 4)]
    assert [n for *_, n in drill.planned_flows(default, "paths", 2)] == [2, 2, 2, 2]
    hosts = drill.planned_flows(default, "hosts", None)
    assert len(hosts) == 8 and all(n == 4 for *_, n in hosts)


def test_probe_rate_stays_within_half_the_budget(default):
    planned = drill.planned_flows(default, "paths", None)
    hop_flows = sum(n * path_hops(default, s, d) for s, d, n in planned)
    assert hop_flows == 16 * 3
    # a budget that carries 1 ms resolution at less than half: unchanged, nothing said
    assert drill.probe_rate(default, planned, 128, 1.0, {"hop_pps": 200_000}) == (1000.0, None)
    # a smaller one: lowered to half of it, and said so
    pps, note = drill.probe_rate(default, planned, 128, 1.0, {"hop_pps": 60_000})
    assert pps * hop_flows <= 30_000 < (pps + 1) * hop_flows
    assert "lowered" in note and "--pps" in note
    # asked for explicitly: as given; no budget known: the resolution's rate
    assert drill.probe_rate(default, planned, 128, 1.0, {"hop_pps": 60_000}, pps=900) == (
        900, None)
    assert drill.probe_rate(default, planned, 128, 2.0, None) == (500.0, None)


def test_healthy_links_that_went_down_are_named(default):
    events = scenario.fault_spec("leaf1-spine1", at_s=0.5, hold_s=1.0)
    expected = traced.fault_ports(events, default)
    assert expected == {(65537, 3), (131073, 1)}          # leaf1:eth3, spine1:eth1
    conv = [{"event": "port", "dpid": 65537, "port": 3, "up": False, "t_event": 10.0},
            {"event": "port", "dpid": 65537, "port": 4, "up": False, "t_event": 10.2},
            {"event": "port", "dpid": 65538, "port": 5, "up": False, "t_event": 5.0},
            {"event": "port", "dpid": 65537, "port": 4, "up": True, "t_event": 11.0},
            {"event": "connect", "dpid": 65537, "t_event": 12.0}]
    assert traced.unexpected_downs(conv, 9.0, expected, default) == {"leaf1-spine2"}
    assert convergence.ports_down(conv) == {(65537, 3), (65538, 5)}
    crash = traced.fault_ports(scenario.fault_spec("spine1:crash", at_s=0.5, hold_s=1.0),
                              default)
    assert len(crash) == 8 and (65540, 3) in crash and (131073, 4) in crash


def test_spurious_downs_make_a_repeat_emulator_bound():
    from emulator.experiments.measure.fidelity import spurious_downs
    doc = {"verdict": "faithful", "reasons": [], "remedy": None}
    assert spurious_downs(doc, set()) is doc
    bad = spurious_downs(doc, {"leaf1-spine2"})
    assert bad["verdict"] == "emulator-bound" and "leaf1-spine2" in bad["reasons"][0]
    assert bad["spurious_port_downs"] == ["leaf1-spine2"] and "--pps" in bad["remedy"]
    assert doc["verdict"] == "faithful"
    told = spurious_downs(doc, {"leaf1-spine2"}, {"late_sends": 7, "max_ms": 220,
                                                  "interfaces": 5})
    assert "7 control packets sent late, up to 220 ms after due" in told["reasons"][0]
    quiet = spurious_downs(doc, {"leaf1-spine2"}, {"late_sends": 0, "max_ms": 0,
                                                   "interfaces": 0})
    assert "sent late" not in quiet["reasons"][0]


def test_bfd_sent_late_is_read_from_each_daemons_log_since_the_mark(tmp_path):
    """Open vSwitch logs each BFD control packet it sent over 1.5 intervals late;
    only lines written after ``mark``, for the fabric's own interfaces, count."""
    from emulator.dataplane.links import bfd
    from emulator.fabric import addressing, presets
    t = addressing.plan(presets.build("leaf-spine", {}))
    mine = bfd.interfaces(t)
    line = ("2026-11-26T19:37:51.308Z|00198|bfd(monitor116)|INFO|{}: long delay of "
            "{}ms (expected 10ms) sending BFD control message\n")
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    logs[0].write_text(line.format(mine[0], 500))          # before the mark

    class Daemon:
        def __init__(self, path):
            self.path = path

        def log_path(self):
            return str(self.path)

    class Net:
        def ovses(self):
            return [Daemon(p) for p in logs] + [object()]  # a remote one: no log here

    late = bfd.LateSends(t, Net())
    late.mark()
    assert late.read() == {"late_sends": 0, "max_ms": 0, "interfaces": 0}
    with open(logs[0], "a") as f:
        f.write(line.format(mine[0], 21) + line.format("otherrun-e1", 900)
                + "2026-11-26T19:37:51.309Z|00199|bfd|INFO|x: BFD state change\n")
    logs[1].write_text(line.format(mine[1], 120) + line.format(mine[0], 30))
    assert late.read() == {"late_sends": 3, "max_ms": 120, "interfaces": 2}
    assert bfd.LateSends(t, type("N", (), {"ovses": lambda self: [object()]})()).read() is None
    msg = bfd.unsettled("timed out", 10, {"late_sends": 64, "max_ms": 60, "interfaces": 32})
    assert "64 control packets late, up to 60 ms" in msg and "--bfd 20" in msg
    assert "late" not in bfd.unsettled("timed out", 30, None) and "--bfd 60" in bfd.unsettled(
        "timed out", 30, None)
    assert "kept going down after the restore; Open vSwitch sent 2" in bfd.unsettled(
        "timed out", 10, {"late_sends": 2, "max_ms": 40, "interfaces": 1}, "after the restore")
    from emulator.experiments.drill.stats import summary_line
    rep = {"flows": {"a": {"crosses": True, "loss_window_ms": 12.0}}, "controller": None,
           "fidelity": {"verdict": "emulator-bound",
                        "bfd_late_sends": {"late_sends": 3, "max_ms": 120, "interfaces": 2}}}
    assert "BFD sent 3 packets late (up to 120 ms)" in summary_line(rep)
    rep["fidelity"]["bfd_late_sends"]["late_sends"] = 0
    assert "BFD" not in summary_line(rep)


def test_job_seeds_shuffle_qp_numbers_one_to_one():
    from traffic.ranks.config import PSN_MASK, qpn, shuffle24
    for seed in (0, 1, 12345, 2 ** 32 - 1):
        xs = range(0, 1 << 24, 97)
        assert len({shuffle24(x, seed) for x in xs}) == len(xs)
        assert all(0 <= shuffle24(x, seed) <= PSN_MASK for x in range(100))
    keys = [(i, j, q) for i in range(16) for j in range(16) if i != j for q in range(4)]
    assert len({qpn(*k, 7) for k in keys}) == len(keys)
    assert [qpn(*k, 7) for k in keys[:20]] != [qpn(*k, 8) for k in keys[:20]]
    assert qpn(1, 2, 0) == qpn(1, 2, 0, None) == (2 << 14 | 2 << 4)


def test_bfd_hold_down_only_with_bfd():
    import argparse
    args = argparse.Namespace(bfd=None, bfd_holddown=None)
    assert drill.holddown_for(args) is None               # no BFD: nothing damped
    args.bfd = "10"
    assert drill.holddown_for(args) == drill.BFD_HOLDDOWN
    args.bfd_holddown = "0"
    assert drill.holddown_for(args) == "0"


def test_the_drill_gives_each_crossing_flows_window_per_mode():
    from emulator.experiments.drill.stats import per_flow_lines

    def rep(local, remote):
        return {"flows": {
            "10.0.0.1#1": {"crosses": True, "loss_window_ms": local,
                           "path": ["h1:eth0", "leaf1:eth3", "spine1:eth2", "leaf2:eth1", "h3"]},
            "10.0.0.7#14": {"crosses": True, "loss_window_ms": remote, "path": None},
            "10.0.0.3#2": {"crosses": False, "loss_window_ms": 0.0, "path": None}}}
    results = [{"mode": "controller", "repeats": [rep(7, 30), rep(8, 32), rep(6, 28)]},
               {"mode": "fast-failover", "repeats": [rep(7, 5), rep(7, 4), rep(8, 6)]}]
    lines = per_flow_lines(results)
    assert lines[1] == ("  10.0.0.1#1 [h1 > leaf1 > spine1 > leaf2 > h3]: controller 7.0, "
                        "fast-failover 7.0 (fast-failover/controller 1.00x)")
    assert lines[2] == ("  10.0.0.7#14 []: controller 30.0, fast-failover 5.0 "
                        "(fast-failover/controller 0.17x)")
    assert len(lines) == 3                              # the flow that does not cross: none
    assert per_flow_lines(results[:1]) == []
