"""Failover policy on the fake fabric (no root): FF groups, repair flows, reconvergence.

Local repair = the switches' state for the old liveness, walked with the new
liveness (no controller). Global repair = the controller's diff applied.
"""

import itertools

import pytest

from controller import policy, topology
from controller.fakeswitch import fabric_with_policy as fabric_for
from controller.fakeswitch import live_hops
from controller.fakeswitch import udp_packet as udp
from controller.messages import DecNwTtl, Output
from emulator.fabric import addressing, presets


def leaf_spine(**params):
    fabric = presets.build("leaf-spine", {k: str(v) for k, v in params.items()})
    return topology.from_dict(addressing.plan(fabric, "ab12"))


@pytest.fixture(scope="module", params=[dict(), dict(spines=2, leaves=2, hosts_per_leaf=1),
                                        dict(spines=2, leaves=3, hosts_per_leaf=1)],
                ids=["4x4x2", "2x2x1", "2x3x1"])
def topo(request):
    return leaf_spine(**request.param)






def links(topo):
    """Every switch-to-switch link as the set of its two (dpid, port) ends."""
    return [{(lk.a_dpid, lk.a_port), (lk.b_dpid, lk.b_port)} for lk in topo.links]




def outcomes(topo, fab, max_hops=200):
    """{(src host, dst host): [(hops, end kind)]} over every path of every pair."""
    out = {}
    for src, dst in itertools.permutations(topo.host_ports, 2):
        for sport in (49152, 49153, 49170, 50001):    # several hash inputs
            for hops, end in fab.paths(src, udp(src, dst, sport), max_hops=max_hops):
                assert end[0] == "drop" or end[1] == dst, (src.host, dst.host, hops, end)
                out.setdefault((src.host, dst.host), []).append((hops, end[0]))
    return out


@pytest.mark.parametrize("mode", ["controller", "fast-failover"])
def test_global_repair_after_every_single_link_failure(topo, mode):
    """After each single link cut and the controller's diff: shortest valid paths only."""
    live = topo.all_ports()
    for cut in links(topo):
        fab = fabric_for(topo, live, mode)
        new = live - cut
        fab.apply(policy.changes(topo, live, new, mode))
        fab.set_live(new)
        want = policy.desired_state(topo, new, mode)
        for dpid, sw in fab.switches.items():
            assert sw.state() == (want[dpid].flows, want[dpid].groups)
        for (s, d), paths in outcomes(topo, fab).items():
            hs = {hp.host: hp for hp in topo.host_ports}
            n = live_hops(topo, new, hs[s].dpid, hs[d].dpid) + 1
            for hops, end in paths:
                assert end == "host", (cut, s, d, hops)
                assert len(hops) == n, (cut, s, d, hops)
                assert all((dp, o) in new and (dp, i) in new for dp, i, o in hops)


def test_fast_failover_local_repair_delivers_every_pair_without_controller(topo):
    """FF groups + repair flows alone (old state, new liveness) deliver every pair."""
    live = topo.all_ports()
    for cut in links(topo):
        fab = fabric_for(topo, live, "fast-failover")
        fab.set_live(live - cut)
        for (s, d), paths in outcomes(topo, fab).items():
            assert all(end == "host" for _, end in paths), (cut, s, d, paths)


def test_without_fast_failover_spine_side_cuts_need_the_controller(topo):
    """Mode controller: a spine cannot bypass its dead down-link alone; none: nothing heals."""
    live = topo.all_ports()
    for mode in ("controller", "none"):
        broken = 0
        for cut in links(topo):
            fab = fabric_for(topo, live, mode)
            fab.set_live(live - cut)
            broken += sum(any(end == "drop" for _, end in paths)
                          for paths in outcomes(topo, fab).values())
        assert broken > 0, mode


def test_none_mode_select_groups_watch_nothing_and_no_ff(topo):
    state = policy.desired_state(topo, topo.all_ports(), "none")
    for st in state.values():
        assert all(g.type == "select" for g in st.groups)
        assert all(b.watch_port is None for g in st.groups for b in g.buckets)
        assert not any(f.priority == policy.PRIO_REPAIR for f in st.flows)


def test_ff_groups_primary_and_backups_on_spines(topo):
    state = policy.desired_state(topo, topo.all_ports(), "fast-failover")
    leaves = [s for s in topo.switches if s.kind == "leaf"]
    for sw in (s for s in topo.switches if s.kind == "spine"):
        groups = {g.group_id: g for g in state[sw.dpid].groups}
        for hp in topo.host_ports:
            flow = next(f for f in state[sw.dpid].flows if dict(f.match).get("ipv4_dst") == hp.ip)
            (act,) = flow.actions
            g = groups[act.group_id]
            assert g.type == "ff" and act.group_id >= policy.FF_GROUP_BASE
            ports = [b.watch_port for b in g.buckets]
            assert [b.actions for b in g.buckets] == [(Output(p),) for p in ports]
            assert sw.port(ports[0]).peer == hp.switch          # primary: the leaf itself
            # backups: every other leaf, each a bounce (valley) used only for repair
            assert sorted(sw.port(p).peer for p in ports[1:]) == \
                sorted(l.name for l in leaves if l.name != hp.switch)
    for leaf in leaves:
        st = state[leaf.dpid]
        assert not any(g.type == "ff" for g in st.groups)        # select groups repair leaves
        uplinks = {p.port for p in leaf.ports if p.peer_kind == "spine"}
        repairs = [f for f in st.flows if f.priority == policy.PRIO_REPAIR]
        remote = [hp for hp in topo.host_ports if hp.dpid != leaf.dpid]
        assert len(repairs) == len(uplinks) * len(remote)
        for f in repairs:
            m = dict(f.match)
            assert m["in_port"] in uplinks and f.actions[0] == DecNwTtl()
            out = f.actions[1]
            ports = ({out.port} if isinstance(out, Output) else
                     {b.watch_port for b in next(g for g in st.groups
                                                 if g.group_id == out.group_id).buckets})
            assert ports == uplinks - {m["in_port"]}             # never back where it came from


def test_repair_flows_never_match_in_normal_operation(topo):
    """With every link up, fast-failover forwards exactly like controller mode."""
    live = topo.all_ports()
    a = outcomes(topo, fabric_for(topo, live, "fast-failover"))
    b = outcomes(topo, fabric_for(topo, live, "controller"))
    assert a == b


def test_double_failure_loops_are_bounded_by_ttl():
    """Two spines lose the same leaf: bounces may ping-pong, dec_ttl ends them."""
    topo = leaf_spine(spines=2, leaves=3, hosts_per_leaf=1)
    live = topo.all_ports()
    leaf1 = topo.by_name["leaf1"]
    cut = set()
    for p in leaf1.ports:
        if p.peer_kind == "spine":
            cut |= {(leaf1.dpid, p.port), topo.peer_of(leaf1.dpid, p.port)}
    fab = fabric_for(topo, live, "fast-failover")
    fab.set_live(live - cut)
    h1 = next(hp for hp in topo.host_ports if hp.dpid == leaf1.dpid)
    for src in (hp for hp in topo.host_ports if hp.dpid != leaf1.dpid):
        for hops, end in fab.paths(src, udp(src, h1), max_hops=400):
            assert end[0] == "drop"       # unreachable: dropped, not delivered, not infinite


def test_bad_mode_is_rejected(topo):
    with pytest.raises(ValueError, match="failover mode"):
        policy.desired_state(topo, topo.all_ports(), "magic")
