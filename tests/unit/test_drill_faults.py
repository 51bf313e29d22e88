"""Drill flow classification and the single-failure survival model (pure, no root).

``traced.crosses`` decides which probe flows a fault touches from their traced
paths (``traced.flow_paths``: the port each node is left by); ``drill.probe_pairs``
picks the probe pairs on every rail; ``faults.fault_links`` lists every link a
fault can take and ``faults.surviving_pairs`` which host pairs keep a path.
"""

import pytest

from emulator.dataplane.faults import fault_links, parse_link, surviving_pairs
from emulator.errors import ConfigError
from emulator.experiments.drill import drill
from emulator.experiments.measure import paths as traced
from emulator.experiments.spec import scenario
from emulator.fabric import addressing, presets


def plan(name, **params):
    return addressing.plan(presets.build(name, {k: str(v) for k, v in params.items()}))


def cut(link):
    return scenario.fault_spec(link)


def crash(switch):
    return scenario.fault_spec(f"{switch}:crash")


@pytest.fixture(scope="module")
def dual_tor():
    return plan("dual-tor", tor_pairs=2, hosts_per_pair=2, mode="active-standby")


def test_a_bonded_hosts_link_is_its_nic_switchs_link(dual_tor):
    (sw, port), other = parse_link("h1-leaf1", dual_tor)
    assert (sw, port["port"], other) == ("h1.nic", 2, "leaf1")
    (sw, port), other = parse_link("leaf2-h1", dual_tor)     # seen from the ToR
    assert (sw, port["port"], port["peer_port"], other) == ("leaf2", 1, 3, "h1.nic")
    assert traced.link_ends("h1-leaf1", dual_tor) == {("h1.nic", "eth2"), ("leaf1", "eth1")}


def test_flows_through_the_cut_host_link_cross_it_both_ways(dual_tor):
    out = ["h1:bond0", "h1.nic:eth2", "leaf1:eth3", "spine1:eth2", "leaf3:eth1", "h3.nic:eth1",
           "h3"]
    back = ["h3:bond0", "h3.nic:eth2", "leaf3:eth4", "spine2:eth1", "leaf1:eth1", "h1.nic:eth1",
            "h1"]
    standby = ["h1:bond0", "h1.nic:eth3", "leaf2:eth3", "spine1:eth2", "leaf3:eth1",
               "h3.nic:eth1", "h3"]
    # h2 shares ToR A with h1, but not h1's cable
    neighbour = ["h2:bond0", "h2.nic:eth2", "leaf1:eth3", "spine1:eth2", "leaf3:eth2",
                 "h4.nic:eth1", "h4"]
    assert traced.crosses(out, cut("h1-leaf1"), dual_tor)
    assert traced.crosses(back, cut("h1-leaf1"), dual_tor)
    assert not traced.crosses(standby, cut("h1-leaf1"), dual_tor)
    assert not traced.crosses(neighbour, cut("h1-leaf1"), dual_tor)
    # the same link named from the ToR's side
    assert traced.crosses(back, cut("leaf1-h1"), dual_tor)
    # a ToR crash takes every flow through the ToR, and only those
    assert traced.crosses(neighbour, crash("leaf1"), dual_tor)
    assert not traced.crosses(standby, crash("leaf1"), dual_tor)
    assert traced.crosses(standby, crash("leaf2"), dual_tor)
    assert not traced.crosses(out, cut("controller"), dual_tor)


def test_a_plain_hosts_link_is_crossed_by_its_first_and_last_hop():
    topo = plan("leaf-spine", spines=2, leaves=2, hosts_per_leaf=2)
    h1_out = ["h1:eth0", "leaf1:eth3", "spine1:eth2", "leaf2:eth1", "h3"]
    h1_in = ["h3:eth0", "leaf2:eth4", "spine2:eth1", "leaf1:eth1", "h1"]
    h2_out = ["h2:eth0", "leaf1:eth3", "spine1:eth2", "leaf2:eth2", "h4"]
    for link in ("h1-leaf1", "leaf1-h1"):
        assert traced.crosses(h1_out, cut(link), topo)
        assert traced.crosses(h1_in, cut(link), topo)
        assert not traced.crosses(h2_out, cut(link), topo)
    assert traced.crosses(h2_out, cut("leaf1-spine1"), topo)
    assert traced.crosses(h1_in, cut("spine2-leaf1"), topo)
    assert not traced.crosses(h1_in, cut("leaf1-spine1"), topo)


def test_parallel_links_are_told_apart_by_port():
    topo = plan("dual-link", spines=1, leaves=2, hosts_per_leaf=1)
    primary = ["h1:eth0", "leaf1:eth2", "spine1:eth3", "leaf2:eth1", "h2"]
    secondary = ["h1:eth0", "leaf1:eth3", "spine1:eth3", "leaf2:eth1", "h2"]
    assert traced.crosses(primary, cut("leaf1-spine1"), topo)   # the first link: the primary
    assert not traced.crosses(secondary, cut("leaf1-spine1"), topo)
    links = dict(fault_links(topo))
    assert sorted(links) == ["h1-leaf1", "h2-leaf2", "leaf1-spine1", "leaf1-spine1#2",
                             "leaf2-spine1", "leaf2-spine1#2"]
    ((_, p1), _), ((_, p2), _) = links["leaf1-spine1"], links["leaf1-spine1#2"]
    assert (p1["name"], p2["name"]) == ("eth2", "eth3")
    events = [scenario.Event(0, "cut", links["leaf1-spine1#2"])]
    assert traced.crosses(secondary, events, topo) and not traced.crosses(primary, events, topo)


def test_probe_pairs_run_on_every_rail_of_a_multi_plane_fabric():
    topo = plan("multi-plane", planes=2, spines_per_plane=2, leaves_per_plane=2,
                hosts_per_leaf=1)
    pairs = drill.probe_pairs(topo, 4)
    got = [(s["name"], s["ports"][0]["port"], s["ports"][0]["switch"],
            d["name"], d["ports"][0]["port"], d["ports"][0]["switch"]) for s, d, _, _ in pairs]
    assert got == [("h1", "eth0", "leaf1", "h2", "eth0", "leaf2"),
                   ("h2", "eth0", "leaf2", "h1", "eth0", "leaf1"),
                   ("h1", "eth1", "leaf3", "h2", "eth1", "leaf4"),
                   ("h2", "eth1", "leaf4", "h1", "eth1", "leaf3")]
    for s, d, _, _ in pairs:        # a view's address is its rail's
        assert (s["ip"], d["mac"]) == (s["ports"][0]["ip"], d["ports"][0]["mac"])
    assert [(f, q[0], len(q)) for _, _, f, q in pairs] == [
        (0, 0x100, 4), (4, 0x104, 4), (8, 0x108, 4), (12, 0x10c, 4)]
    per_leaf = drill.probe_pairs(topo, 1, per_leaf=True)
    assert [s["ports"][0]["switch"] for s, _, _, _ in per_leaf] == ["leaf1", "leaf2", "leaf3",
                                                                    "leaf4"]
    rail2 = drill.probe_pairs(topo, 4, rails={2})
    assert [s["ports"][0]["switch"] for s, _, _, _ in rail2] == ["leaf3", "leaf4"]
    with pytest.raises(ConfigError, match="rail 3"):
        drill.probe_pairs(topo, 4, rails={3})
    assert drill.parse_rails("all") is None and drill.parse_rails("1,2") == {1, 2}
    with pytest.raises(ConfigError):
        drill.parse_rails("0")


def test_probe_pairs_of_bonded_hosts_pair_by_first_tor(dual_tor):
    pairs = drill.probe_pairs(dual_tor, 2)
    assert [(s["name"], d["name"]) for s, d, _, _ in pairs] == [
        ("h1", "h3"), ("h2", "h4"), ("h3", "h1"), ("h4", "h2")]
    assert all(s["ports"][0]["port"] == "bond0" for s, _, _, _ in pairs)


def test_fault_links_of_a_dual_tor_fabric(dual_tor):
    names = [n for n, _ in fault_links(dual_tor)]
    assert len(names) == len(set(names)) == 8 + 8     # uplinks + NIC-to-ToR links
    assert {"h1-leaf1", "h1-leaf2", "h4-leaf4", "leaf4-spine2"} <= set(names)
    assert not any("bond0" in n or ".nic" in n for n in names)
    for name, link in fault_links(dual_tor):          # same link as its name says
        assert parse_link(name, dual_tor)[0][1]["intf"] == link[0][1]["intf"]


def pairs_to(topo, host):
    ips = {p["ip"] for h in topo["hosts"] if h["name"] == host for p in h["ports"]}
    return {(s, ip) for s, ip in surviving_pairs(topo) if ip in ips or s == host}


def test_dual_homed_hosts_survive_any_single_failure(dual_tor):
    every = surviving_pairs(dual_tor)
    assert len(every) == 12
    for _, ((sw, p), _) in fault_links(dual_tor):
        assert surviving_pairs(dual_tor, dead_links={(sw, p["port"])}) == every
    for sw in ("leaf1", "leaf2", "spine1", "spine2"):
        assert surviving_pairs(dual_tor, dead_switches={sw}) == every


def test_a_nic_switch_is_never_transit(dual_tor):
    # leaf1 cut off from the spines and h1's ToR-B cable gone: h1 still shares
    # leaf1 with h2, but leaf1 -> h2.nic -> leaf2 -> spines would be transit
    # through h2's NIC: h1 reaches h2 only.
    dead = {("leaf1", 3), ("leaf1", 4), ("h1.nic", 3)}
    left = surviving_pairs(dual_tor, dead_links=dead)
    assert ("h1", "10.0.0.2") in left and ("h2", "10.0.0.1") in left
    assert not {("h1", "10.0.0.3"), ("h3", "10.0.0.1"), ("h1", "10.0.0.4")} & left
    assert ("h2", "10.0.0.3") in left                  # h2 still has ToR B


def test_single_homed_hosts_drop_out_with_their_link_or_leaf():
    topo = plan("leaf-spine", spines=2, leaves=2, hosts_per_leaf=1)
    every = surviving_pairs(topo)
    assert every == {("h1", "10.0.0.2"), ("h2", "10.0.0.1")}
    assert surviving_pairs(topo, dead_links={("leaf1", 1)}) == set()
    assert surviving_pairs(topo, dead_switches={"leaf2"}) == set()
    assert surviving_pairs(topo, dead_switches={"spine1"}) == every
    assert surviving_pairs(topo, dead_links={("spine2", 1)}) == every   # either end names it


def test_a_rail_failure_loses_only_that_rails_addresses():
    topo = plan("multi-plane", planes=2, spines_per_plane=2, leaves_per_plane=2,
                hosts_per_leaf=1)
    every = surviving_pairs(topo)
    assert len(every) == 4
    h1 = {h["name"]: h for h in topo["hosts"]}["h1"]
    h2 = {h["name"]: h for h in topo["hosts"]}["h2"]
    rail2 = {("h1", h2["ports"][1]["ip"]), ("h2", h1["ports"][1]["ip"])}
    assert surviving_pairs(topo, dead_switches={"leaf3"}) == every - rail2
    assert surviving_pairs(topo, dead_switches={"spine3"}) == every
    assert surviving_pairs(topo, dead_links={("leaf4", 1)}) == every - rail2
    assert surviving_pairs(topo, dead_links={("leaf1", 1)}) == rail2


def test_dual_plane_survives_a_whole_plane():
    topo = plan("dual-plane", tor_pairs=2, hosts_per_pair=1, spines=2)
    every = surviving_pairs(topo)
    assert surviving_pairs(topo, dead_switches={"spine1"}) == every
    assert surviving_pairs(topo, dead_switches={"spine1", "spine2"}) == set()
    assert pairs_to(topo, "h1") == every


@pytest.mark.parametrize("preset,params,link", [
    ("leaf-spine", {}, "leaf1-spine1"),
    ("dual-tor", {"tor_pairs": 2}, "leaf1-spine1"),
    ("three-tier", {}, "leaf1-spine1"),
])
def test_a_drill_without_a_fault_cuts_the_first_uplink_of_the_first_leaf(preset, params, link):
    import argparse
    topo = plan(preset, **params)
    assert scenario.default_fault(topo) == link
    p = argparse.ArgumentParser()
    drill.add_arguments(p)
    said = []
    events = drill.schedule_from(p.parse_args([]), topo, said.append)
    assert [(e.action, e.target) for e in events] == [("cut", link), ("restore", link)]
    assert link in said[0] and "first uplink" in said[0]


def test_a_drill_takes_a_fault_or_a_scenario_not_both():
    import argparse
    p = argparse.ArgumentParser()
    drill.add_arguments(p)
    with pytest.raises(ConfigError) as e:
        drill.schedule_from(p.parse_args(["--fault", "leaf1-spine1", "--scenario", "x.yaml"]),
                            plan("leaf-spine"))
    assert "not both" in str(e.value)


def test_a_fabric_without_leaf_uplinks_has_no_default_fault():
    topo = {"switches": [{"name": "s1", "kind": "spine", "ports": []}]}
    with pytest.raises(ConfigError) as e:
        scenario.default_fault(topo)
    assert "--fault" in str(e.value)


def test_collective_drill_finds_the_disturbed_call_and_judges_the_job():
    from emulator.experiments.drill.stats import collective_verdict as judge
    from emulator.experiments.drill.stats import disturbed
    from emulator.experiments.drill.stats import workload_summary as summarise
    calls = [{"t_start_ns": 0, "time_s": 1.0}, {"t_start_ns": 1_000_000_000, "time_s": 3.0},
             {"t_start_ns": 4_000_000_000, "time_s": 1.0}]
    assert disturbed(calls, 2_500_000_000) == 1
    assert disturbed(calls, 3_999_999_999 + 2) == 2        # between calls: the next one
    assert disturbed(calls, 9_000_000_000) is None

    def rank(name, times, retx=(0, 0, 0), failed=()):
        return {"name": name, "failed_qps": list(failed),
                "results": [{"t_start_ns": i * 2_000_000_000, "time_s": t,
                             "chunks_missing": 0, "chunks_corrupted": 0,
                             "transport": {"retransmitted_packets": r, "timeouts": 0,
                                           "naks_sent": 0}}
                            for i, (t, r) in enumerate(zip(times, retx))]}
    ranks = [rank("h1", [1.0, 1.5, 1.0], (0, 40, 0)), rank("h2", [1.1, 1.2, 0.9])]
    v = judge(ranks, 2_100_000_000)
    assert v["disturbed"] == 1 and v["disturbed_s"] == 1.5 and v["undisturbed_s"] == 1.1
    assert v["slowdown"] == round(1.5 / 1.1, 3) and v["retransmitted"] == 40
    assert not v["job_died"]
    dead = judge([rank("h1", [1.0, 9.0, 1.0], failed=[{"peer": "h2", "qp": 0}])],
                 2_100_000_000)
    assert dead["job_died"] and dead["failed_qps"][0]["rank"] == "h1"
    m = summarise([dict(v, fidelity="faithful"), dict(dead, fidelity="faithful")])
    assert m["jobs_died"] == 1 and m["slowdown_max"] == 9.0 and m["faithful"] == 2


def test_collective_drill_cuts_the_first_uplink_the_job_uses():
    from emulator.experiments.drill.workload import first_uplink
    from emulator.fabric import addressing, presets
    topo = addressing.plan(presets.build("leaf-spine", {"spines": "2", "leaves": "2",
                                                        "hosts_per_leaf": "1"}))
    up = {sw["name"]: [p["name"] for p in sw["ports"] if p["peer_kind"] == "spine"]
          for sw in topo["switches"] if sw["kind"] == "leaf"}
    leaf2_port = next(p for p in next(sw for sw in topo["switches"]
                                      if sw["name"] == "leaf2")["ports"]
                      if p["peer"] == "spine2")
    paths = {"a": ["h2:eth0", f"leaf2:{leaf2_port['name']}", "spine2:eth1", "leaf1:eth1", "h1"]}
    assert up and first_uplink(paths, topo) == "leaf2-spine2"
    assert first_uplink({"b": ["h1:eth0", "h1"]}, topo) is None


def test_controller_convergence_breaks_the_last_push_down():
    from emulator.experiments.measure.convergence import controller_convergence
    log = "\n".join([
        '2026-11-23 12:00:00,000 INFO controller: CONVERGED {"event": "port", "up": false, '
        '"t_event": 10.002, "t_done": 10.030, "compute_ms": 8.0, "send_ms": 3.0, '
        '"barrier_ms": 15.0, "bytes": 4096, "sent": 20}',
        '2026-11-23 12:00:00,000 INFO controller: CONVERGED {"event": "port", "up": false, '
        '"t_event": 10.004, "t_done": 10.031, "compute_ms": 1.0, "send_ms": 0.1, '
        '"barrier_ms": 0.0, "bytes": 0, "sent": 0}',
        '2026-11-23 12:00:00,000 INFO controller: CONVERGED {"event": "port", "up": true, '
        '"t_event": 11.5, "t_done": 11.6}'])
    c = controller_convergence(log, 10.0e9, 11.4e9)
    assert c["convergence_ms"] == 31.0 and c["first_port_status_ms"] == 2.0
    assert c["port_events"] == 2
    assert (c["compute_ms"], c["send_ms"], c["barrier_ms"], c["bytes"]) == (8.0, 3.0, 15.0, 4096)
