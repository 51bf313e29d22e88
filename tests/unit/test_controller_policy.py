"""Unit tests of controller.policy against a fake leaf-spine fabric (no root, no OVS)."""

import itertools

import networkx as nx
import pytest

from controller import policy, topology
from controller.fakeswitch import FakeFabric, FakeSwitch, live_hops
from controller.messages import (
    ARP_REPLY,
    ARP_REQUEST,
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    GroupMod,
    Output,
    SwitchState,
)
from emulator.fabric import addressing, presets


@pytest.fixture(scope="module")
def topo():
    return topology.from_dict(addressing.plan(presets.build("leaf-spine"), "ab12"))


def build_fabric(topo, live=None):
    live = topo.all_ports() if live is None else frozenset(live)
    fab = FakeFabric(topo, live)
    fab.apply({dpid: policy.install(st) for dpid, st in policy.desired_state(topo, live, "controller").items()})
    return fab


def udp(src, dst, sport=49152, dport=4791):
    return {"eth_type": ETH_TYPE_IPV4, "ip_proto": 17, "ipv4_src": src.ip, "ipv4_dst": dst.ip,
            "eth_src": src.mac, "eth_dst": dst.mac, "udp_src": sport, "udp_dst": dport}




def assert_all_pairs_shortest(topo, fab, live):
    pairs = 0
    for src, dst in itertools.permutations(topo.host_ports, 2):
        paths = fab.paths(src, udp(src, dst))
        assert paths, (src.host, dst.host)
        want = live_hops(topo, live, src.dpid, dst.dpid) + 1
        for hops, end in paths:
            assert end[0] == "host" and end[1] == dst, (src.host, dst.host, hops, end)
            assert len(hops) == want, (src.host, dst.host, hops)
            for dpid, in_port, out_port in hops:
                assert (dpid, in_port) in live and (dpid, out_port) in live
        pairs += 1
    return pairs


def test_topology_loads_leaf_spine(topo):
    assert len(topo.switches) == 8 and len(topo.host_ports) == 8
    assert topo.graph.number_of_edges() == 16
    assert topo.by_name["leaf1"].dpid == 0x10001
    assert topo.peer_of(0x10001, 3) == (0x20001, 1)
    assert topo.peer_of(0x10001, 1) is None
    with pytest.raises(nx.NetworkXError):
        topo.graph.add_node(1)      # frozen


def test_topology_rejects_bad_documents():
    doc = addressing.plan(presets.build("leaf-spine"), "ab12")
    with pytest.raises(topology.TopologyError, match="schema_version"):
        topology.from_dict(dict(doc, schema_version=2))
    bad = dict(doc, hosts=[dict(doc["hosts"][0], ports=[dict(doc["hosts"][0]["ports"][0], switch_port=3)])])
    with pytest.raises(topology.TopologyError, match="does not face"):
        topology.from_dict(bad)


def test_every_host_reaches_every_host_on_shortest_paths(topo):
    live = topo.all_ports()
    fab = build_fabric(topo, live)
    assert assert_all_pairs_shortest(topo, fab, live) == 8 * 7


def test_ecmp_groups_hold_exactly_the_equal_cost_ports(topo):
    state = policy.desired_state(topo, topo.all_ports(), "controller")
    for sw in topo.switches:
        groups = {g.group_id: g for g in state[sw.dpid].groups}
        if sw.kind == "spine":
            assert not groups          # one down-link per leaf: no ECMP
            continue
        uplinks = tuple(p.port for p in sw.ports if p.peer_kind == "spine")
        assert len(groups) == 3        # one per remote leaf, shared by its hosts
        for g in groups.values():
            assert g.type == "select"
            assert tuple(b.actions[0].port for b in g.buckets) == uplinks
            assert all(b.watch_port == b.actions[0].port for b in g.buckets)
            assert g.selection.fields == ("ipv4_src", "ipv4_dst", "udp_src", "udp_dst")
            assert g.selection.basis == sw.hash_seed
        group_of = {}
        for hp in topo.host_ports:
            flow = next(f for f in state[sw.dpid].flows
                        if dict(f.match).get("ipv4_dst") == hp.ip)
            if hp.dpid == sw.dpid:
                assert flow.actions == (Output(hp.switch_port),)
                continue
            (act,) = flow.actions
            assert act.group_id in groups
            assert group_of.setdefault(hp.dpid, act.group_id) == act.group_id
        assert len(set(group_of.values())) == 3


def test_arp_reply_is_built_in_the_switch(topo):
    fab = build_fabric(topo)
    h1, h5 = topo.host_ports[0], topo.host_ports[4]
    req = {"eth_type": ETH_TYPE_ARP, "arp_op": ARP_REQUEST, "eth_src": h1.mac,
           "eth_dst": "ff:ff:ff:ff:ff:ff", "arp_sha": h1.mac, "arp_spa": h1.ip,
           "arp_tha": "00:00:00:00:00:00", "arp_tpa": h5.ip, "in_port": h1.switch_port}
    ((port, reply),) = fab.switches[h1.dpid].forward(req)
    assert port == h1.switch_port
    assert reply["eth_dst"] == h1.mac and reply["eth_src"] == h5.mac
    assert reply["arp_op"] == ARP_REPLY
    assert (reply["arp_sha"], reply["arp_spa"]) == (h5.mac, h5.ip)
    assert (reply["arp_tha"], reply["arp_tpa"]) == (h1.mac, h1.ip)


def test_other_arp_and_unknown_traffic_is_dropped(topo):
    fab = build_fabric(topo)
    h1 = topo.host_ports[0]
    leaf = fab.switches[h1.dpid]
    base = {"eth_type": ETH_TYPE_ARP, "arp_op": ARP_REQUEST, "arp_spa": h1.ip,
            "arp_sha": h1.mac, "eth_src": h1.mac, "in_port": h1.switch_port}
    assert leaf.forward(dict(base, arp_tpa="10.0.9.9")) == []        # unknown target
    assert leaf.forward(dict(base, arp_tpa=h1.ip)) == []             # its own address
    assert leaf.forward(dict(base, arp_op=ARP_REPLY, arp_tpa=topo.host_ports[1].ip)) == []
    assert leaf.forward(dict(base, in_port=3, arp_tpa=topo.host_ports[1].ip)) == []  # from a spine
    spine = fab.switches[0x20001]
    assert spine.forward(dict(base, in_port=1, arp_tpa=topo.host_ports[4].ip)) == []
    assert leaf.forward({"eth_type": ETH_TYPE_IPV4, "ipv4_dst": "10.0.9.9", "in_port": 1}) == []
    assert leaf.forward({"eth_type": 0x86DD, "in_port": 1}) == []


def test_no_path_uses_a_dead_port_and_all_pairs_still_shortest(topo):
    live = topo.all_ports()
    fab = build_fabric(topo, live)
    # leaf1's link to spine2 (both ends) and spine3's link to leaf4 go down
    dead = {(0x10001, 4), (0x20003, 4)}
    new_live = live - dead
    per_switch = policy.changes(topo, live, new_live, "controller")
    # leaves lose a bucket; spine2/spine3 now reach leaf1/leaf4 via another leaf
    assert set(per_switch) == {0x10001, 0x10002, 0x10003, 0x10004, 0x20002, 0x20003}
    # leaf1's ECMP groups toward the other leaves lose a bucket in place (the
    # same ids): its flows are left alone
    kinds = [(type(m).__name__, m.command) for m in per_switch[0x10001]]
    assert kinds == [("GroupMod", "modify")] * 3
    # spine2 now reaches leaf1 over the other leaves: a group where it had a port
    kinds = [(type(m).__name__, m.command) for m in per_switch[0x20002]]
    assert kinds == [("GroupMod", "add"), ("FlowMod", "modify"), ("FlowMod", "modify")]
    fab.apply(per_switch)
    fab.set_live(new_live)
    assert assert_all_pairs_shortest(topo, fab, new_live) == 56
    # toward leaf2/leaf3 over the 3 live uplinks; toward leaf4 not via spine3 either
    assert sorted([b.watch_port for b in g.buckets]
                  for g in fab.switches[0x10001].groups.values()) == [[3, 5, 6], [3, 5, 6],
                                                                      [3, 6]]


def test_changes_bring_switch_to_exactly_the_desired_state(topo):
    live = topo.all_ports()
    cut = live - {(0x10002, 3), (0x20001, 2), (0x10003, 6)}
    for old, new in [(live, cut), (cut, live)]:
        fab = build_fabric(topo, old)
        fab.apply(policy.changes(topo, old, new, "controller"))
        want = policy.desired_state(topo, new, "controller")
        for dpid, sw in fab.switches.items():
            assert sw.state() == (want[dpid].flows, want[dpid].groups)


def test_diff_from_switch_state_resyncs_and_keeps_unchanged_entries(topo):
    want = policy.desired_state(topo, topo.all_ports(), "controller")[0x10001]
    assert policy.diff(want, want) == []
    # a switch with one stale flow, one stale group, one missing flow, one wrong group
    stale_flow = next(iter(want.flows)).as_command("add")
    from controller.messages import FlowMod, match
    junk = FlowMod(0, 5, match(eth_type=0x86DD), (), cookie=1)
    group = next(iter(want.groups))
    wrong = GroupMod(group.group_id, "select", group.buckets[:1], group.selection)
    extra = GroupMod(99, "select", group.buckets, group.selection)
    missing = next(f for f in want.flows if f.priority == policy.PRIO_IPV4)
    current = SwitchState((want.flows - {missing}) | {junk},
                          (want.groups - {group}) | {wrong, extra})
    msgs = policy.diff(current, want)
    kinds = [(type(m).__name__, m.command) for m in msgs]
    assert kinds == [("FlowMod", "add"), ("GroupMod", "modify"), ("FlowMod", "delete"),
                     ("GroupMod", "delete")]
    sw = FakeSwitch(0x10001)
    sw.apply(policy.install(current))
    sw.apply(msgs)
    assert sw.state() == (want.flows, want.groups)
    assert stale_flow in want.flows


def test_dead_host_port_is_unreachable_and_nothing_loops(topo):
    live = topo.all_ports()
    h1 = topo.host_ports[0]
    new_live = live - {(h1.dpid, h1.switch_port)}
    fab = build_fabric(topo, new_live)
    src = topo.host_ports[5]
    for hops, end in fab.paths(src, udp(src, h1)):
        assert end[0] == "drop" and end[1] == src.dpid   # dropped at the first leaf


def test_partitioned_leaf_routes_via_other_tier_lengths(topo):
    # leaf1 keeps one uplink: paths from it lose ECMP but stay shortest
    live = topo.all_ports() - {(0x10001, 3), (0x10001, 4), (0x10001, 5)}
    st = policy.desired_state(topo, live, "controller")[0x10001]
    assert not st.groups
    fab = build_fabric(topo, live)
    assert assert_all_pairs_shortest(topo, fab, live) == 56


def test_desired_state_is_deterministic(topo):
    a = policy.install(policy.desired_state(topo, topo.all_ports(), "controller")[0x10001])
    b = policy.install(policy.desired_state(topo, set(topo.all_ports()), "controller")[0x10001])
    assert a == b and len(a) == len(set(a))


def three_tier_doc():
    """2 pods x (2 leaves + 2 spines), 2 superspines, one host per leaf."""
    kinds = {"leaf": 1, "spine": 2, "superspine": 3}
    nodes = [("leaf", i) for i in range(1, 5)] + [("spine", i) for i in range(1, 5)] + \
            [("superspine", i) for i in (1, 2)]
    name = {n: f"{n[0]}{n[1]}" for n in nodes}
    links = [(("leaf", l), ("spine", s)) for l in (1, 2) for s in (1, 2)]
    links += [(("leaf", l), ("spine", s)) for l in (3, 4) for s in (3, 4)]
    links += [(("spine", s), ("superspine", x)) for s in range(1, 5) for x in (1, 2)]
    ports = {n: [] for n in nodes}
    for a, b in links:
        ports[a].append(b)
        ports[b].append(a)
    switches, hosts = [], []
    for n in nodes:
        dpid = kinds[n[0]] << 16 | n[1]
        plist = []
        if n[0] == "leaf":
            plist.append({"port": 1, "name": "eth1", "intf": "x", "peer": f"h{n[1]}",
                          "peer_kind": "host", "peer_port": "eth0", "rate_bps": 1})
            ip, mac = f"10.0.0.{n[1]}", f"02:00:00:00:00:{n[1]:02x}"
            hosts.append({"name": f"h{n[1]}", "ip": ip, "mac": mac, "ports": [
                {"port": "eth0", "ip": ip, "mac": mac, "prefix_len": 16,
                 "switch": name[n], "switch_port": 1, "rate_bps": 1}]})
        first = len(plist) + 1
        for k, peer in enumerate(ports[n]):
            plist.append({"port": first + k, "name": "", "intf": "x", "peer": name[peer],
                          "peer_kind": peer[0], "peer_port": None, "rate_bps": 1})
        switches.append({"name": name[n], "kind": n[0], "tier": kinds[n[0]], "dpid": dpid,
                         "bridge": "x", "hash_seed": 7, "ports": plist})
    by_name = {s["name"]: s for s in switches}
    for s in switches:
        for p in s["ports"]:
            if p["peer_kind"] != "host":
                p["peer_port"] = next(q["port"] for q in by_name[p["peer"]]["ports"]
                                      if q["peer"] == s["name"])
    return {"schema_version": 1, "subnet": "10.0.0.0/16", "switches": switches, "hosts": hosts}


def test_three_tiers_shortest_paths_and_superspine_ecmp():
    topo = topology.from_dict(three_tier_doc())
    live = topo.all_ports()
    fab = build_fabric(topo, live)
    assert assert_all_pairs_shortest(topo, fab, live) == 12
    h1, h3 = topo.host_ports[0], topo.host_ports[2]
    hops = {len(h) for h, _ in fab.paths(h1, udp(h1, h3))}
    assert hops == {5}          # leaf, spine, superspine, spine, leaf
    # pod-local spine spreads over both superspines toward the other pod
    spine1 = topo.by_name["spine1"]
    groups = policy.desired_state(topo, live, "controller")[spine1.dpid].groups
    assert len(groups) == 2          # one per leaf of the other pod
    for g in groups:
        assert {topo.by_dpid[spine1.dpid].port(b.watch_port).peer for b in g.buckets} == \
            {"superspine1", "superspine2"}
    # cut superspine1 from spine3: nothing may use that link any more
    cut = live - {(topo.by_name["superspine1"].dpid,
                   next(p.port for p in topo.by_name["superspine1"].ports if p.peer == "spine3"))}
    fab.apply(policy.changes(topo, live, cut, "controller"))
    fab.set_live(cut)
    assert assert_all_pairs_shortest(topo, fab, cut) == 12
