"""A drill's convergence predicted before it runs (emulator/fabric/agents/predict.py,
emulator/experiments/drill/agent.py): the arithmetic on a hand-worked push, the
repair the controller's policy computes offline, the calibration from the ideal
agent's repeats, and the measured-against-predicted report."""

import pytest

from emulator.experiments.drill import agent as drill_agent
from emulator.experiments.spec.scenario import default_fault, fault_spec
from emulator.fabric import addressing, presets
from emulator.fabric.agents import predict
from emulator.fabric.switch_agent import ADD, MODIFY, Change, Params, Table
from lab.modes import LB, Routing

CAL = predict.Calibration(detection_ms=5.0, compute_ms=1.0, send_ms=0.5, barrier_ms=0.5,
                          tail_ms=2.0, repeats=3)
P = Params(latency_ms=1.0, processing_ms=0.5, table_rate=100.0, event_ms=10.0,
           modify_factor=2.0)


def group(op, gid):
    return Change(op, None, 0, ("group", gid))


def test_the_push_waits_each_switch_then_its_barrier_one_after_another():
    repair = {1: [group(MODIFY, 1)], 2: [group(ADD, 2), group(MODIFY, 3)]}
    # sent at 0: switch 1 busy until 1 + 0.5 + 20 = 21.5; switch 2 until
    # 1 + (0.5 + 10) + (0.5 + 20) = 32.  Barrier 1 sent at 0, reaches switch 1 at 1,
    # answered at 22, its reply 0.5 (Open vSwitch) + 1 later: 23.5.  Barrier 2
    # reaches switch 2 at 24.5, answered at 32.5, reply at 34.
    assert predict.push_ms({1: P, 2: P}, repair, {}, CAL, 64) == pytest.approx(34.0)
    # the ideal agent: only Open vSwitch's half millisecond per switch
    assert predict.push_ms({}, repair, {}, CAL, 64) == pytest.approx(1.0)


def test_an_insertion_pays_for_what_the_table_held_before_the_fault():
    tilted = Params(table_rate=1000.0, shift_ms=1.0)
    before = predict.occupancy([Change(ADD, 0, p, (0, p, 0)) for p in (10, 20, 30)])
    repair = {1: [Change(ADD, 0, 25, (0, 25, 1))]}         # moves the 10 and the 20
    full = predict.push_ms({1: tilted}, repair, {1: before}, CAL, 64)
    empty = predict.push_ms({1: tilted}, repair, {1: Table()}, CAL, 64)
    assert full - empty == pytest.approx(2.0)
    assert len(before) == 3                                 # copied, not changed


def test_the_convergence_adds_the_calibrated_parts_to_the_models():
    repair = {1: [group(MODIFY, 1)]}
    p = predict.convergence({1: P}, repair, {}, CAL, [P, Params(event_ms=3.0)], 64)
    # the first to tell: the end the model delays least (3 ms, no channel)
    assert p["port_event_ms"] == 3.0
    push_done = 5.0 + 3.0 + 1.0 + predict.push_ms({1: P}, repair, {}, CAL, 64, 0.0, 0.5)
    assert p["predicted_ms"] == pytest.approx(push_done + 2.0)
    assert (p["switches"], p["changes"], p["max_changes"]) == (1, 1, 1)
    # a bundle adds its open and commit, each handled
    assert predict.wire_messages(70, 64) == 72 and predict.wire_messages(3, 64) == 3


def test_the_calibration_is_the_median_of_the_ideal_agents_repeats():
    reps = [{"controller": {"first_port_status_ms": d, "compute_ms": 1.0, "send_ms": 0.4,
                            "barrier_ms": 5.0 * b, "touched": 5, "convergence_ms": c,
                            "push_done_ms": c - t}}
            for d, b, c, t in ((4.0, 1.0, 20.0, 1.0), (6.0, 2.0, 22.0, 0.0),
                               (5.0, 3.0, 21.0, 3.0))]
    reps.append({"controller": None})                   # a repeat without a repair
    cal = drill_agent.calibration_of(reps)
    assert (cal.detection_ms, cal.barrier_ms, cal.tail_ms, cal.repeats) == (5.0, 2.0, 1.0, 3)
    assert drill_agent.calibration_of([{"controller": None}]) is None


def default_drill():
    topo = addressing.plan(presets.build("leaf-spine", {}))
    return topo, fault_spec(default_fault(topo), at_s=0.5, hold_s=1.0)


def test_the_repair_is_the_controllers_policy_computed_offline():
    topo, events = default_drill()
    rep = drill_agent.offline_repair(topo, events, LB.default(), "controller", Routing.default())
    leaf1, spine1 = 0x10001, 0x20001
    assert rep["ends"] == [leaf1, spine1]
    # the cut leaf re-hashes its 3 remote destinations, every other leaf its route to
    # the cut leaf; the spine's route to leaf1 changes (its flows and a group)
    assert {d: len(c) for d, c in rep["repair"].items()} == \
        {leaf1: 3, 0x10002: 1, 0x10003: 1, 0x10004: 1, spine1: 3}
    assert rep["tables"][leaf1] and len(rep["tables"][leaf1]) > 10
    ff = drill_agent.offline_repair(topo, events, LB.default(), "fast-failover",
                                    Routing.default())
    assert sum(map(len, ff["repair"].values())) > sum(map(len, rep["repair"].values()))
    assert "not a link cut" in drill_agent.offline_repair(
        topo, fault_spec("spine1:crash", at_s=0.5, hold_s=1.0), LB.default(), "controller",
        Routing.default())
    assert "none" in drill_agent.offline_repair(topo, events, LB.default(), "none",
                                                Routing.default())


def test_the_report_sets_the_median_against_the_prediction():
    predicted = {"predicted_ms": 40.0}
    reps = [{"switch_agent": {"measured_ms": m}} for m in (38.0, 44.0, 52.0)]
    s = drill_agent.summary(reps + [{"switch_agent": None}], predicted)
    assert s["measured_ms"] == 44.0 and s["error"] == pytest.approx(0.1) and s["within"]
    far = drill_agent.summary([{"switch_agent": {"measured_ms": 60.0}}], predicted)
    assert not far["within"]
    text = drill_agent.text(P, [{"mode": "controller", "switch_agent_summary": s}])
    assert "40.0" in text and "44.0" in text and "+10.0%" in text and "within" in text
    assert drill_agent.text(None, [{"mode": "controller", "switch_agent_summary": s}]) == ""
    line = drill_agent.prediction_line("controller", {"none": "failover none"})
    assert "no prediction (failover none)" in line
