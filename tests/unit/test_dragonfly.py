"""The dragonfly presets' wiring and their minimal routes (no root, fake switches)."""

import itertools
from collections import Counter

import pytest

from controller import dragonfly, policy, topology
from controller.fakeswitch import fabric_with_policy
from controller.fakeswitch import udp_packet as udp
from controller.messages import OFPP_IN_PORT, Output
from emulator.__main__ import main
from emulator.errors import ConfigError
from emulator.fabric import addressing, presets
from emulator.fabric.presets import dragonfly as presets_dragonfly


def topo_of(name, params=None):
    return topology.from_dict(addressing.plan(presets.build(name, params or {}), "ab12"))


def group_pairs(fabric):
    """Counter of (group, group) over the links between switches of different groups."""
    pod = {n.name: n.pod for n in fabric.switches}
    out = Counter()
    for lk in fabric.links:
        a, b = pod.get(lk.a.node), pod.get(lk.b.node)
        if a and b and a != b:
            out[tuple(sorted((a, b)))] += 1
    return out


def test_the_default_dragonfly_is_9_groups_of_4_routers_72_hosts():
    f = presets.build("dragonfly")
    assert (len(f.switches), len(f.hosts)) == (36, 72)
    pairs = group_pairs(f)
    assert len(pairs) == 9 * 8 // 2 and set(pairs.values()) == {1}   # one link per pair
    for sw in f.switches:
        kinds = Counter("host" if f.node(lk.other(sw.name).node).is_host
                        else "local" if f.node(lk.other(sw.name).node).pod == sw.pod
                        else "global" for lk in f.links_of(sw.name))
        assert kinds == {"host": 2, "local": 3, "global": 2}, sw.name
    # ports: hosts eth1-2, the group's routers eth3-5, global eth6-7
    assert [lk.end("g1r1").port for lk in f.links_of("g1r1")] == [f"eth{i}" for i in range(1, 8)]


def test_consecutive_wiring_port_k_of_group_i_goes_to_group_i_plus_k_plus_1():
    # group 1's router 1 holds ports 0 and 1: groups 2 and 3; router 4 ports 6, 7: groups 8, 9
    f = presets.build("dragonfly")
    peers = lambda r: [f.node(lk.other(r).node).pod for lk in f.links_of(r)   # noqa: E731
                       if lk.end(r).number >= 6]
    assert peers("g1r1") == [2, 3] and peers("g1r4") == [8, 9] and peers("g9r1") == [1, 2]
    for g in (5, 9, 11):
        for i in range(g):
            for k in range(g - 1):
                j, back = presets_dragonfly.global_peer(i, k, g)
                assert presets_dragonfly.global_peer(j, back, g) == (i, k)


def test_fewer_groups_leave_global_ports_free_and_too_many_are_refused():
    f = presets.build("dragonfly", {"groups": "5"})
    assert set(group_pairs(f).values()) == {1} and len(group_pairs(f)) == 10
    with pytest.raises(ConfigError, match="10 groups need 9 global links per group, but a "
                                          "group has 8"):
        presets.build("dragonfly", {"groups": "10"})
    with pytest.raises(ConfigError, match="a: '1' is outside 2..16"):
        presets.build("dragonfly", {"a": "1"})


def test_dragonfly_plus_spines_hold_the_global_links():
    f = presets.build("dragonfly-plus")
    assert (len(f.switches), len(f.hosts)) == (20, 20)
    assert set(group_pairs(f).values()) == {1} and len(group_pairs(f)) == 10
    for sw in f.switches:
        ups = [lk for lk in f.links_of(sw.name)
               if f.node(lk.other(sw.name).node).pod not in (None, sw.pod)]
        assert len(ups) == (2 if sw.kind == "spine" else 0), sw.name


def test_bad_parameters_exit_2_with_one_line(capsys):
    assert main(["show", "-p", "dragonfly", "-P", "groups=10"]) == 2
    err = capsys.readouterr().err
    assert "groups: 10 groups need 9 global links" in err and "raise h" in err


@pytest.mark.parametrize("name,params", [("dragonfly", {}), ("dragonfly", {"groups": "5"}),
                                         ("dragonfly-plus", {})])
def test_minimal_routes_cross_at_most_one_global_link_and_deliver(name, params):
    topo = topo_of(name, params)
    group = dragonfly.grouping(topo)
    assert group is not None
    routes = policy.next_hops(topo, topo.all_ports())
    fab = fabric_with_policy(topo, topo.all_ports(), "controller")
    for a, b in itertools.permutations(topo.host_ports[::3], 2):
        n = dragonfly.global_hops(topo, routes, group, a.dpid, b.ip)
        assert n == (group[a.dpid] != group[b.dpid]), (a.host, b.host)
        for hops, end in fab.paths(a, udp(a, b, 49152), max_hops=8):
            assert end[0] == "host" and end[1] == b
            crossed = sum(group[d] != group[topo.peer_of(d, o)[0]] for d, _, o in hops
                          if topo.peer_of(d, o) is not None)
            assert crossed <= 1 and len(hops) <= 4


def test_the_plain_shortest_path_would_take_two_global_hops():
    """Why the dragonfly has routes of its own: BFS finds 2-global-hop shortcuts."""
    topo = topo_of("dragonfly")
    group = dragonfly.grouping(topo)
    adj = policy.live_adjacency(topo, topo.all_ports())
    bfs = policy.bfs_next_hops(topo, adj, topo.all_ports())
    worst = max(dragonfly.global_hops(topo, bfs, group, a.dpid, b.ip) or 0
                for a in topo.host_ports for b in topo.host_ports)
    assert worst == 2


def test_a_cut_global_link_falls_back_to_a_live_path():
    topo = topo_of("dragonfly")
    group = dragonfly.grouping(topo)
    lk = next(lk for lk in topo.links if group[lk.a_dpid] != group[lk.b_dpid])
    live = topo.all_ports() - {(lk.a_dpid, lk.a_port), (lk.b_dpid, lk.b_port)}
    fab = fabric_with_policy(topo, live, "controller")
    a = next(hp for hp in topo.host_ports if group[hp.dpid] == group[lk.a_dpid])
    b = next(hp for hp in topo.host_ports if group[hp.dpid] == group[lk.b_dpid])
    for hops, end in fab.paths(a, udp(a, b), max_hops=12):
        assert end[0] == "host" and end[1] == b


def test_clos_fabrics_are_not_dragonflies():
    assert dragonfly.grouping(topo_of("three-tier")) is None
    assert dragonfly.grouping(topo_of("leaf-spine")) is None


def valiant_fabric(topo, live=None):
    from controller.fakeswitch import FakeFabric
    live = topo.all_ports() if live is None else live
    fab = FakeFabric(topo, live)
    state = dragonfly.valiant(topo, live, policy.desired_state(topo, live, "controller"))
    fab.apply({d: policy.install(st) for d, st in state.items()})
    return fab


@pytest.mark.parametrize("name,params", [("dragonfly", {}), ("dragonfly-plus", {})])
def test_valiant_reaches_every_host_through_every_group(name, params):
    topo = topo_of(name, params)
    group = dragonfly.grouping(topo)
    fab = valiant_fabric(topo)
    uturns = {(d, dict(f.match)["in_port"]) for d, sw in fab.switches.items()
              for f in sw.flows.values() if Output(OFPP_IN_PORT) in f.actions
              and "in_port" in dict(f.match)}
    g = len(set(group.values()))
    for a, b in itertools.permutations(topo.host_ports[::5], 2):
        if a.dpid == b.dpid:
            continue
        seen = set()
        for hops, end in fab.paths(a, udp(a, b, 49152), max_hops=10):
            assert end[0] == "host" and end[1] == b, (a.host, b.host, hops)
            # OVS drops an output to the in_port: a U-turn must say OFPP_IN_PORT
            assert all(i != o or (d, i) in uturns for d, i, o in hops), (a.host, b.host, hops)
            crossed = [group[topo.peer_of(d, o)[0]] for d, _, o in hops
                       if topo.peer_of(d, o) is not None
                       and group[d] != group[topo.peer_of(d, o)[0]]]
            # switches: L G L L G L (dragonfly); dragonfly-plus: a spine-leaf-spine detour
            assert len(crossed) <= 2 and len(hops) <= (6 if name == "dragonfly" else 8)
            stamp = dragonfly.stamp_of(end[2]["eth_src"])
            if len(crossed) == 2:
                assert stamp == (crossed[0], 2)      # phase 2 of the group it went through
                seen.add(crossed[0])
            else:
                assert stamp is None                 # minimal: the host's own address
        others = g - (1 if group[a.dpid] == group[b.dpid] else 2)
        assert len(seen) == others, (a.host, b.host, seen)


def test_valiant_draws_one_bucket_per_group_and_marks_outside_dscp_and_ports():
    topo = topo_of("dragonfly")
    live = topo.all_ports()
    st = dragonfly.valiant(topo, live, policy.desired_state(topo, live, "controller"))
    sw = topo.by_name["g1r1"]
    vgroups = [gm for gm in st[sw.dpid].groups if gm.group_id >= dragonfly.VALIANT_GROUP_BASE]
    assert len(vgroups) == 35 and all(len(gm.buckets) == 9 for gm in vgroups)
    assert all(gm.selection.fields == ("ipv4_src", "ipv4_dst", "udp_src", "udp_dst")
               for gm in vgroups)
    fields = {a.field for gm in vgroups for b in gm.buckets for a in b.actions
              if hasattr(a, "field")} | {a.field for f in st[sw.dpid].flows for a in f.actions
                                         if hasattr(a, "field")}
    assert fields <= {"eth_src", "eth_dst", "arp_op", "arp_sha", "arp_spa"}


def test_stamps_round_trip_and_the_mode_is_checked():
    assert dragonfly.marker(9, 1) == "02:df:00:00:09:01"
    assert dragonfly.stamp_of(dragonfly.marker(300, 2)) == (300, 2)
    assert dragonfly.stamp_of("02:00:00:00:00:07") is None
    assert dragonfly.check_mode("ugal") == "ugal"
    with pytest.raises(ValueError, match="routing mode 'par'"):
        dragonfly.check_mode("par")


def test_minimal_mode_adds_nothing_and_clos_fabrics_ignore_valiant():
    topo = topo_of("leaf-spine")
    st = policy.desired_state(topo, topo.all_ports(), "controller")
    assert dragonfly.valiant(topo, topo.all_ports(), st) is st
