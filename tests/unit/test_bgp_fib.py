"""Who still routes through a dead link, replayed from netlink events; BFD's
detection arithmetic; the decoding of route and next-hop messages (pure)."""

import socket
import struct

import pytest

from emulator.dataplane.system import fibmon
from emulator.errors import ConfigError
from emulator.fabric.routing import bfd
from emulator.fabric.routing.fib import FibState, convergence, routes_through

MS = 1_000_000
P1, P2 = "10.1.0.0/24", "10.1.1.0/24"


def fabric():
    """leaf1, leaf2 under spine1, spine2; interface names "<switch>-<peer>"."""
    states, neighbour = {}, {}
    for leaf, mine, theirs in (("leaf1", P1, P2), ("leaf2", P2, P1)):
        st = FibState()
        for i, sp in enumerate(("spine1", "spine2"), start=1):
            st.apply({"kind": "nexthop", "op": "new", "id": i, "dev": f"{leaf}-{sp}"})
            neighbour[(leaf, f"{leaf}-{sp}")] = sp
            neighbour[(sp, f"{sp}-{leaf}")] = leaf
        st.apply({"kind": "nexthop", "op": "new", "id": 10, "group": [1, 2]})
        st.apply({"kind": "route", "op": "new", "dst": theirs, "nhid": 10})
        states[leaf] = st
    for sp in ("spine1", "spine2"):
        st = FibState()
        for i, (leaf, dst) in enumerate((("leaf1", P1), ("leaf2", P2)), start=1):
            st.apply({"kind": "nexthop", "op": "new", "id": i, "dev": f"{sp}-{leaf}"})
            st.apply({"kind": "route", "op": "new", "dst": dst, "nhid": i})
        states[sp] = st
    return states, {P1: "leaf1", P2: "leaf2"}, neighbour


def ev(t_ms, switch, **kw):
    return dict(kw, t_ns=t_ms * MS, switch=switch)


def test_a_carrier_loss_flushes_next_hops_silently_as_the_kernel_does():
    states, owners, nb = fabric()
    leaf1 = states["leaf1"]
    assert leaf1.devs(P2) == ["leaf1-spine1", "leaf1-spine2"]
    leaf1.apply({"kind": "link", "dev": "leaf1-spine1", "up": False})
    assert leaf1.devs(P2) == ["leaf1-spine2"]
    assert 1 not in leaf1.nexthops and leaf1.nexthops[10]["group"] == [2]
    spine1 = states["spine1"]
    spine1.link_down("spine1-leaf1")
    assert spine1.devs(P1) is None and P1 not in spine1.routes   # its only next hop
    leaf1.link_down("leaf1-spine2")
    assert P2 not in leaf1.routes and 10 not in leaf1.nexthops   # an emptied group


def test_remote_leaves_route_through_the_cut_until_they_drop_the_spine():
    states, owners, nb = fabric()
    dead = {("leaf1", "leaf1-spine1"), ("spine1", "spine1-leaf1")}
    events = [
        ev(10, "leaf2", kind="nexthop", op="new", id=11, group=[2]),    # withdrawal applied
        ev(12, "leaf2", kind="route", op="new", dst=P1, nhid=11),
    ]
    out = convergence(states, events, owners, nb, 5 * MS, None, dead_ends=dead)
    assert out["converged_ms"] == 7.0 and out["last_switch"] == "leaf2"
    assert out["per_switch"] == {"leaf2": 7.0}          # leaf1 repaired at once, locally
    assert out["still"] == {}
    assert out["fib_changes"]["leaf2"] == 2


def test_a_fault_nobody_repairs_never_converges():
    states, owners, nb = fabric()
    out = convergence(states, [], owners, nb, 0, 100 * MS,
                      dead_ends={("leaf1", "leaf1-spine1"), ("spine1", "spine1-leaf1")})
    assert out["converged_ms"] is None and out["last_switch"] is None
    assert out["still"] == {"leaf2": [P1]}


def test_one_way_gray_loss_is_dead_only_in_its_direction():
    states, owners, nb = fabric()
    # spine1 drops what it sends to leaf1: leaf2's path to P1 via spine1 is dead,
    # leaf1's path to P2 via spine1 is not
    bad = routes_through(states, owners, nb, dead_ends={("spine1", "spine1-leaf1")})
    assert bad == {"leaf2": [P1], "spine1": [P1]}


def test_a_dead_switch_is_routed_around_once_nobody_sends_to_it():
    states, owners, nb = fabric()
    assert routes_through(states, owners, nb, dead_switches={"spine2"}) == \
        {"leaf1": [P2], "leaf2": [P1]}
    events = [ev(3, "leaf1", kind="nexthop", op="new", id=10, group=[1]),
              ev(9, "leaf2", kind="nexthop", op="new", id=10, group=[1])]
    out = convergence(states, events, owners, nb, 0, None, dead_switches={"spine2"})
    assert out["per_switch"] == {"leaf1": 3.0, "leaf2": 9.0}
    assert out["last_switch"] == "leaf2" and out["converged_ms"] == 9.0


def test_events_after_the_end_are_not_replayed():
    states, owners, nb = fabric()
    events = [ev(50, "leaf2", kind="nexthop", op="new", id=10, group=[2])]
    out = convergence(states, events, owners, nb, 0, 40 * MS,
                      dead_ends={("spine1", "spine1-leaf1")})
    assert out["converged_ms"] is None


def test_bfd_parse_and_bounds():
    assert bfd.parse(None) == (300, 3)
    assert bfd.parse("50x4") == (50, 4) and bfd.parse("100msx3") == (100, 3)
    assert bfd.parse("200") == (200, 3)
    for bad in ("x3", "5x3", "300x1", "fast"):
        with pytest.raises(ConfigError):
            bfd.parse(bad)
    assert bfd.detection_bound_ms(300, 3) == pytest.approx(1080.0)


def test_runs_of_losses_mean_and_distribution():
    assert bfd.expected_packets(0.5, 3) == pytest.approx(14.0)
    assert bfd.expected_packets(1.0, 3) == 3.0
    pmf = bfd.run_wait_pmf(0.5, 3, 400)
    assert sum(pmf) == pytest.approx(1.0, abs=1e-9)
    assert pmf[3] == pytest.approx(0.125) and pmf[:3] == [0.0, 0.0, 0.0]
    assert sum(n * p for n, p in enumerate(pmf)) == pytest.approx(14.0, rel=1e-6)


def test_simulated_detection_stays_within_one_interval_of_the_bound_at_full_loss():
    times = bfd.detection_model(1.0, 300, 3, trials=2000)
    assert 600 - 1e-6 <= times[0] and times[-1] <= 900 + 1e-6
    half = bfd.detection_model(0.5, 300, 3, trials=4000)
    mean = sum(half) / len(half)
    # about (E[N] - m) packets at 87.5 % of the interval, then the 900 ms timer
    assert 0.8 * 3600 < mean < 1.2 * 3600


def nlmsg(mtype, body):
    return struct.pack("=IHHII", 16 + len(body), mtype, 0, 0, 0) + body


def rta(kind, payload):
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def test_decoding_link_route_and_next_hop_messages():
    names = {}
    link = nlmsg(16, struct.pack("=BxHiII", 0, 1, 7, 0x1043, 0) + rta(3, b"eth9\0"))
    route = nlmsg(24, struct.pack("=BBBBBBBBI", socket.AF_INET, 24, 0, 0, 254, 186, 0, 1, 0)
                  + rta(1, socket.inet_aton("10.1.2.0")) + rta(30, struct.pack("=I", 42)))
    group = nlmsg(104, struct.pack("=BBBBI", 0, 0, 0, 0, 0) + rta(1, struct.pack("=I", 42))
                  + rta(2, struct.pack("=IBBH", 5, 1, 0, 0) + struct.pack("=IBBH", 6, 1, 0, 0)))
    single = nlmsg(105, struct.pack("=BBBBI", 2, 0, 0, 0, 0) + rta(1, struct.pack("=I", 5))
                   + rta(5, struct.pack("=i", 7)))
    evs = fibmon.decode(link + route + group + single, names)
    assert names == {7: "eth9"}
    assert evs[0] == {"kind": "link", "dev": "eth9", "up": True}
    assert evs[1] == {"kind": "route", "op": "new", "dst": "10.1.2.0/24", "nhid": 42,
                      "devs": [], "type": "unicast"}
    assert evs[2]["group"] == [5, 6] and evs[2]["id"] == 42
    assert evs[3] == {"kind": "nexthop", "op": "del", "id": 5, "dev": "eth9", "group": [],
                      "blackhole": False}
    other_table = nlmsg(24, struct.pack("=BBBBBBBBI", socket.AF_INET, 32, 0, 0, 255, 2, 0, 2,
                                        0) + rta(1, socket.inet_aton("10.1.2.1")))
    assert fibmon.decode(other_table, names) == []     # the local table


def test_a_converged_fabric_reaches_each_leaf_by_every_shortest_path():
    from emulator.fabric import addressing, presets
    from emulator.fabric.routing.fib import expected_routes, missing_routes
    from emulator.fabric.runspec import RunSpec
    from lab.modes import Control
    spec = RunSpec(presets.build("leaf-spine", {"spines": "2", "leaves": "3"}),
                   control=Control.BGP)
    topo = addressing.plan(spec.fabric, "ab01")
    want = expected_routes(topo)
    leaf1 = next(sw for sw in topo["switches"] if sw["name"] == "leaf1")
    uplinks = sorted(p["intf"] for p in leaf1["ports"] if p["peer_kind"] != "host")
    assert want["leaf1"] == {"10.1.1.0/24": uplinks, "10.1.2.0/24": uplinks}
    spine1 = next(sw for sw in topo["switches"] if sw["name"] == "spine1")
    assert want["spine1"]["10.1.2.0/24"] == [next(p["intf"] for p in spine1["ports"]
                                                  if p["peer"] == "leaf3")]
    assert missing_routes(want, want) == []
    short = {sw: dict(r) for sw, r in want.items()}
    short["leaf1"]["10.1.1.0/24"] = uplinks[1:]        # a group still filling
    del short["spine1"]["10.1.2.0/24"]                 # a route not there yet
    assert len(missing_routes(want, short)) == 2
