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
from emulator.fabric import addressing, presets

SMALL = [("three-tier", {}), ("three-tier", {"superspine_attach": "all", "superspines": "2"}),
         ("dual-link", {}), ("dual-link", {"spines": "1", "mode": "active-standby"}),
         ("dual-link", {"mode": "active-standby"}), ("dual-plane", {"tor_pairs": "3"}),
         ("dual-plane", {"planes": "1"}), ("dual-tor", {"mode": "active-standby"}),
         ("multi-plane", {})]
# presets where losing any one switch that is not a host's NIC leaves every
# host that is not cabled to it reachable
SWITCH_LOSS = [("three-tier", {}), ("dual-link", {}), ("dual-plane", {}),
               ("dual-tor", {"mode": "active-standby"}), ("dual-tor", {})]


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


@pytest.mark.parametrize("name,params", SWITCH_LOSS, ids=[f"{n}{p}" for n, p in SWITCH_LOSS])
def test_every_pair_delivered_after_any_single_switch_loss(name, params):
    topo = topo_of(name, params)
    live = topo.all_ports()
    for sw in topo.switches:
        if sw.kind == "nic":
            continue
        new = live - {(sw.dpid, p.port) for p in sw.ports} - {
            topo.peer_of(sw.dpid, p.port) for p in sw.ports if not p.to_host}
        pairs = [(a, b) for a, b in same_island_pairs(topo) if sw.dpid not in (a.dpid, b.dpid)]
        assert pairs
        fab = fabric_for(topo, live, "controller")
        fab.apply(policy.changes(topo, live, new, "controller"))
        fab.set_live(new)
        assert delivered(topo, fab, pairs), (name, sw.name)


def bonded(topo, host):
    nic = topo.by_name[f"{host}.nic"]
    hp = next(hp for hp in topo.host_ports if hp.host == host)
    return nic, hp


@pytest.mark.parametrize("mode", ["active-standby", "active-active"])
def test_dual_tor_host_link_loss_switches_over_locally(mode):
    topo = topo_of("dual-tor", {"mode": mode})
    live = topo.all_ports()
    pairs = same_island_pairs(topo)
    spare = standby_ports(topo)
    used = set()
    assert delivered(topo, fabric_for(topo, live, "controller"), pairs, used)
    if mode == "active-standby":
        assert len(spare) == 8 and not used & spare, "standby NIC links carried traffic"
    else:
        assert not spare
    nic, _ = bonded(topo, "h1")
    primary = nic.port(2)                                  # NIC port eth0 -> leaf1
    cut = {(nic.dpid, 2), topo.peer_of(nic.dpid, 2)}
    # groups alone (no controller): the NIC's group leaves the dead port, and
    # fast-failover's bounce (leaf1 -> spine -> leaf2 -> NIC) brings traffic in
    fab = fabric_for(topo, live, "fast-failover")
    fab.set_live(live - cut)
    used = set()
    assert delivered(topo, fab, pairs, used)
    assert (nic.dpid, 3) in used and primary.peer == "leaf1"
    # controller mode, groups alone: h1 still sends; traffic TO h1 hashed to
    # leaf1 waits for the controller
    fab = fabric_for(topo, live, "controller")
    fab.set_live(live - cut)
    h1 = bonded(topo, "h1")[1]
    assert delivered(topo, fab, [(h1, b) for a, b in pairs if a == h1])
    assert not delivered(topo, fab, [(a, h1) for a, b in pairs if b == h1])
    fab.apply(policy.changes(topo, live, live - cut, "controller"))
    assert delivered(topo, fab, pairs)


def test_dual_plane_spines_have_one_path_single_plane_hashes_twice():
    dual = topo_of("dual-plane", {})
    single = topo_of("dual-plane", {"planes": "1", "oversubscription": "1"})
    for topo, width in ((dual, 1), (single, 2)):
        st = policy.desired_state(topo, topo.all_ports(), "controller")
        spine = topo.by_name["spine1"]
        for hp in topo.host_ports:
            flow = next(f for f in st[spine.dpid].flows if dict(f.match).get("ipv4_dst") == hp.ip)
            act = flow.actions[0]
            n = 1 if isinstance(act, Output) else len(next(
                g for g in st[spine.dpid].groups if g.group_id == act.group_id).buckets)
            assert n == width, (topo.name, hp.host)
    # a plane-1 ToR never sends into plane 2: every leaf1 uplink is a plane-1 spine
    leaf1 = dual.by_name["leaf1"]
    assert {p.peer for p in leaf1.ports} == {"h1.nic", "h2.nic", "spine1", "spine2"}


def test_select_buckets_weighted_by_link_rate():
    topo = topo_of("dual-link", {"spines": "1", "secondary_rate": "20Mbps"})
    leaf1 = topo.by_name["leaf1"]
    st = policy.desired_state(topo, topo.all_ports(), "controller")[leaf1.dpid]
    (g,) = [g for g in st.groups if g.type == "select"]
    assert [(b.watch_port, b.weight) for b in g.buckets] == [(3, 2), (4, 1)]
    even = topo_of("dual-link", {"spines": "1"})
    st = policy.desired_state(even, even.all_ports(), "controller")[leaf1.dpid]
    assert {b.weight for g in st.groups for b in g.buckets} == {1}


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
