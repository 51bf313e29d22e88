"""The routing policy on every Clos preset (fake switches, no root).

Every pair of host ports in the same switch island is delivered on shortest
paths, before and after any single link cut (global repair); dual-link
active/standby keeps the standby links idle until the primary fails.
"""

import itertools

import pytest

from controller import policy, topology
from controller.fakeswitch import fabric_with_policy as fabric_for
from controller.fakeswitch import udp_packet as udp
from controller.messages import Group, Output
from emulator import addressing, presets

SMALL = [("three-tier", {}), ("three-tier", {"superspine_attach": "all", "superspines": "2"}),
         ("dual-link", {}), ("dual-link", {"spines": "1", "mode": "active-standby"}),
         ("dual-link", {"mode": "active-standby"}), ("dual-plane", {"leaves": "3"}),
         ("multi-plane", {})]


def topo_of(name, params):
    return topology.from_dict(addressing.plan(presets.build(name, params), "ab12"))






def same_island_pairs(topo):
    """Host-port pairs whose switches are connected (multi-plane: same rail)."""
    import networkx as nx
    comp = {d: i for i, c in enumerate(nx.connected_components(topo.graph)) for d in c}
    return [(a, b) for a, b in itertools.permutations(topo.host_ports, 2)
            if a.host != b.host and comp[a.dpid] == comp[b.dpid]]


def delivered(topo, fab, pairs, used=None):
    for src, dst in pairs:
        for sport in (49152, 49153, 49170, 50001):
            for hops, end in fab.paths(src, udp(src, dst, sport), max_hops=64):
                if end[0] == "drop" or end[1] != dst:
                    return False
                if used is not None:
                    used.update((dp, o) for dp, _, o in hops)
    return True


@pytest.mark.parametrize("name,params", SMALL, ids=[f"{n}{p}" for n, p in SMALL])
def test_every_pair_delivered_before_and_after_any_single_cut(name, params):
    topo = topo_of(name, params)
    live = topo.all_ports()
    pairs = same_island_pairs(topo)
    assert pairs
    assert delivered(topo, fabric_for(topo, live, "controller"), pairs)
    for lk in topo.links:
        new = live - {(lk.a_dpid, lk.a_port), (lk.b_dpid, lk.b_port)}
        fab = fabric_for(topo, live, "controller")
        fab.apply(policy.changes(topo, live, new, "controller"))
        fab.set_live(new)
        assert delivered(topo, fab, pairs), (name, lk)


def standby_ports(topo):
    return {(s.dpid, p.port) for s in topo.switches for p in s.ports if p.role == "standby"}


@pytest.mark.parametrize("spines", ["1", "2"])
def test_active_standby_idle_standby_then_local_failover(spines):
    topo = topo_of("dual-link", {"spines": spines, "mode": "active-standby"})
    live = topo.all_ports()
    pairs = same_island_pairs(topo)
    spare = standby_ports(topo)
    assert len(spare) == 4
    used = set()
    assert delivered(topo, fabric_for(topo, live, "controller"), pairs, used)
    assert not used & spare, "standby links carried traffic with the primary up"
    leaf1 = topo.by_name["leaf1"]
    primary = next(p for p in leaf1.ports if p.peer_kind == "spine" and p.role is None)
    cut = {(leaf1.dpid, primary.port), topo.peer_of(leaf1.dpid, primary.port)}
    # local repair: the installed groups alone, no controller.  With one spine
    # both sides have an FF [primary, standby]; with two, spine1 cannot reach
    # leaf1 any more: only fast-failover's bounce (via leaf2's standby) helps.
    local = ("controller", "fast-failover") if spines == "1" else ("fast-failover",)
    for mode in local:
        fab = fabric_for(topo, live, mode)
        fab.set_live(live - cut)
        used = set()
        assert delivered(topo, fab, pairs, used), mode
        assert used & spare
    fab = fabric_for(topo, live, "controller")     # global repair
    fab.apply(policy.changes(topo, live, live - cut, "controller"))
    fab.set_live(live - cut)
    assert delivered(topo, fab, pairs)
    fab = fabric_for(topo, live, "none")
    fab.set_live(live - cut)
    assert not delivered(topo, fab, pairs)


def test_active_standby_groups_and_load_balancing_select():
    topo = topo_of("dual-link", {"spines": "1", "mode": "active-standby"})
    leaf1 = topo.by_name["leaf1"]
    remote = next(hp for hp in topo.host_ports if hp.switch == "leaf2")
    st = policy.desired_state(topo, topo.all_ports(), "controller")[leaf1.dpid]
    flow = next(f for f in st.flows if dict(f.match).get("ipv4_dst") == remote.ip)
    (act,) = flow.actions
    g = next(g for g in st.groups if g.group_id == act.group_id)
    assert g.type == "ff" and [b.watch_port for b in g.buckets] == [3, 4]
    st_none = policy.desired_state(topo, topo.all_ports(), "none")[leaf1.dpid]
    flow = next(f for f in st_none.flows if dict(f.match).get("ipv4_dst") == remote.ip)
    assert flow.actions == (Output(3),)
    # primary down: the controller's routes move to the standby port
    st_cut = policy.desired_state(topo, topo.all_ports() - {(leaf1.dpid, 3)}, "controller")
    flow = next(f for f in st_cut[leaf1.dpid].flows
                if dict(f.match).get("ipv4_dst") == remote.ip)
    assert flow.actions == (Output(4),)
    lb = topo_of("dual-link", {"spines": "1"})
    st = policy.desired_state(lb, lb.all_ports(), "controller")[leaf1.dpid]
    flow = next(f for f in st.flows if dict(f.match).get("ipv4_dst") == remote.ip)
    assert isinstance(flow.actions[0], Group)
    g = next(g for g in st.groups if g.group_id == flow.actions[0].group_id)
    assert g.type == "select" and [b.watch_port for b in g.buckets] == [3, 4]


def test_three_tier_ecmp_at_every_tier():
    topo = topo_of("three-tier", {})
    st = policy.desired_state(topo, topo.all_ports(), "controller")
    far = next(hp for hp in topo.host_ports if hp.switch == "leaf4")     # pod 2
    for name, width in (("leaf1", 2), ("spine1", 2)):   # 2 spines; 2 super-spines of plane 1
        sw = topo.by_name[name]
        flow = next(f for f in st[sw.dpid].flows if dict(f.match).get("ipv4_dst") == far.ip)
        g = next(g for g in st[sw.dpid].groups if g.group_id == flow.actions[0].group_id)
        assert g.type == "select" and len(g.buckets) == width, name
