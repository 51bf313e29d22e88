"""Adaptive routing's pure parts: where switches decide and among which ports,
the marks and the controller's flows for them, the timers in frame times, the
flowlet slot, the readings, the stream comparison's rows and the drill's split
of local and remote flows."""

import pytest

from controller import lb, policy, topology
from controller.fakeswitch import FakeFabric, udp_packet
from controller.messages import Bucket, GroupMod, Output, SwitchState
from emulator.dataplane.adaptive import model
from emulator.errors import ConfigError
from emulator.experiments.compare import stream as stream_cmp
from emulator.experiments.drill import adaptive as drill_adaptive
from emulator.experiments.spec.options import nic_lb
from emulator.experiments.workloads import stream
from emulator.fabric import addressing, presets


def topo(**p):
    params = {"spines": "2", "leaves": "2", "hosts_per_leaf": "1"} | p
    return addressing.plan(presets.build("leaf-spine", params))


def test_leaves_decide_among_their_uplinks_for_remote_hosts_only():
    t = topo(spines="4", leaves="3")
    rts = model.routes(t)
    leaf1_up = tuple(p["port"] for p in t["switches"][0]["ports"] if p["peer_kind"] != "host")
    h = {x["name"]: x["ip"] for x in t["hosts"]}
    assert rts[("leaf1", h["h2"])] == leaf1_up            # a remote leaf: every uplink
    assert ("leaf1", h["h1"]) not in rts                   # its own host: one way
    assert not any(sw.startswith("spine") for sw, _ in rts)   # a spine has one way down


def test_the_plan_tracks_candidates_and_decides_on_ports_from_below():
    t = topo()
    p = model.plan(t)
    assert sorted(p["tracked"]) == [("leaf1", 2), ("leaf1", 3), ("leaf2", 2), ("leaf2", 3)]
    assert p["deciders"] == [("leaf1", 1), ("leaf2", 1)]   # host ports; not from a spine


def test_three_tier_aggregation_switches_decide_too():
    t = addressing.plan(presets.build("three-tier", {}))
    deciding = {sw for sw, _ in model.routes(t)}
    kinds = {s["name"]: s["kind"] for s in t["switches"]}
    assert {kinds[sw] for sw in deciding} >= {"leaf"}
    assert any(kinds[sw] not in ("leaf", "nic") for sw in deciding)


def test_marks_name_ports_1_to_31_and_refuse_more():
    assert model.mark(3) == 35 and model.mark(31) == 63
    with pytest.raises(ConfigError, match="1-31"):
        model.mark(32)


def test_timers_are_frame_times_at_the_port_rate():
    t = model.timers(4170, 40e6, flowlet_frames=16)
    frame = 4170 * 8 / 40e6 * 1e9
    assert t["flowlet_ns"] == pytest.approx(16 * frame, rel=1e-6)
    assert t["half_ns"] == pytest.approx(model.HALF_LIFE_FRAMES * frame, rel=1e-6)
    assert t["pend_ns"] >= model.PENDING_MIN_NS
    # a port at its full rate holds rate * half-life / ln 2 bytes of decaying load
    assert t["load_full"] == pytest.approx(40e6 / 8 * t["half_ns"] / 1e9 / 0.6931, rel=1e-3)


def test_the_flowlet_slot_is_stable_spread_and_per_switch():
    a = model.flowlet_slot(0, "10.0.0.1", "10.0.1.1", 0xC000)
    assert a == model.flowlet_slot(0, "10.0.0.1", "10.0.1.1", 0xC000)
    assert model.flowlet_slot(1, "10.0.0.1", "10.0.1.1", 0xC000) == a + model.FLOWSETS
    slots = {model.flowlet_slot(0, "10.0.0.1", "10.0.1.1", s) for s in range(0xC000, 0xC100)}
    assert len(slots) > 200                        # 256 source ports, few collisions


def test_reading_sums_per_port_and_times_reactions():
    e = dict.fromkeys(model.PORT_NAMES, 0)
    ports = {"leaf1:3": dict(e, frames=10, flowlets=2, moved_in=1, evac_ns=5_500_000,
                             react_sum=3_000_000, react_n=2, react_max=2_000_000),
             "leaf1:4": dict(e, frames=5, flowlets=1, moved_out=1)}
    r = model.reading(ports, {"leaf1:3": 5_000_000})
    assert (r["frames"], r["flowlets"], r["moved"]) == (15, 3, 1)
    assert r["ports"]["leaf1:3"]["down_reaction_ms"] == 0.5
    assert r["ports"]["leaf1:3"]["queue_reaction_ms"] == {"mean": 1.5, "max": 2.0,
                                                         "episodes": 2}
    assert "down_reaction_ms" not in r["ports"]["leaf1:4"]


def ctl(preset="leaf-spine", **p):
    params = ({"spines": "2", "leaves": "2", "hosts_per_leaf": "2"} | p
              if preset == "leaf-spine" else p)
    return topology.from_dict(addressing.plan(presets.build(preset, params), "ab12"))


def test_the_controller_adds_a_mark_flow_per_deciding_port_and_select_group_port():
    t = ctl()
    leaf1 = t.by_name["leaf1"]
    group = GroupMod(1, "select", (Bucket((Output(3),)), Bucket((Output(4),))))
    ff = GroupMod(1 << 16, "ff", (Bucket((Output(5),)), Bucket((Output(6),))))
    flows = lb.adaptive_flows(t, leaf1.dpid, SwitchState(frozenset(), frozenset({group, ff})))
    got = {(dict(f.match)["in_port"], dict(f.match)["ip_dscp"], f.actions) for f in flows}
    assert got == {(h, 32 + p, (Output(p),)) for h in (1, 2) for p in (3, 4)}
    for f in flows:
        m = dict(f.match)
        assert m["udp_dst"] == 4791 and f.priority == lb.PRIO_AR
        assert m["eth_src"] == (lb.STAGE_BIT, lb.STAGE_BIT)      # only the stage's marks
    assert lb.MARK_BASE == model.MARK_BASE                 # the switch's program agrees


def test_adaptive_modes_keep_the_controller_to_ecmp_plus_marks():
    t = ctl()
    group = GroupMod(1, "select", (Bucket((Output(3),)), Bucket((Output(4),))))
    leaf1 = t.by_name["leaf1"].dpid
    desired = {leaf1: SwitchState(frozenset(), frozenset({group}))}
    assert len(lb.augment(t, desired, "dlb")[leaf1].flows) == 4     # 2 host ports x 2
    assert lb.augment(t, desired, "ecmp") is desired
    assert lb.check_mode("controller-dlb") == "controller-dlb"


@pytest.mark.parametrize("preset", ["leaf-spine", "three-tier", "dual-tor"])
def test_the_controller_scopes_marks_to_the_ports_where_the_stage_decides(preset):
    t = ctl(preset)
    plan = model.plan(addressing.plan(presets.build(
        preset, {"spines": "2", "leaves": "2", "hosts_per_leaf": "2"}
        if preset == "leaf-spine" else {}), "ab12"))
    desired = lb.augment(t, policy.desired_state(t, t.all_ports(), "controller"), "dlb")
    marked = {(t.by_dpid[d].name, dict(f.match)["in_port"]) for d, st in desired.items()
              for f in st.flows if f.priority == lb.PRIO_AR}
    assert marked and marked == set(plan["deciders"])
    tracked = {(t.by_dpid[d].name, f.actions[0].port) for d, st in desired.items()
               for f in st.flows if f.priority == lb.PRIO_AR}
    assert tracked == set(plan["tracked"])                # out of the ports it marks


def test_a_hosts_own_dscp_crosses_a_dlb_fabric_on_its_ecmp_route():
    t = ctl()
    live = t.all_ports()
    dlb = fabric_with(t, lb.augment(t, policy.desired_state(t, live, "controller"), "dlb"))
    ecmp = fabric_with(t, policy.desired_state(t, live, "controller"))
    h1, h3 = (next(hp for hp in t.host_ports if hp.host == n) for n in ("h1", "h3"))
    for dscp in (46, lb.MARK_BASE + 3, lb.MARK_BASE + 4, 26):      # 35, 36: uplinks' marks
        pkt = dict(udp_packet(h1, h3), ip_dscp=dscp)
        got, want = dlb.paths(h1, pkt), ecmp.paths(h1, pkt)
        assert sorted(hops for hops, _ in got) == sorted(hops for hops, _ in want)
        assert len(got) == 2                                    # both uplinks: ECMP
        for _, (kind, hp, sent) in got:
            assert kind == "host" and hp.host == "h3" and sent["ip_dscp"] == dscp


def test_only_a_frame_the_stage_marked_at_a_deciding_port_takes_its_mark():
    t = ctl()
    leaf1 = t.by_name["leaf1"]
    dlb = fabric_with(t, lb.augment(t, policy.desired_state(t, t.all_ports(), "controller"),
                                    "dlb"))
    h1, h3 = (next(hp for hp in t.host_ports if hp.host == n) for n in ("h1", "h3"))
    sw = dlb.switches[leaf1.dpid]
    marked = dict(udp_packet(h1, h3), ip_dscp=lb.MARK_BASE + 4, in_port=1,
                  eth_src="03" + h1.mac[2:])                      # the group bit set
    assert [p for p, _ in sw.forward(marked)] == [4]
    assert sw.lookup(dict(marked, in_port=3)).priority != lb.PRIO_AR    # from a spine
    assert sw.lookup(dict(marked, eth_src=h1.mac)).priority != lb.PRIO_AR   # the host's
    spine = dlb.switches[t.by_name["spine1"].dpid]
    assert not any(f.priority == lb.PRIO_AR for f in spine.flows.values())


def fabric_with(t, desired):
    fab = FakeFabric(t)
    fab.apply({d: policy.install(st) for d, st in desired.items()})
    return fab


def test_nics_place_out_of_order_where_switches_move_flows_mid_burst():
    assert nic_lb("packet") == {"entropy": "qp", "ooo": True}
    assert nic_lb("dlb")["ooo"] and nic_lb("spray")["ooo"]
    assert nic_lb("ecmp") == {"entropy": "qp", "ooo": False}
    assert not nic_lb("controller-dlb")["ooo"]


def test_a_stream_needs_two_hosts_on_two_leaves():
    t = topo(hosts_per_leaf="2")
    assert stream.parse("h2:h4", t) == ("h2", "h4")
    for bad, why in (("h2", "SRC:DST"), ("h2:h9", "unknown host"), ("h1:h2", "share a leaf")):
        with pytest.raises(ConfigError, match=why):
            stream.parse(bad, t)


def test_stream_rows_take_each_modes_loss_against_its_own_quiet_run():
    def run(mode, eff, streamed, p99=None, react=None):
        r = {"mode": mode, "efficiency": eff, "wrong": 0, "reordered": 1,
             "fidelity": {"verdict": "faithful"}, "adaptive": None}
        if streamed:
            r["stream"] = {"uplink": "leaf1:3", "queue_p99_ms": p99}
            if react:
                r["adaptive"] = {"switches": {"leaf1": {"ports": {"3": {
                    "queue_reaction_ms": {"mean": react, "max": react}}}}}}
        return r
    runs = [run("controller-dlb", 0.98, False), run("controller-dlb", 0.78, True, 15.0),
            run("dlb", 0.97, False), run("dlb", 0.95, True, 2.0, 1.5)]
    rows = {r["mode"]: r for r in stream_cmp.rows(runs, ["controller-dlb", "dlb"])}
    assert rows["controller-dlb"]["loss"] == pytest.approx(0.2)
    assert rows["dlb"]["loss"] == pytest.approx(0.02)
    assert rows["dlb"]["reaction_ms"] == 1.5 and rows["controller-dlb"]["reaction_ms"] is None
    assert "controller-dlb" in stream_cmp.table(list(rows.values()))


def test_a_crossing_flow_is_local_when_it_leaves_its_first_switch_by_the_dead_link():
    from emulator.experiments.spec.scenario import Event
    t = topo()
    cut = [Event(1.0, "link_down", "leaf1-spine1", {})]
    assert drill_adaptive.is_local(["h1:eth0", "leaf1:eth2", "spine1:eth2", "leaf2:eth1",
                                    "h2"], cut, t)
    assert not drill_adaptive.is_local(["h2:eth0", "leaf2:eth2", "spine1:eth1",
                                        "leaf1:eth1", "h1"], cut, t)


def test_cut_rows_take_the_data_planes_first_frame_elsewhere():
    def run(mode, eff, cut=None):
        return {"mode": mode, "efficiency": eff, "wrong": 0, "reordered": 0,
                "fidelity": {"verdict": "faithful"}, "adaptive": None,
                **({"cut": cut} if cut else {})}
    runs = [run("ecmp", 0.97), run("ecmp", 0.40, {"happened": True}),
            run("dlb", 0.97), run("dlb", 0.95, {"happened": True,
                                                "first_elsewhere_after_cut_ms": 1.4})]
    rows = {r["mode"]: r for r in stream_cmp.rows(runs, ["ecmp", "dlb"])}
    assert rows["ecmp"]["loss"] == pytest.approx(0.57) and rows["ecmp"]["reaction_ms"] is None
    assert rows["dlb"]["reaction_ms"] == 1.4
    assert "with cut" in stream_cmp.table(list(rows.values()), "cut")


class FakeMap:
    """A BPF array map's lookup/update over a dict (the stage's reading only)."""

    def __init__(self, layout, n):
        self.layout, self.d = layout, {k: layout.pack(*[0] * len(layout.names))
                                       for k in range(n)}

    def lookup(self, k):
        return self.d[k]

    def update(self, k, v):
        self.d[k] = v

    def set(self, k, **values):
        e = dict(zip(self.layout.names, self.layout.unpack(self.d[k]))) | values
        self.d[k] = self.layout.pack_fields(**e)


def test_a_cut_is_settled_into_frames_lost_at_egress_before_it_and_rescued_once_per_cut():
    from emulator.dataplane.adaptive.stage import CONTROL, PORT, AdaptiveStage
    F = 1000
    st = object.__new__(AdaptiveStage)
    st.keys, st.frame = {("leaf1", 3): 0}, F
    st.maps = {"ar_ports": FakeMap(PORT, 1), "ar_ctls": FakeMap(CONTROL, 1)}
    st.downs, st.settled, st.rescues, st.cuts = {}, {}, {}, []
    ports, ctls = st.maps["ar_ports"], st.maps["ar_ctls"]
    ports.set(0, **{"in": 10 * F, "out": 10 * F}, sent=10 * F, sent_in=10 * F, frames=10)
    st.link_news([("leaf1", 3)], True, 5)
    # after the cut: 6 frames decided towards it; 3 entered its queue and never came
    # out, 1 was rescued at its egress, 2 never reached it (1 of them in the detection)
    ports.set(0, **{"in": 13 * F}, sent=16 * F, sent_in=14 * F, frames=16, rescued=1)
    ctls.set(0, late=F)
    st.link_news([("leaf1", 3)], False, 9)
    assert st.cuts == [{"port": "leaf1:3", "down_ns": 5, "egress_frames": 3, "lost_frames": 2,
                        "before_cut_frames": 1, "in_detection_frames": 1,
                        "rescued_frames": 1}]
    # the next cut counts only its own: 2 more queued, nothing else
    st.link_news([("leaf1", 3)], True, 20)
    ports.set(0, **{"in": 15 * F})
    st.link_news([("leaf1", 3)], False, 30)
    assert {k: st.cuts[1][k] for k in ("egress_frames", "lost_frames", "rescued_frames")} \
        == {"egress_frames": 2, "lost_frames": 0, "rescued_frames": 0}
