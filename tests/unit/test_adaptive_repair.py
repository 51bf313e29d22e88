"""The adaptive stage's candidates follow the control plane's repair: which
candidates a cut withdraws where, and the reading of the controller's pushes
from its log (dataplane.adaptive.repair)."""

import json

from emulator.dataplane.adaptive import model, repair
from emulator.fabric import addressing, presets


def topo(**p):
    params = {"spines": "4", "leaves": "3", "hosts_per_leaf": "1"} | p
    return addressing.plan(presets.build("leaf-spine", params))


def uplink(t, leaf, spine):
    sw = next(s for s in t["switches"] if s["name"] == leaf)
    return next(p["port"] for p in sw["ports"] if p["peer"] == spine)


def stage_of(t):
    class Stage:                     # what the follower touches of the stage
        def __init__(self):
            self.plan = model.plan(t)
            self.keys = {tp: k for k, tp in enumerate(self.plan["tracked"])}
            self.calls = []

        def set_routes(self, routes):
            self.calls.append(routes)
            return {"withdrawn": 0, "restored": 0, "routes": 0}
    return Stage()


def test_a_cut_withdraws_the_dead_spine_from_the_remote_leaves_routes_to_its_leaf():
    t = topo()
    s = stage_of(t)
    h = {x["name"]: x["ip"] for x in t["hosts"]}
    dead = {("leaf1", uplink(t, "leaf1", "spine1"))}
    r = model.repaired(t, s.plan, s.keys, dead)
    up = {leaf: {sp: uplink(t, leaf, sp) for sp in ("spine1", "spine2", "spine3", "spine4")}
          for leaf in ("leaf1", "leaf2", "leaf3")}
    assert r[("leaf2", h["h1"])] == tuple(sorted(up["leaf2"][f"spine{i}"] for i in (2, 3, 4)))
    assert r[("leaf1", h["h2"])] == tuple(sorted(up["leaf1"][f"spine{i}"] for i in (2, 3, 4)))
    # spine1 still reaches leaf3: leaf2's route to h3 keeps all four uplinks
    assert r[("leaf2", h["h3"])] == s.plan["routes"][("leaf2", h["h3"])]
    assert set(r) == set(s.plan["routes"])                 # only installed routes


def test_a_route_left_one_way_is_handed_back_to_the_controller():
    t = topo(spines="2", leaves="2")
    s = stage_of(t)
    h = {x["name"]: x["ip"] for x in t["hosts"]}
    r = model.repaired(t, s.plan, s.keys, {("spine1", 1)})     # spine1's port to leaf1
    assert r[("leaf2", h["h1"])] is None and r[("leaf1", h["h2"])] is None
    assert model.repaired(t, s.plan, s.keys, set()) == s.plan["routes"]


def converged(dpid, port, up, t_done=12.5):
    return "INFO CONVERGED " + json.dumps({"event": "port", "dpid": dpid, "port": port,
                                           "up": up, "t_done": t_done}) + "\n"


def test_the_follower_applies_port_pushes_logged_after_it_started(tmp_path):
    t = topo()
    s = stage_of(t)
    dpid = {x["name"]: x["dpid"] for x in t["switches"]}
    port = uplink(t, "leaf1", "spine1")
    log = tmp_path / "controller.log"
    log.write_text(converged(dpid["leaf2"], 5, False))        # before the start: ignored
    f = repair.RepairFollower(s, t, str(log), clock=lambda: 13_000_000_000)
    f._offset = f._size()
    with open(log, "a") as out:
        out.write('INFO CONVERGED {"event": "connect"}\n')
        out.write(converged(dpid["leaf1"], port, False)[:30])  # half written
    assert f.poll() == 0 and not s.calls
    with open(log, "a") as out:
        out.write(converged(dpid["leaf1"], port, False)[30:])
    assert f.poll() == 1
    assert f.dead == {("leaf1", port)} and len(s.calls) == 1
    assert f.events[0]["t_ns"] - f.events[0]["t_done_ns"] == 500_000_000
    with open(log, "a") as out:
        out.write(converged(dpid["leaf1"], port, True))
    assert f.poll() == 1 and f.dead == set()
    assert s.calls[-1] == model.repaired(t, s.plan, s.keys, set())


def test_parse_skips_lines_that_are_not_whole_events():
    lines = ["x CONVERGED {\"event\": \"port\"}", "CONVERGED {broken", "other"]
    assert repair.parse(lines) == [{"event": "port"}]
