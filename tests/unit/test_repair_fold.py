"""Folded repair flows (``policy.fold_repairs``): far fewer flows, the same forwarding.

A leaf of a large 2-tier Clos had a repair flow per uplink and remote host
(2,016 of its 2,542 flows with 64 leaves, 8 spines, 4 hosts each).  Folded,
one flow per uplink repairs every remote host and the leaf's own hosts are
the exceptions.  Checked here against the unfolded flows on the fake
switches: every switch, every fabric in-port, every destination, before and
after cuts.
"""

import itertools

import pytest

from controller import policy, topology
from controller.fakeswitch import FakeSwitch, fabric_with_policy, udp_packet
from controller.messages import DecNwTtl, Output
from emulator.fabric import addressing, presets

FOLDING = dict(spines=3, leaves=12, hosts_per_leaf=2)    # 22 remote hosts per uplink: folds


def leaf_spine(**params):
    fabric = presets.build("leaf-spine", {k: str(v) for k, v in params.items()})
    return topology.from_dict(addressing.plan(fabric, "ab12"))


@pytest.fixture(scope="module")
def topo():
    return leaf_spine(**FOLDING)


def test_fold_rules_keep_the_odd_ones_and_fold_only_when_it_saves():
    ips = [f"10.0.0.{i}" for i in range(1, 41)]
    repairs = {(5, ip): (6, 7) for ip in ips[2:39]}
    repairs[(5, ips[39])] = (7,)
    folded = policy.fold_repairs(repairs, ips)
    assert folded == {5: ((6, 7), {ips[0]: None, ips[1]: None, ips[39]: (7,)})}
    # a route through the common ports needs no rule of its own
    assert policy.fold_repairs(repairs, ips, {ips[0]: (6, 7)})[5][1] == {ips[1]: None,
                                                                        ips[39]: (7,)}
    unfolded = {ip: ports for (_, ip), ports in repairs.items()}
    assert policy.fold_repairs(repairs, None) == {5: (None, unfolded)}        # not foldable
    few = dict(list(repairs.items())[:policy.FOLD_SAVES])
    assert policy.fold_repairs(few, ips)[5][0] is None                         # saves too few
    assert policy.fold_repairs({}, ips) == {}


def test_a_large_leaf_folds_to_one_repair_flow_per_uplink_plus_its_own_hosts(topo):
    state = policy.desired_state(topo, topo.all_ports(), "fast-failover")
    for leaf in (s for s in topo.switches if s.kind == "leaf"):
        flows = state[leaf.dpid].flows
        uplinks = sorted(p.port for p in leaf.ports if p.peer_kind == "spine")
        folded = [f for f in flows if f.priority == policy.PRIO_REPAIR_ANY]
        assert sorted(dict(f.match)["in_port"] for f in folded) == uplinks
        assert all(f.actions[0] == DecNwTtl() for f in folded)
        own = {hp.mac: hp for hp in topo.host_ports if hp.dpid == leaf.dpid}
        rules = [f for f in flows if f.priority == policy.PRIO_REPAIR]
        assert len(rules) == len(uplinks) * len(own)
        for f in rules:     # from an uplink, the leaf's own hosts: their route, no dec_ttl
            assert f.actions == (Output(own[dict(f.match)["eth_dst"]].switch_port),)


def test_a_64_host_leaf_holds_182_flows_not_662():
    topo = leaf_spine(spines=8, leaves=16, hosts_per_leaf=4)
    state = policy.desired_state(topo, topo.all_ports(), "fast-failover")
    leaf = state[topo.by_name["leaf1"].dpid]
    # 8 folded + 8 x 4 own hosts; ARP replies and routes for 64 hosts; 12 ARP guards
    # (unfolded: 8 x 60 remote hosts instead of the first 40)
    assert len(leaf.flows) == 8 + 32 + 64 + 64 + 12 + 2


def forwarding(state, dpid, live, in_port, src, dst):
    """{(out port, ttl)} of one packet on one switch holding ``state``."""
    sw = FakeSwitch(dpid, {p for d, p in live if d == dpid})
    sw.apply(policy.install(state))
    pkt = dict(udp_packet(src, dst), in_port=in_port)
    return {(port, p["ip_ttl"]) for port, p in sw.forward(pkt)}


@pytest.mark.parametrize("cut", [None, ("leaf1", "spine1"), ("leaf5", "spine3")])
def test_folded_flows_forward_every_packet_as_the_unfolded_ones(topo, cut, monkeypatch):
    live = topo.all_ports()
    if cut:
        p = next(p for p in topo.by_name[cut[0]].ports if p.peer == cut[1])
        live = live - {(p.dpid, p.port), topo.peer_of(p.dpid, p.port)}
    folded = policy.desired_state(topo, live, "fast-failover")
    monkeypatch.setattr(policy, "FOLD_SAVES", 10 ** 9)
    unfolded = policy.desired_state(topo, live, "fast-failover")
    src = topo.host_ports[0]
    for sw in topo.switches:
        fabric_ports = [p.port for p in sw.ports if not p.to_host]
        for q, dst in itertools.product(fabric_ports, topo.host_ports[1:]):
            a = forwarding(folded[sw.dpid], sw.dpid, live, q, src, dst)
            b = forwarding(unfolded[sw.dpid], sw.dpid, live, q, src, dst)
            # the same ports; at most one more dec_ttl, where a route sends a
            # bounced packet through the folded flow's own ports
            assert {port for port, _ in a} == {port for port, _ in b}, (sw.name, q, dst.host)
            assert all(t in ({u for _, u in b} | {u - 1 for _, u in b}) for _, t in a)


def test_local_repair_with_folded_flows_delivers_every_pair(topo):
    """The switches' state before a cut, walked with the cut (no controller)."""
    live = topo.all_ports()
    leaf1 = topo.by_name["leaf1"]
    for p in (p for p in leaf1.ports if not p.to_host):
        new = live - {(leaf1.dpid, p.port), topo.peer_of(leaf1.dpid, p.port)}
        fab = fabric_with_policy(topo, live, "fast-failover")
        fab.set_live(new)
        for src, dst in itertools.permutations(topo.host_ports, 2):
            if leaf1.dpid not in (src.dpid, dst.dpid):
                continue
            for hops, end in fab.paths(src, udp_packet(src, dst), max_hops=20):
                assert end[0] == "host" and end[1] == dst, (src.host, dst.host, hops, end)


def test_a_cut_elsewhere_keeps_every_leaf_folded(topo):
    """The fold is decided with every port live: cutting leaf1-spine1 makes
    leaf1's hosts exceptions on the other leaves (their repairs avoid spine1),
    which alone would no longer save FOLD_SAVES flows there; they stay folded,
    and the push is exceptions and group modifies, not every leaf's repair
    flows unfolded."""
    live = topo.all_ports()
    p = next(p for p in topo.by_name["leaf1"].ports if p.peer == "spine1")
    cut = live - {(p.dpid, p.port), topo.peer_of(p.dpid, p.port)}
    state = policy.desired_state(topo, cut, "fast-failover")
    for leaf in (s for s in topo.switches if s.kind == "leaf"):
        uplinks = {q.port for q in leaf.ports if q.peer_kind == "spine"
                   and (leaf.dpid, q.port) in cut}
        folded = {dict(f.match)["in_port"] for f in state[leaf.dpid].flows
                  if f.priority == policy.PRIO_REPAIR_ANY}
        assert folded == uplinks, leaf.name
    for old, new in ((live, cut), (cut, live)):
        msgs = [m for ms in policy.changes(topo, old, new, "fast-failover").values() for m in ms]
        assert len(msgs) < 100, len(msgs)        # unfolding them: 837
