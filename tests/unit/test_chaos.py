"""The chaos soak's pure parts (emulator/experiments/drill/chaos.py and
invariants/report.py): the draw, the events per fault, a fault's row, the table."""

import pytest

from emulator.experiments.drill import chaos as dc
from emulator.experiments.drill.invariants import report as rep
from emulator.fabric import addressing, presets

LINKS = ["leaf1-spine1", "leaf1-spine2", "leaf2-spine1", "leaf2-spine2"]
SWITCHES = ["leaf1", "leaf2", "spine1", "spine2"]


def test_the_same_seed_draws_the_same_faults_and_another_seed_others():
    a = dc.draw(7, 600, 10, 1, LINKS, SWITCHES)
    assert a == dc.draw(7, 600, 10, 1, LINKS, SWITCHES)
    assert a != dc.draw(8, 600, 10, 1, LINKS, SWITCHES)


def test_faults_come_one_at_a_time_at_about_the_mtbf_with_every_kind():
    faults = dc.draw(1, 3000, 10, 1, LINKS, SWITCHES)
    assert {f["kind"] for f in faults} == set(dc.KINDS)
    for f, nxt in zip(faults, faults[1:]):
        assert nxt["at_s"] >= f["at_s"] + f["repair_s"] - 1e-3      # never overlapping
    # inter-arrival from a repair to the next fault: exponential with mean 10 s
    gaps = [n["at_s"] - f["at_s"] - f["repair_s"] for f, n in zip(faults, faults[1:])]
    assert 8 < sum(gaps) / len(gaps) < 12
    assert all(f["repair_s"] >= dc.MIN_REPAIR_S for f in faults)
    assert all(f["at_s"] < 3000 for f in faults)
    for f in faults:
        if f["kind"] == "flap":
            assert f["repair_s"] == pytest.approx(f["params"]["count"] * 0.2)
        if f["kind"] in ("cut", "flap", "loss"):
            assert f["target"] in LINKS
        if f["kind"] == "crash":
            assert f["target"] in SWITCHES


def test_each_fault_is_injected_then_repaired():
    acts = {k: [(e.action, e.target) for e in rep.events_of(
        {"kind": k, "target": "leaf1-spine1" if k != "crash" else "spine1", "at_s": 2.0,
         "repair_s": 0.5, "params": {"count": 2, "period": 0.2} if k == "flap"
         else {"percent": 10.0}})] for k in dc.KINDS}
    assert acts["cut"] == [("cut", "leaf1-spine1"), ("restore", "leaf1-spine1")]
    assert acts["flap"] == [("flap", "leaf1-spine1")]
    assert acts["loss"] == [("loss", "leaf1-spine1"), ("loss_stop", "leaf1-spine1")]
    assert acts["crash"] == [("crash", "spine1"), ("recover", "spine1")]
    assert acts["kill"] == [("controller", "kill"), ("controller", "restart")]


def test_the_targets_are_the_inter_switch_links_and_the_switches():
    topo = addressing.plan(presets.build("leaf-spine", {"spines": 2, "leaves": 2,
                                                        "hosts_per_leaf": 1}))
    links, switches = dc.fault_targets(topo)
    assert links == LINKS and switches == SWITCHES


def test_a_fault_row_counts_the_losses_and_the_detection_in_its_window():
    t = 10_000_000_000
    recv = {"f1": {"disruptions": [{"start_ns": t + 1_000_000, "end_ns": t + 9_000_000,
                                    "skipped": 7},
                                   {"start_ns": t + 5_000_000_000, "end_ns": t + 5_1000_000,
                                    "skipped": 3}]},            # the next fault's
            "f2": {"disruptions": [{"start_ns": t + 2_000_000, "end_ns": t + 4_000_000,
                                    "skipped": 0}]}}            # a late packet, no loss
    conv = [{"event": "port", "t_event": t / 1e9 + 0.003}, {"event": "connect", "t_event": 1}]
    row = rep.fault_result({"kind": "cut", "target": "leaf1-spine1", "at_s": 1, "repair_s": 1,
                           "params": {}}, t, t + 5_000_000_000, recv, conv, {"f2"})
    assert row["lost_packets"] == 7 and row["recovery_ms"] == 9.0
    assert row["untouched_lost_packets"] == 0
    again = rep.fault_result(dict(row), t, t + 5_000_000_000, recv, conv, {"f1"})
    assert again["untouched_lost_packets"] == 7          # f1 lost, yet the fault missed it
    # a gap opened by the next fault starts with the packet just before it: that fault's
    nxt = {"start_ns": t + 5_000_000_000 - 400_000, "end_ns": t + 5_020_000_000, "skipped": 9}
    row = rep.fault_result(dict(row), t, t + 5_000_000_000, {"f3": {"disruptions": [nxt]}},
                          conv, {"f3"})
    assert row["lost_packets"] == 0 and row["untouched_lost_packets"] == 0
    assert row["repair_lost_packets"] == 0
    assert row["detection_ms"] == pytest.approx(3.0)
    chaos = {"faults": [row], "drawn": 1, "injected": 1, "interrupted": False,
             "why": {"nothing_left_behind": "an interface"},
             "totals": {"sent_packets": 100, "delivered": 0.93, "lost_packets": 7},
             "fidelity": "faithful", "invariants": {"no_emulation_drops": True,
                                                    "nothing_left_behind": False},
             "not_checked": {"reliable_qps_delivered_or_dead": "no QP"}}
    text = rep.table(chaos)
    assert "leaf1-spine1" in text
    assert "invariant nothing_left_behind: FALSE (an interface)" in text
    assert "invariant no_emulation_drops: true" in text


def test_a_skipped_sequence_that_arrived_later_is_not_a_loss():
    t = 10_000_000_000
    recv = {"f1": {"disruptions": [{"start_ns": t + 1_000_000, "end_ns": t + 3_000_000,
                                    "skipped": 12, "never_arrived": 0}]},   # overtaken
            "f2": {"disruptions": [{"start_ns": t + 1_000_000, "end_ns": t + 30_000_000,
                                    "skipped": 25, "never_arrived": 25}]}}
    row = rep.fault_result({"kind": "flap", "target": "leaf1-spine1", "at_s": 1,
                           "repair_s": 0.4, "params": {}}, t, t + 5_000_000_000, recv, [],
                          {"f1"})
    assert row["lost_packets"] == 25 and row["untouched_lost_packets"] == 0
    assert row["recovery_ms"] == 30.0


def test_the_probe_sender_catches_up_within_half_of_its_host_links_queue():
    host = {"ports": [{"rate_bps": 40_000_000}]}
    pairs = [(host, None, 0, (1, 2, 3, 4))]
    # 150 KB queue (30 ms at 40 Mbit/s), 4 flows x 1 kpps x 128 B = 512 B per ms
    assert dc.catch_up_ms(None, pairs, 1000, 128, 30.0) == pytest.approx(146.5, 0.01)
    assert dc.catch_up_ms(None, pairs, 1000, 128, 300.0) == dc.MAX_LAG_MS[1]      # capped
    assert dc.catch_up_ms(None, pairs, 20000, 1024, 30.0) == dc.MAX_LAG_MS[0]     # floor


def test_an_untouched_flows_loss_is_the_networks_only_on_a_lossy_fabric_with_a_queue_drop():
    t = 10_000_000_000
    gap = {"start_ns": t + 1_000_000, "end_ns": t + 9_000_000, "skipped": 5,
           "never_arrived": 5}
    recv = {"f1": {"disruptions": [gap]}, "f2": {"disruptions": [dict(gap)]}}
    fault = {"kind": "cut", "target": "leaf1-spine1", "at_s": 1, "repair_s": 1, "params": {}}
    untouched = {"f1": ["h1->leaf1", "leaf1->spine2", "spine2->leaf2"],
                 "f2": ["h3->leaf2", "leaf2->spine3", "spine3->leaf1"]}
    drops = {"spine2->leaf2": 4, "leaf1->spine1": 9}      # the second one: the fault's link
    end = t + 5_000_000_000
    lossy = rep.fault_result(fault, t, end, recv, [], untouched, queue_drops=drops,
                            lossless=False)
    assert lossy["untouched_queue_lost_packets"] == 5     # f1: its path's queue dropped
    assert lossy["untouched_lost_packets"] == 5           # f2: no queue of its path did
    assert lossy["queue_drops"] == {"leaf1->spine1": 9, "spine2->leaf2": 4}
    strict = rep.fault_result(fault, t, end, recv, [], untouched, queue_drops=drops,
                             lossless=True)
    assert strict["untouched_lost_packets"] == 10 and strict["untouched_queue_lost_packets"] == 0


def test_a_path_names_the_links_whose_queues_it_crosses_and_windows_count_their_drops():
    from emulator.dataplane.observe.counters import link_names, window_drops
    from emulator.experiments.measure.paths import path_links
    topo = addressing.plan(presets.build("leaf-spine", {"spines": 2, "leaves": 2,
                                                        "hosts_per_leaf": 1}))
    leaf1 = next(s for s in topo["switches"] if s["name"] == "leaf1")
    up = next(p for p in leaf1["ports"] if p["peer"] == "spine2")
    spine2 = next(s for s in topo["switches"] if s["name"] == "spine2")
    down = next(p for p in spine2["ports"] if p["peer"] == "leaf2")
    path = ["h1:eth0", f"leaf1:{up['name']}", f"spine2:{down['name']}", "leaf2:eth1", "h2"]
    assert path_links(path, topo) == ["h1->leaf1", "leaf1->spine2", "spine2->leaf2",
                                      "leaf2->h2"]
    names = link_names(topo)
    r0 = {up["intf"]: (0, 3, 0), down["intf"]: (0, 0, 0)}
    r1 = {up["intf"]: (0, 3, 0), down["intf"]: (0, 2, 0), "h1:eth0": (0, 1, 0)}
    r2 = {up["intf"]: (0, 7, 0), down["intf"]: (0, 2, 0), "h1:eth0": (0, 1, 0)}
    assert window_drops([r0, r1, r2], names) == [{"spine2->leaf2": 2, "h1->leaf1": 1},
                                                 {"leaf1->spine2": 4}]


def test_open_vswitch_drops_are_a_fault_s_only_in_the_window_it_took_their_link_down():
    from emulator.dataplane.observe.counters import fault_window_ovs_drops, late_faulted
    names = {"e1": "leaf1->spine1", "e2": "leaf2->spine2"}
    # (socket drops, (rx, tx) drops) at each fault's start and at the end
    r0 = ({"e1": 1}, {"e1": (0, 0)})
    r1 = ({"e1": 4, "e2": 2}, {"e1": (0, 10), "e2": (0, 1)})
    r2 = ({"e1": 6, "e2": 2}, {"e1": (0, 13), "e2": (0, 9)})
    faulted = [{"leaf1->spine1", "spine1->leaf1"}, {"leaf2->spine2"}]
    assert fault_window_ovs_drops([r0, r1, r2], faulted, names) == {
        "ovs_socket_drops": {"leaf1->spine1": 3},        # e1's 2 in fault 2's window: not its
        "ovs_tx_drops": {"leaf1->spine1": 10, "leaf2->spine2": 8}}
    # the database's tx counter lags up to 5 s: fault 1 (0-1 s) still owns e1's tx drops
    # seen in fault 2's window from 4 s, not in one from 7 s; the live socket counter never
    assert late_faulted([0.0, 4.0], [1.0, 1.0], faulted) == [faulted[0], faulted[0] | faulted[1]]
    assert late_faulted([0.0, 7.0], [1.0, 1.0], faulted) == faulted
    late = fault_window_ovs_drops([r0, r1, r2], faulted, names,
                                  late_faulted([0.0, 4.0], [1.0, 1.0], faulted))
    assert late == {"ovs_socket_drops": {"leaf1->spine1": 3},
                    "ovs_tx_drops": {"leaf1->spine1": 13, "leaf2->spine2": 8}}


def test_a_flow_is_touched_by_a_fault_on_any_of_its_equal_cost_paths():
    from emulator.experiments.measure.paths import crosses, ecmp_span
    topo = addressing.plan(presets.build("leaf-spine", {"spines": 2, "leaves": 3,
                                                        "hosts_per_leaf": 1}))
    sw = {s["name"]: s for s in topo["switches"]}
    port = {(s, p["peer"]): p["name"] for s in sw for p in sw[s]["ports"]}
    traced = ["h1:eth0", f"leaf1:{port['leaf1', 'spine1']}",
              f"spine1:{port['spine1', 'leaf2']}", f"leaf2:{port['leaf2', 'h2']}", "h2"]
    span = ecmp_span(traced, topo)
    assert set(traced) <= set(span)
    assert f"leaf1:{port['leaf1', 'spine2']}" in span and f"spine2:{port['spine2', 'leaf2']}" in span
    assert not any(h.startswith("leaf3:") for h in span)
    fault = {"kind": "cut", "target": "leaf1-spine2", "at_s": 1, "repair_s": 1, "params": {}}
    assert not crosses(traced, rep.events_of(fault), topo)      # not on the traced path ...
    assert crosses(span, rep.events_of(fault), topo)            # ... but the repair moves it
    other = dict(fault, target="leaf3-spine2")
    assert not crosses(span, rep.events_of(other), topo)
    assert ecmp_span(traced[:3], topo) == traced[:3]           # a trace that ended in a drop


def test_a_gap_opened_by_packets_in_flight_belongs_to_the_fault_that_struck_them():
    assert rep.lead_ns(1000) == 1e6 + rep.JITTER_NS
    assert rep.lead_ns(1000, 16.2) == pytest.approx(1e6 + 16.2e6)
    t, nxt = 10_000_000_000, 35_875_000_000
    # the last packet before a crash's gap arrived 8.9 ms before the crash was recorded
    recv = {"f1": {"disruptions": [{"start_ns": nxt - 8_900_000, "end_ns": nxt + 57_000_000,
                                    "skipped": 32, "never_arrived": 32}]}}
    flap = {"kind": "flap", "target": "leaf4-spine1", "at_s": 1, "repair_s": 1, "params": {}}
    late = rep.fault_result(flap, t, nxt, recv, [], {"f1": []}, rep.lead_ns(1000))
    assert late["untouched_lost_packets"] == 32                 # a 5 ms allowance: wrong fault
    row = rep.fault_result(flap, t, nxt, recv, [], {"f1": []}, rep.lead_ns(1000, 16.2))
    assert row["untouched_lost_packets"] == 0 and row["lost_packets"] == 0
