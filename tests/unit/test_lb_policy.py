"""Unit tests of controller.lb: each load-balancing mode's decisions on a fake
4x4x4 leaf-spine, with fake load and an injected clock (no root, no OVS)."""

import pytest

from controller import lb, policy, topology
from controller.fakeswitch import FakeFabric
from controller.messages import ETH_TYPE_IPV4, Group, Output
from emulator.fabric import addressing, presets
from traffic.roce.frames import FrameTemplate


@pytest.fixture(scope="module")
def doc():
    fabric = presets.build("leaf-spine", {"spines": 4, "leaves": 4, "hosts_per_leaf": 4})
    return addressing.plan(fabric, "ab12")


@pytest.fixture(scope="module")
def topo(doc):
    return topology.from_dict(doc)


@pytest.fixture
def rates(doc, tmp_path):
    import json
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(doc))
    return lb.port_rates(str(path))


def hp(topo, name):
    return next(h for h in topo.host_ports if h.host == name)


def frame(topo, src, dst, sport):
    a, b = hp(topo, src), hp(topo, dst)
    return FrameTemplate(a.mac, b.mac, a.ip, b.ip, dst_qpn=0x100, sport=sport).frame(0)


def uplinks(topo, leaf):
    return [p.port for p in topo.by_name[leaf].ports if not p.to_host]


def test_the_mode_comes_from_the_topology_documents_modes_block():
    doc = addressing.plan(presets.build("leaf-spine"), "ab12")
    assert topology.from_dict(doc).modes.lb == "ecmp"
    assert topology.from_dict(dict(doc, modes={"lb": "controller-dlb"})).modes.lb \
        == "controller-dlb"
    with pytest.raises(topology.TopologyError, match="use one of"):
        topology.from_dict(dict(doc, modes={"lb": "wcmp"}))
    with pytest.raises(topology.TopologyError, match="unknown key"):
        topology.from_dict(dict(doc, modes={"lbb": "ecmp"}))


@pytest.mark.parametrize("mode", ["ecmp", "spray"])
def test_hashing_modes_add_nothing(topo, mode):
    desired = policy.desired_state(topo, topo.all_ports(), "controller")
    assert lb.augment(topo, desired, mode) == desired
    bal = lb.Balancer(topo, mode)
    assert bal.packet_in(0x10001, frame(topo, "h1", "h5", 50000), 0.0) == []


def test_learn_flows_copy_multipath_routes_on_leaves_only(topo):
    desired = policy.desired_state(topo, topo.all_ports(), "controller")
    out = lb.augment(topo, desired, "controller-dlb")
    leaf1, spine1 = topo.by_name["leaf1"].dpid, topo.by_name["spine1"].dpid
    learn = [f for f in out[leaf1].flows if f.priority == lb.PRIO_LB_LEARN]
    assert len(learn) == 12                     # the 12 hosts on other leaves
    for f in learn:
        m = dict(f.match)
        assert m["udp_dst"] == 4791 and m["ip_proto"] == 17
        assert f.actions[0] == Output(lb.OFPP_CONTROLLER)
        assert isinstance(f.actions[1], Group)  # still forwarded by ECMP meanwhile
    assert out[spine1] == desired[spine1]
    # a learn flow forwards exactly like the route it copies
    fab = FakeFabric(topo)
    fab.apply({d: policy.install(st) for d, st in out.items()})
    pkt = {"eth_type": ETH_TYPE_IPV4, "ip_proto": 17, "ipv4_src": hp(topo, "h1").ip,
           "ipv4_dst": hp(topo, "h5").ip, "udp_src": 50000, "udp_dst": 4791, "in_port": 1}
    ports = {p for p, _ in fab.switches[leaf1].forward(pkt)}
    assert ports == set(uplinks(topo, "leaf1")) | {lb.OFPP_CONTROLLER}


def test_placement_spreads_colliding_flows(topo, rates):
    """Four flows leaf1 -> leaf2 land on four different spines (ECMP may stack them)."""
    bal = lb.Balancer(topo, "controller-dlb", rates)
    leaf1 = topo.by_name["leaf1"].dpid
    chosen = []
    for i, (s, d) in enumerate([("h1", "h5"), ("h2", "h6"), ("h3", "h7"), ("h4", "h8")]):
        msgs = bal.packet_in(leaf1, frame(topo, s, d, 50000 + i), 1.0)
        assert len(msgs) == 1 and msgs[0].priority == lb.PRIO_LB_FLOW
        assert msgs[0].cookie == lb.COOKIE_LB
        chosen.append(msgs[0].actions[0].port)
    assert sorted(chosen) == uplinks(topo, "leaf1")
    # a repeated packet-in of a placed flow sends nothing until RESEND_S...
    assert bal.packet_in(leaf1, frame(topo, "h1", "h5", 50000), 1.1) == []
    # ...then re-sends the same entry (the switch lost it, e.g. a resync)
    again = bal.packet_in(leaf1, frame(topo, "h1", "h5", 50000), 1.0 + lb.RESEND_S + 0.1)
    assert again[0].actions[0].port == chosen[0]


def test_placement_avoids_measured_hot_link(topo, rates):
    bal = lb.Balancer(topo, "flowlet", rates)
    leaf1 = topo.by_name["leaf1"].dpid
    ups = uplinks(topo, "leaf1")
    rate = rates[(leaf1, ups[0])]
    # uplink 1 carried the link rate in the last poll (ECMP traffic, not placed)
    bal.port_stats(leaf1, {p: 0 for p in ups}, 0.0)
    bal.port_stats(leaf1, {ups[0]: int(rate / 8 * 0.1), ups[1]: int(rate / 8 * 0.05),
                           ups[2]: 0, ups[3]: 0}, 0.1)
    assert bal.util[(leaf1, ups[0])] == pytest.approx(1.0)
    msgs = bal.packet_in(leaf1, frame(topo, "h1", "h5", 50000), 0.15)
    assert msgs[0].actions[0].port == ups[2]


def test_same_leaf_and_non_roce_are_not_placed(topo):
    bal = lb.Balancer(topo, "controller-dlb")
    leaf1 = topo.by_name["leaf1"].dpid
    assert bal.packet_in(leaf1, frame(topo, "h1", "h2", 50000), 0.0) == []
    data = bytearray(frame(topo, "h1", "h5", 50000))
    data[36:38] = (4792).to_bytes(2, "big")
    assert bal.packet_in(leaf1, bytes(data), 0.0) == []
    assert bal.packet_in(leaf1, b"\x00" * 20, 0.0) == []


def test_idle_flows_expire_with_injected_clock(topo):
    bal = lb.Balancer(topo, "flowlet")
    leaf1 = topo.by_name["leaf1"].dpid
    bal.packet_in(leaf1, frame(topo, "h1", "h5", 50000), 0.0)
    key = (hp(topo, "h1").ip, hp(topo, "h5").ip, 50000)
    bal.flow_stats(leaf1, {key: 1000}, 0.5)
    assert bal.tick(0.5 + lb.IDLE_S - 0.01) == []
    gone = bal.tick(0.5 + lb.IDLE_S + 0.01)
    assert [(d, m.command) for d, m in gone] == [(leaf1, "delete")] and key not in bal.flows


def _two_on_one(topo, rates, mode):
    """Two active flows forced onto spine1's uplink, measured hot; others idle."""
    bal = lb.Balancer(topo, mode, rates)
    leaf1 = topo.by_name["leaf1"].dpid
    ups = uplinks(topo, "leaf1")
    keys = []
    for i, (s, d) in enumerate([("h1", "h5"), ("h2", "h6")]):
        bal.packet_in(leaf1, frame(topo, s, d, 50000 + i), 0.0)
        key = (hp(topo, s).ip, hp(topo, d).ip, 50000 + i)
        f = bal.flows[key]
        f.port, f.links = ups[0], bal.links_of(leaf1, ups[0], f.dst)
        keys.append(key)
    rate = rates[(leaf1, ups[0])]
    bal.port_stats(leaf1, {p: 0 for p in ups}, 0.0)
    bal.port_stats(leaf1, {ups[0]: int(rate / 8 * 0.1), ups[1]: 0, ups[2]: 0, ups[3]: 0}, 0.1)
    bal.flow_stats(leaf1, {k: 60000 for k in keys}, 0.1)
    return bal, keys, ups


def test_dlb_moves_one_flow_off_a_hot_link_and_holds_it(topo, rates):
    bal, keys, ups = _two_on_one(topo, rates, "controller-dlb")
    msgs = bal.tick(0.1)
    assert len(msgs) == 1 and msgs[0][1].command == "modify"
    assert msgs[0][0] == topo.by_name["leaf1"].dpid
    assert msgs[0][1].actions[0].port in ups[1:]
    assert sorted(f.port for f in bal.flows.values()) != [ups[0], ups[0]]
    assert bal.moves == 1
    # still measured hot at the next poll, but one flow per link now: no flapping
    bal.flow_stats(topo.by_name["leaf1"].dpid, {k: 120000 for k in keys}, 0.2)
    assert bal.tick(0.2) == []


def test_light_flows_neither_count_nor_block_a_move(topo, rates):
    """A QP's ACKs are a RoCE flow of their own, a few % of the data's bytes: one on
    every other uplink must not keep a hot link's data flow where it is."""
    bal, keys, ups = _two_on_one(topo, rates, "controller-dlb")
    leaf1 = topo.by_name["leaf1"].dpid
    acks = []
    for i, (s, d) in enumerate([("h3", "h7"), ("h4", "h8"), ("h3", "h6")]):
        bal.packet_in(leaf1, frame(topo, s, d, 51000 + i), 0.0)
        key = (hp(topo, s).ip, hp(topo, d).ip, 51000 + i)
        f = bal.flows[key]
        f.port, f.links = ups[1 + i], bal.links_of(leaf1, ups[1 + i], f.dst)
        acks.append(key)
    bal.flow_stats(leaf1, {k: 600 for k in acks}, 0.1)       # 48 kbit/s: light
    assert all(not bal.heavy(bal.flows[k]) for k in acks)
    assert all(bal.heavy(bal.flows[k]) for k in keys)
    msgs = bal.tick(0.1)
    assert len(msgs) == 1 and msgs[0][1].actions[0].port in ups[1:]
    assert bal.flows[acks[0]].port == ups[1]                  # the light ones stay


def test_flowlet_never_moves_an_active_flow(topo, rates):
    bal, keys, ups = _two_on_one(topo, rates, "flowlet")
    assert bal.tick(0.1) == []
    assert [bal.flows[k].port for k in keys] == [ups[0], ups[0]]


def test_dlb_does_not_move_onto_a_busy_path(topo, rates):
    bal, keys, ups = _two_on_one(topo, rates, "controller-dlb")
    leaf1 = topo.by_name["leaf1"].dpid
    rate = rates[(leaf1, ups[0])]
    full = int(rate / 8 * 0.1)
    bal.port_stats(leaf1, {ups[0]: 2 * full, ups[1]: full, ups[2]: full, ups[3]: full}, 0.2)
    assert bal.tick(0.2) == []


def test_link_down_replaces_flows_on_it(topo):
    bal = lb.Balancer(topo, "controller-dlb")
    leaf1 = topo.by_name["leaf1"].dpid
    bal.packet_in(leaf1, frame(topo, "h1", "h5", 50000), 0.0)
    f = next(iter(bal.flows.values()))
    old = f.port
    live = topo.all_ports() - {(leaf1, old)}
    msgs = bal.set_live(live, 1.0)
    assert len(msgs) == 1 and msgs[0][1].actions[0].port != old and msgs[0][0] == leaf1
    assert (leaf1, f.port) in live and f.port != old
    assert bal.set_live(live, 1.1) == []           # nothing else to move
