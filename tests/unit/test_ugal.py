"""UGAL on a dragonfly: the rule, the candidate tables, and the controller's flows
that carry a frame the data plane stamped (no root, fake switches)."""

import struct

import pytest

from controller import dragonfly, policy, topology
from controller.fakeswitch import FakeFabric
from controller.fakeswitch import udp_packet as udp
from emulator.dataplane.adaptive import ugal
from emulator.errors import ConfigError
from emulator.fabric import addressing, presets

SMALL = ("dragonfly", {"a": "3", "h": "1", "p": "1"})


def doc(name="dragonfly", params=None):
    return addressing.plan(presets.build(name, params or {}), "ab12")


@pytest.mark.parametrize("q_min,q_non,bias,go", [
    (0, 0, 0, False),            # equal (empty) queues: minimal
    (10, 10, 0, False),          # equal queues: minimal
    (20, 10, 0, False),          # exactly 2x: still minimal
    (21, 10, 0, True),           # beyond 2x
    (21, 10, 1, False),          # ... but not beyond 2x + bias
    (22, 10, 1, True),
    (5, 0, 4, True), (4, 0, 4, False)])
def test_booksim_rule_goes_nonminimal_only_beyond_twice_plus_bias(q_min, q_non, bias, go):
    assert ugal.nonminimal(q_min, q_non, bias) is go


def test_ugal_g_reads_the_groups_global_links_ugal_l_its_own_ports():
    t = doc(*SMALL)
    g = ugal.plan(t, "ugal")
    group = {s["name"]: s["pod"] for s in t["switches"]}
    peer = {(s["name"], p["port"]): p["peer"] for s in t["switches"] for p in s["ports"]}
    # every queue UGAL-G reads is a global link; 4 groups x 3 global ports
    assert len(g["tracked"]) == 12
    assert all(group[peer[e]] != group[e[0]] for e in g["tracked"])
    # h1 on g1r1 to a host of group 3, whose link from group 1 is on g1r2
    ip = next(h["ip"] for h in t["hosts"] if h["leaf"] == "g3r1")
    mins, cands = g["routes"][("g1r1", ip)]
    assert [group[peer[e]] for e in mins] == [3] and {e[0] for e in mins} == {"g1r2"}
    assert sorted(k for _, k in cands) == [2, 4]          # neither end's group
    assert all(group[peer[e]] == k for e, k in cands)      # the first global hop to k
    lo = ugal.plan(t, "ugal-l")
    mins, cands = lo["routes"][("g1r1", ip)]
    assert all(e[0] == "g1r1" for e in mins + [c for c, _ in cands])
    assert [peer[e] for e in mins] == ["g1r2"]              # the local hop to the gateway
    # a host of its own group is never decided; every router's host port decides
    assert not any(group[sw] == next(h["pod"] for h in t["hosts"] if h["ip"] == i)
                   for sw, i in g["routes"])
    assert len(g["deciders"]) == 12


def test_the_default_dragonfly_has_seven_candidates_per_route():
    p = ugal.plan(doc(), "ugal")
    assert len(p["tracked"]) == 72 and len(p["deciders"]) == 72
    assert {len(c) for _, c in p["routes"].values()} == {7}
    assert {len(m) for m, _ in p["routes"].values()} == {1}


def test_the_route_value_is_the_c_struct():
    p = ugal.plan(doc(*SMALL), "ugal")
    keys = {e: i for i, e in enumerate(p["tracked"])}
    (mins, cands), = [v for k, v in p["routes"].items() if k[0] == "g1r1"][:1]
    raw = ugal.route_value(mins, cands, keys)
    assert len(raw) == 4 * (2 + ugal.MIN_CAND + 2 * ugal.UGAL_CAND)
    n_min, n = struct.unpack_from("<II", raw)
    assert (n_min, n) == (len(mins), len(cands))
    groups = struct.unpack_from(f"<{ugal.UGAL_CAND}I", raw, 4 * (2 + ugal.MIN_CAND
                                                                 + ugal.UGAL_CAND))
    assert list(groups[:n]) == [k for _, k in cands]


def test_modes_and_fabrics_are_checked():
    with pytest.raises(ConfigError, match="not a UGAL mode"):
        ugal.plan(doc(*SMALL), "valiant")
    with pytest.raises(ConfigError, match="dragonfly"):
        ugal.plan(doc("leaf-spine"), "ugal")
    from emulator.dataplane.adaptive.ugal_stage import check_session
    with pytest.raises(ConfigError, match="--lb dlb"):
        check_session("ugal", True, ())


def test_decision_counts_read_into_shares_per_router():
    zero = dict.fromkeys(ugal.COUNT_NAMES, 0)
    counts = {0: dict(zero, min_bytes=300, min_frames=3, min_flowlets=1, non_bytes=100,
                      non_frames=1, non_flowlets=1), 1: zero}
    r = ugal.reading(counts, ["g1r1", "g1r2"])
    assert r["nonminimal_share"] == 0.25 and list(r["routers"]) == ["g1r1"]
    assert r["flowlets"] == 2 and r["nonminimal_flowlets"] == 1
    assert ugal.reading({0: zero}, ["g1r1"])["nonminimal_share"] is None


def ugal_fabric(topo):
    live = topo.all_ports()
    fab = FakeFabric(topo, live)
    state = dragonfly.augment(topo, live, policy.desired_state(topo, live, "controller"),
                              "ugal")
    fab.apply({d: policy.install(st) for d, st in state.items()})
    return fab, state


def globals_of(topo, group, hops):
    """[(dpid, port)] of the global links a path crosses."""
    return [(d, o) for d, _, o in hops
            if topo.peer_of(d, o) is not None and group[topo.peer_of(d, o)[0]] != group[d]]


@pytest.mark.parametrize("mode", ["ugal", "ugal-l"])
def test_the_controllers_flows_carry_a_stamped_frame_through_its_group(mode):
    """What the program stamps, the controller's Valiant flows carry: through the
    candidate's group, by the queue the plan names; unstamped frames go minimally."""
    t = doc(*SMALL)
    topo = topology.from_dict(t)
    group = dragonfly.grouping(topo)
    fab, state = ugal_fabric(topo)
    assert not any(gm.group_id >= dragonfly.VALIANT_GROUP_BASE
                   for st in state.values() for gm in st.groups)   # no source draws
    plan = ugal.plan(t, mode)
    dpid = {s["name"]: s["dpid"] for s in t["switches"]}
    hp_of = {hp.ip: hp for hp in topo.host_ports}
    for (sw, ip), (mins, cands) in plan["routes"].items():
        src = next(hp for hp in topo.host_ports if hp.dpid == dpid[sw])
        dst = hp_of[ip]
        (hops, end), = fab.paths(src, udp(src, dst))
        assert end[0] == "host" and end[1] == dst
        crossed = globals_of(topo, group, hops)
        assert len(crossed) == 1
        assert (crossed[0] in {(dpid[a], b) for a, b in mins}) or mode == "ugal-l"
        assert (hops[0][0], hops[0][2]) in {(dpid[a], b) for a, b in mins} or mode == "ugal"
        for entry, k in cands:
            pkt = dict(udp(src, dst), eth_src=dragonfly.marker(k, 1))
            (hops, end), = fab.paths(src, pkt)
            assert end[0] == "host" and end[1] == dst
            assert dragonfly.stamp_of(end[2]["eth_src"]) == (k, 2)
            crossed = globals_of(topo, group, hops)
            assert group[topo.peer_of(*crossed[0])[0]] == k and len(crossed) == 2
            first = crossed[0] if mode == "ugal" else (hops[0][0], hops[0][2])
            assert first == (dpid[entry[0]], entry[1])


def test_on_a_dragonfly_plus_the_leaves_stamp_and_the_spines_carry():
    t = doc("dragonfly-plus")
    topo = topology.from_dict(t)
    group = dragonfly.grouping(topo)
    fab, _ = ugal_fabric(topo)
    plan = ugal.plan(t, "ugal")
    dpid = {s["name"]: s["dpid"] for s in t["switches"]}
    assert all(s["kind"] != "spine" for s in t["switches"] if s["name"] in
               {sw for sw, _ in plan["deciders"]})
    hp_of = {hp.ip: hp for hp in topo.host_ports}
    for (sw, ip), (_, cands) in list(plan["routes"].items())[::7]:
        src = next(hp for hp in topo.host_ports if hp.dpid == dpid[sw])
        for entry, k in cands:
            for hops, end in fab.paths(src, dict(udp(src, hp_of[ip]),
                                                 eth_src=dragonfly.marker(k, 1))):
                first = globals_of(topo, group, hops)[0]
                assert end[0] == "host" and end[1] == hp_of[ip]
                assert first == (dpid[entry[0]], entry[1])    # the queue UGAL-G read
