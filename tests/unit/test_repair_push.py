"""The controller's repair push after one cut: groups modified in place, flows left alone.

A push sends every switch ``policy.diff(installed, desired)`` (the
``sent`` count of its CONVERGED line; both ends of a cut share one push),
which is ``policy.changes`` between the two liveness sets.  Group ids name a
destination switch and a purpose (``controller.groups``), so a cut changes
buckets under the same ids.  Flows change only where a route changes form (a
spine that lost its leaf reaches it over the other leaves: fast-failover
group -> select group) and where repair flows come and go with the bounces
they serve.
"""

import pytest

from controller import policy, topology
from controller.messages import FlowMod, Group, GroupMod
from emulator.fabric import addressing, presets


@pytest.fixture(scope="module")
def topo():
    return topology.from_dict(addressing.plan(presets.build("leaf-spine")))   # 4 x 4 x 2


def cut_of(topo, leaf, spine):
    p = next(p for p in topo.by_name[leaf].ports if p.peer == spine)
    return topo.all_ports() - {(p.dpid, p.port), topo.peer_of(p.dpid, p.port)}


def push(topo, old, new, mode):
    """[(switch name, message)] of the push from liveness ``old`` to ``new``."""
    return [(topo.by_dpid[d].name, m) for d, msgs in policy.changes(topo, old, new, mode).items()
            for m in msgs]


def kinds(msgs):
    out = {}
    for _, m in msgs:
        key = (type(m).__name__, m.command)
        out[key] = out.get(key, 0) + 1
    return out


@pytest.mark.parametrize("direction", ["cut", "restore"])
def test_fast_failover_repair_push_modifies_groups_and_leaves_flows_alone(topo, direction):
    live, cut = topo.all_ports(), cut_of(topo, "leaf1", "spine1")
    old, new = (live, cut) if direction == "cut" else (cut, live)
    msgs = push(topo, old, new, "fast-failover")
    k = kinds(msgs)
    leaf1_hosts = {hp.ip for hp in topo.host_ports if hp.switch == "leaf1"}
    # the only flows rewritten: spine1's routes toward leaf1 (a group of another type)
    moved = [(sw, m) for sw, m in msgs if isinstance(m, FlowMod) and m.command == "modify"]
    assert {(sw, dict(m.match).get("ipv4_dst")) for sw, m in moved} == \
        {("spine1", ip) for ip in leaf1_hosts}
    # flows that come and go: repair flows only (bounces through the cut link)
    came_went = [m for _, m in msgs if isinstance(m, FlowMod) and m.command != "modify"]
    assert all(m.priority == policy.PRIO_REPAIR for m in came_went)
    assert len(came_went) <= 12
    # the rest: groups, mostly modified in place
    groups = [m for _, m in msgs if isinstance(m, GroupMod)]
    assert k[("GroupMod", "modify")] >= 20
    assert k[("GroupMod", "modify")] > len(groups) - k[("GroupMod", "modify")] + len(moved)
    assert len(msgs) <= 50         # 92 when ids were derived from the bucket sets


def test_controller_mode_repair_push_is_group_modifies(topo):
    msgs = push(topo, topo.all_ports(), cut_of(topo, "leaf1", "spine1"), "controller")
    k = kinds(msgs)
    # leaves' ECMP groups lose spine1 in place; spine1 reaches leaf1 through a
    # new select group over the other leaves (2 routes re-pointed)
    assert k == {("GroupMod", "modify"): 6, ("GroupMod", "add"): 1, ("FlowMod", "modify"): 2}
    assert {sw for sw, m in msgs if isinstance(m, FlowMod)} == {"spine1"}


def group_types(state):
    return {g.group_id: g.type for g in state.groups}


@pytest.mark.parametrize("name,params", [("leaf-spine", {}), ("three-tier", {}),
                                         ("dual-tor", {"mode": "active-standby"}),
                                         ("dual-plane", {}),
                                         ("leaf-spine", {"spines": "3", "leaves": "12",
                                                         "hosts_per_leaf": "2"})])
def test_a_flow_moves_only_when_its_route_changes_form(name, params):
    """No flow is re-pointed from one group to another of the same type: such a
    move would mean an id followed the buckets instead of the destination."""
    topo = topology.from_dict(addressing.plan(presets.build(name, params)))
    live = topo.all_ports()
    for lk in topo.links:
        cut = live - {(lk.a_dpid, lk.a_port), (lk.b_dpid, lk.b_port)}
        for mode in ("controller", "fast-failover"):
            states = {"old": policy.desired_state(topo, live, mode),
                      "new": policy.desired_state(topo, cut, mode)}
            for dpid, old in states["old"].items():
                new = states["new"][dpid]
                was = {f.key: f.actions for f in old.flows}
                types = (group_types(old), group_types(new))
                for m in policy.diff(old, new):
                    if not (isinstance(m, FlowMod) and m.command == "modify"):
                        continue
                    a = [x for x in was[m.key] if isinstance(x, Group)]
                    b = [x for x in m.actions if isinstance(x, Group)]
                    assert not (a and b and types[0][a[0].group_id] == types[1][b[0].group_id]), \
                        (name, lk, mode, topo.by_dpid[dpid].name, m.match)
