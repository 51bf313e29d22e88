"""The lossless fabric's pure parts: flow-control settings, thresholds, the pause
state of a port, the watchdog, cycles, storms' targets, the agent's decisions and
the pause gate's netlink message."""

import struct

import pytest

from emulator.errors import ConfigError
from emulator.fabric import addressing, lossless, presets, spec
from emulator.fabric.lossless import IngressPause, PfcConfig, Watchdog

FRAME = 4238


def test_flow_control_values():
    assert lossless.parse_flow_control(True) == "pfc"
    assert lossless.parse_flow_control("false") == "none"
    assert lossless.parse_flow_control("pfc") == "pfc"
    assert lossless.parse_flow_control("credit") == "credit"
    with pytest.raises(ValueError, match="not a flow control"):
        lossless.parse_flow_control("maybe")


def test_preset_and_file_keys():
    assert presets.build("leaf-spine", {"lossless": "true"}).flow_control == "pfc"
    assert presets.build("dual-plane", {"flow_control": "pfc"}).flow_control == "pfc"
    assert presets.build("leaf-spine", {}).flow_control == "none"
    with pytest.raises(ConfigError, match="lossless"):
        presets.build("leaf-spine", {"lossless": "maybe"})
    with pytest.raises(ConfigError, match="disagree"):
        presets.build("leaf-spine", {"lossless": "true", "flow_control": "none"})
    text = spec.dump(presets.build("leaf-spine", {"lossless": "true"}))
    assert "flow_control: pfc" in text
    assert spec.load_text(text).flow_control == "pfc"
    doc = text.replace("flow_control: pfc", "lossless: true\nflow_control: none")
    with pytest.raises(ConfigError, match="disagree"):
        spec.load_text(doc)


def test_thresholds_scale_with_rate_and_reaction():
    cfg = PfcConfig()
    t = lossless.thresholds(40_000_000, FRAME, cfg)
    assert t["xoff"] == 8 * FRAME
    assert t["xon"] == 6 * FRAME
    # 10 ms at 40 Mbit/s is 50000 bytes, plus one frame in flight at each end
    assert t["headroom"] == 50000 + 2 * FRAME
    assert t["limit"] == t["xoff"] + t["headroom"]
    fast = lossless.thresholds(400_000_000, FRAME, cfg)
    assert fast["headroom"] - 2 * FRAME == 10 * 50000
    assert lossless.quantum_s(40_000_000) == pytest.approx(12.8e-6)


def test_credit_mode_returns_credit_frame_by_frame():
    pfc = lossless.thresholds(40_000_000, FRAME, PfcConfig())
    credit = lossless.thresholds(40_000_000, FRAME, PfcConfig(mode="credit"))
    assert credit["limit"] == pfc["limit"] and credit["xoff"] == pfc["xoff"]
    assert credit["xon"] == credit["xoff"] - FRAME
    with pytest.raises(ValueError, match="pfc or credit"):
        PfcConfig(mode="xon")


def test_pause_frames_count_refreshes():
    # 65535 quanta at 40 Mbit/s pause 0.84 s: refreshed every 0.42 s
    assert lossless.pause_frames(0.1, 40_000_000) == 2
    assert lossless.pause_frames(1.0, 40_000_000) == 4


def test_ingress_pause_hysteresis():
    p = IngressPause(xoff=100, xon=60)
    assert p.update(99, 0.0) is None
    assert p.update(100, 1.0) == "pause"
    assert p.update(70, 2.0) is None           # between xon and xoff: still paused
    assert p.update(120, 3.0) is None
    assert p.update(60, 4.0) == "resume"
    assert p.episodes == [(1.0, 4.0)]
    assert p.paused_s(10.0) == 3.0
    assert p.peak == 120


def _run_watchdog(storm_s, detect=1.0, restore=1.0, poll=0.1, sending=False):
    wd, events = Watchdog(detect, restore), []
    t, sent = 0.0, 0
    while t < storm_s + restore + 3 * poll:
        paused = 0.0 if t < storm_s else None
        if sending:
            sent += 1
        ev = wd.update(t, paused, 5000, sent)
        if ev:
            events.append((ev, round(t, 3)))
        t += poll
    return events


def test_watchdog_storm_three_times_detection_triggers_within_detection_plus_poll():
    events = _run_watchdog(3.0)
    assert events[0][0] == "storm" and events[0][1] <= 1.0 + 0.1
    assert events[1][0] == "restore" and 3.0 + 1.0 <= events[1][1] <= 3.0 + 1.0 + 0.1 + 1e-9


def test_watchdog_short_storm_or_moving_queue_triggers_nothing():
    assert _run_watchdog(0.5) == []
    assert _run_watchdog(3.0, sending=True) == []      # paused but transmitting


def test_watchdog_off_watches_without_acting():
    wd = Watchdog(1.0, 1.0, mitigate=False)
    assert all(wd.update(t / 10, 0.0, 5000, 0) is None for t in range(40))
    assert wd.stuck and not wd.mitigating


def test_pfc_settings_from_file_and_presets():
    assert lossless.parse_settings({"watchdog": "forward", "detection": "500ms"}) == \
        (("wd_action", "forward"), ("wd_detect_s", 0.5))
    with pytest.raises(ValueError, match="pfc.detection: '5'"):
        lossless.parse_settings({"detection": "5"})
    with pytest.raises(ValueError, match="unknown"):
        lossless.parse_settings({"quanta": 3})
    f = presets.build("leaf-spine", {"lossless": "true", "pfc_watchdog": "off",
                                     "pfc_xoff_frames": "12"})
    assert dict(f.pfc) == {"wd_action": "off", "xoff_frames": 12.0}
    back = spec.load_text(spec.dump(f))
    assert back.pfc == f.pfc and back.flow_control == "pfc"
    with pytest.raises(ConfigError, match="-P pfc_watchdog"):
        presets.build("leaf-spine", {"pfc_watchdog": "maybe"})


def test_watchdog_empty_queue_is_no_storm():
    wd = Watchdog(1.0, 1.0)
    assert all(wd.update(t / 10, 0.0, 0, 0) is None for t in range(40))


def test_paused_cycle():
    ring = {"leaf2": {"spine2"}, "spine2": {"leaf3"}, "leaf3": {"spine1"}, "spine1": {"leaf2"}}
    cycle = lossless.paused_cycle(ring)
    assert sorted(cycle) == ["leaf2", "leaf3", "spine1", "spine2"]
    assert lossless.paused_cycle({"a": {"b"}, "b": {"c"}, "d": {"c"}}) is None
    assert lossless.paused_cycle({}) is None


def test_storm_targets():
    topo = addressing.plan(presets.build("leaf-spine", {}))
    assert lossless.storm_end("h1", topo) == "h1:eth0"
    assert lossless.paused_hop("h1", topo) == ("leaf1", "eth1")
    assert lossless.storm_end("leaf1-spine1", topo) == "leaf1:eth3"
    assert lossless.paused_hop("leaf1-spine1", topo) == ("spine1", "eth1")
    assert lossless.storm_end("h3-leaf2", topo) == "h3:eth0"
    assert lossless.storm_end("leaf1-h1", topo) == "leaf1:eth1"
    assert lossless.paused_hop("leaf1-h1", topo) == ("h1", "eth0")
    with pytest.raises(ConfigError, match="no link"):
        lossless.storm_end("leaf1-leaf2", topo)
    with pytest.raises(ConfigError, match="a host"):
        lossless.storm_end("nosuch", topo)


def test_gate_message_encodes_a_tbf_change():
    from emulator.dataplane.lossless import pfc
    msg = pfc.gate_message(7, 1, FRAME, 1 << 20, seq=3)
    length, mtype, flags, seq, _ = struct.unpack_from("=IHHII", msg)
    assert (length, mtype, seq) == (len(msg), 36, 3)
    assert flags == 1 | 4                              # request, ack; no create: a change
    _, _, _, ifindex, handle, parent, _ = struct.unpack_from("=BBHiIII", msg, 16)
    assert (ifindex, handle, parent) == (7, pfc.GATE_HANDLE, pfc.CLASS_LOSSLESS)
    assert b"tbf\0" in msg
    assert struct.pack("=I", FRAME) in msg             # TCA_TBF_BURST in bytes
    assert len(pfc.kick_frame()) == 60
    assert pfc.kick_frame()[12:14] == b"\x88\xb5"


class FakeGates:
    def __init__(self):
        self.calls, self.errors = [], []

    def set(self, key, closed):
        self.calls.append((key, closed))


def _agent():
    """Two switch ports facing each other's hosts: key 0 (leaf1:eth1, from h1 = key 2)
    and key 1 (leaf1:eth2, from h2 = key 3)."""
    from emulator.dataplane.lossless import pfc
    from emulator.dataplane.lossless.pfc_agent import Agent
    t = lossless.thresholds(40_000_000, FRAME)
    ports = [{"key": 0, "name": "leaf1:eth1", "node": "leaf1", "kind": "switch",
              "peer_key": 2, "rate_bps": 40_000_000, **t},
             {"key": 1, "name": "leaf1:eth2", "node": "leaf1", "kind": "switch",
              "peer_key": 3, "rate_bps": 40_000_000, **t},
             {"key": 2, "name": "h1:eth0", "node": "h1", "kind": "host", "peer_key": 0,
              "rate_bps": 40_000_000},
             {"key": 3, "name": "h2:eth0", "node": "h2", "kind": "host", "peer_key": 1,
              "rate_bps": 40_000_000}]
    cfg = {"ports": ports, "frame": FRAME,
           "pfc": {"wd_detect_s": 1.0, "wd_restore_s": 1.0, "wd_poll_s": 0.1}}
    mv = [0] * (pfc.WORDS * len(ports))
    gates = FakeGates()
    return Agent(cfg, mv, gates), mv, gates, t


def test_agent_pauses_the_upstream_past_xoff_and_resumes_at_xon():
    from emulator.dataplane.lossless import pfc
    agent, mv, gates, t = _agent()
    ing = pfc.E_ING // 8
    assert agent.poll(0.0) == agent.idle_s == 0.002     # quiet: looks every 2 ms
    mv[0 * pfc.WORDS + ing] = t["xoff"] // 2
    assert agent.poll(0.0005) == agent.pc.poll_s       # half way up: every 0.5 ms
    mv[0 * pfc.WORDS + ing] = t["xoff"]
    agent.poll(0.001)
    assert gates.calls == [(2, True)]                  # h1's NIC paused
    mv[0 * pfc.WORDS + ing] = t["xon"]
    agent.poll(0.002)
    assert gates.calls == [(2, True), (2, False)]
    rep = agent.report(1.0, 0.0)
    assert rep["ports"]["leaf1:eth1"]["pauses_sent"] == 1
    assert rep["ports"]["h1:eth0"]["pause_frames_received"] == 2     # XOFF and XON
    assert rep["ports"]["h1:eth0"]["paused_s"] == pytest.approx(0.001)


def test_agent_blames_itself_for_ingress_drops_unless_the_watchdog_forwards():
    from emulator.dataplane.lossless import pfc
    w, drops, late = pfc.WORDS, pfc.E_ING_DROPS // 8, pfc.E_LATE // 8
    agent, mv, _, _ = _agent()
    mv[0 * w + drops] = 3                      # leaf1:eth1 overflowed: the pause was late
    agent.poll(0.0)
    assert mv[0 * w + late] == 3 and mv[1 * w + late] == 0
    agent.poll(0.001)                          # counted once
    assert mv[0 * w + late] == 3
    assert agent.report(1.0, 0.0)["ports"]["leaf1:eth1"]["late_pause_drops"] == 3
    agent, mv, _, _ = _agent()
    agent.pc = lossless.PfcConfig(wd_action="forward")
    agent.wd[2].mitigating_since = 0.0         # h1's NIC ignores pauses: the network's
    mv[0 * w + drops] = 2
    agent.poll(0.0)
    assert mv[0 * w + late] == 0


def test_backlogs_are_read_a_few_ports_a_look_and_paced_by_the_fabric_size():
    from emulator.dataplane.lossless.pfc_agent import Agent, Backlogs

    class Reader:                  # QdiscReader.root: (backlog, drops, sent) of one port
        asked = []

        def root(self, ifindex):
            self.asked.append(ifindex)
            return (100 * ifindex, 0, 0)
    ports = [{"key": k, "kind": "switch", "netns": None, "ifindex": k + 1} for k in range(5)]
    b = Backlogs(ports)
    b.ports = [(Reader(), i, k) for _, i, k in b.ports]
    b.start()
    assert b.step() is None and Reader.asked == [1, 2]        # two at a look
    b.start()                                                  # under way: goes on
    assert b.step() is None and Reader.asked == [1, 2, 3, 4]
    assert b.step() == {k: 100 * (k + 1) for k in range(5)}
    assert b.step() is None and len(Reader.asked) == 5         # done until started again
    big = Backlogs([dict(p, key=k, ifindex=k + 1) for k, p in enumerate(ports * 200)])
    agent = Agent({"ports": [], "frame": FRAME, "pfc": {}}, [], None, backlogs=big)
    # 1000 ports, a look every 2 ms when idle, a watchdog poll of 100 ms
    assert agent.idle_s == 0.002 and big.per_look == 20


def test_agent_storm_is_detected_mitigated_and_restored():
    from emulator.dataplane.lossless import pfc
    agent, mv, gates, _ = _agent()
    w = pfc.WORDS
    mv[0 * w + pfc.E_EG_IN // 8] = 9000                 # leaf1 -> h1 holds frames
    agent.storm(2, True, 0.0)                          # h1's NIC pauses leaf1 forever
    assert gates.calls == [(0, True)]
    t = 0.0
    while t < 3.0:
        agent.poll(t)
        t += 0.01
    assert mv[0 * w + pfc.E_FLAGS // 8] & pfc.FLAG_DROP
    assert gates.calls[1] == (0, False)                # mitigated: the queue sends again
    agent.storm(2, False, 3.0)
    while t < 4.3:
        agent.poll(t)
        t += 0.01
    assert not mv[0 * w + pfc.E_FLAGS // 8] & pfc.FLAG_DROP
    storm = agent.report(t, 0.0)["storms"][0]
    assert storm["end"] == "h1:eth0" and storm["queue"] == "leaf1:eth1"
    assert 1.0 <= storm["detected_after_s"] <= 1.1 + 1e-9
    assert 1.0 <= storm["restored_after_stop_s"] <= 1.2


def test_agent_forgets_counts_no_queue_holds():
    from emulator.dataplane.lossless import pfc
    agent, mv, _, _ = _agent()
    w = pfc.WORDS
    mv[0 * w + pfc.E_EG_IN // 8] = 5000                # a queue purged by a link down
    mv[1 * w + pfc.E_ING // 8] = 4000
    mv[1 * w + pfc.E_QUEUED // 8] = 4000
    agent.reconcile({0: 0, 1: 0})
    assert mv[1 * w + pfc.E_CORR // 8] == 0              # one look is not enough
    agent.reconcile({0: 0, 1: 0})
    assert mv[0 * w + pfc.E_EG_IN // 8] == 0
    assert mv[1 * w + pfc.E_ING // 8] - mv[1 * w + pfc.E_CORR // 8] == 0
    assert mv[1 * w + pfc.E_QUEUED // 8] == 0
    mv[1 * w + pfc.E_ING // 8] += 4000
    mv[1 * w + pfc.E_QUEUED // 8] = 4000
    agent.reconcile({0: 4238, 1: 0})                  # a queue not empty: left alone
    agent.reconcile({0: 4238, 1: 0})
    assert mv[1 * w + pfc.E_ING // 8] - mv[1 * w + pfc.E_CORR // 8] == 4000


def test_agent_corrects_counts_of_frames_lost_inside_a_switch():
    from emulator.dataplane.lossless import pfc
    agent, mv, _, _ = _agent()
    w = pfc.WORDS
    mv[1 * w + pfc.E_ING // 8] = 5 * FRAME               # counted in, never queued
    mv[1 * w + pfc.E_QUEUED // 8] = FRAME
    mv[0 * w + pfc.E_EG_IN // 8] = FRAME                # the switch is not idle
    agent.reconcile({0: FRAME, 1: 0})
    assert mv[1 * w + pfc.E_CORR // 8] == 0              # once may be frames in flight
    agent.reconcile({0: FRAME, 1: 0})
    assert mv[1 * w + pfc.E_CORR // 8] == 3 * FRAME      # twice: lost, but one frame
    mv[1 * w + pfc.E_ING // 8] += FRAME // 2             # within two frames: left alone
    agent.reconcile({0: FRAME, 1: 0})
    agent.reconcile({0: FRAME, 1: 0})
    assert mv[1 * w + pfc.E_CORR // 8] == 3 * FRAME


def test_pfc_text_names_storms_and_reaction():
    from emulator.report.summary import pfc_text
    doc = {"lossless_priority": 3, "pauses": 2, "pause_frames": 4, "paused_s_max": 0.5,
           "ingress_drops": 0, "headroom_used_max": 100,
           "thresholds": {"leaf1:eth1": {"headroom": 23476}, "ports": 8},
           "reaction_frames": {"count": 2, "median": 1.9, "p95": 3.2, "max": 3.2},
           "storms": [{"end": "h1:eth0", "queue": "leaf1:eth1", "start": 1.0,
                       "duration_s": 3.0, "detected_after_s": 1.05,
                       "restored_after_stop_s": 1.02}],
           "watchdog_events": [], "deadlocks": [{"cycle": ["a", "b"], "t": 2.0}]}
    text = pfc_text(doc)
    assert "median 1.9 / p95 3.2 / max 3.2 frame times" in text
    assert "watchdog on leaf1:eth1 after 1050 ms" in text
    assert "a -> b" in text
    assert "the pause model's" not in text
    late = pfc_text(dict(doc, ingress_drops=3, late_pause_drops=3))
    assert "ingress drops 3 (3 of them the pause model's, too late: emulation drops)" in late
    assert pfc_text(None) == ""


def test_lossless_compare_roles_and_victim_window():
    from emulator.experiments.compare import lossless as lossless_cmp
    topo = addressing.plan(presets.build("leaf-spine", {"hosts_per_leaf": "3"}))
    hosts, victim = lossless_cmp.roles(topo, "incast")
    assert victim == ("h12", "h2") and hosts[0] == "h1"
    assert len(hosts) == 9 and "h2" not in hosts and "h12" not in hosts
    with pytest.raises(ConfigError, match="--victim"):
        lossless_cmp.roles(topo, "incast", "h1:h2")
    rx = {"flows": [{"flow": "x"}], "t0_ns": 0, "bin_ms": 10.0,
          "timelines": {"x": [12500] * 100}}             # 12.5 kB per 10 ms: 10 Mbit/s
    assert lossless_cmp.window_mbps(rx, 100_000_000, 500_000_000) == 10.0
    assert lossless_cmp.parse_settings("on,off") == ["pfc", "none"]
    with pytest.raises(ConfigError):
        lossless_cmp.parse_settings("sometimes")


def test_deadlock_plan_makes_a_ring_of_buffer_dependencies():
    topo = addressing.plan(presets.build("leaf-spine", {"spines": "2", "leaves": "4"}))
    routes, streams = lossless.deadlock_plan(topo)
    ports = {(sw["name"], p["name"]): p["peer"] for sw in topo["switches"] for p in sw["ports"]}
    hosts_of = {p["peer"]: sw["name"] for sw in topo["switches"] for p in sw["ports"]
                if p["peer_kind"] == "host"}
    ip_of = {h["name"]: h["ports"][0]["ip"] for h in topo["hosts"]}
    table = {(sw, ports[(sw, i)] if (sw, i) in ports else None, d): ports[(sw, out)]
             for sw, ins, dsts, out in routes for i in ins for d in dsts}

    def path(src, dst):
        node, prev, hops = hosts_of[src], src, []
        while node != hosts_of[dst]:
            # beyond the plan's routes, the controller's: a spine goes down to the leaf
            nxt = table.get((node, prev, ip_of[dst]), hosts_of[dst])
            hops.append((node, nxt))
            prev, node = node, nxt
        return hops
    deps = {}
    for src, dst in streams:
        hops = path(src, dst)
        for (a, b), (c, d) in zip(hops, hops[1:]):
            deps.setdefault(f"{a}->{b}", set()).add(f"{c}->{d}")
    cycle = lossless.paused_cycle(deps)
    assert sorted(cycle) == ["leaf2->spine2", "leaf3->spine1", "spine1->leaf2",
                             "spine2->leaf3"]
    with pytest.raises(ConfigError, match="at least 4 leaves"):
        lossless.deadlock_plan(addressing.plan(presets.build("leaf-spine", {"leaves": "3"})))


def test_fabric_file_storm_is_a_link_impairment():
    doc = """
name: s
lossless: true
topology:
  defaults: {rate: 40Mbps}
  nodes: {h1: {kind: host}, h2: {kind: host}, leaf1: {kind: leaf}, leaf2: {kind: leaf},
          spine1: {kind: spine}}
  links:
    - {endpoints: ["h1:eth0", "leaf1:eth1"], pfc_storm: h1}
    - {endpoints: ["h2:eth0", "leaf2:eth1"]}
    - {endpoints: ["leaf1:eth2", "spine1:eth1"]}
    - {endpoints: ["leaf2:eth2", "spine1:eth2"]}
"""
    f = spec.load_text(doc)
    assert f.links[0].pfc_storm == "h1" and f.links[0].impaired
    topo = addressing.plan(f)
    assert topo["links"][0]["impair"]["pfc_storm"] == "h1"
    assert spec.load_text(spec.dump(f)).links[0].pfc_storm == "h1"
    with pytest.raises(ConfigError, match="pfc_storm.*h1 or leaf1"):
        spec.load_text(doc.replace("pfc_storm: h1", "pfc_storm: h2"))
    with pytest.raises(ConfigError, match="needs a lossless fabric"):
        spec.load_text(doc.replace("lossless: true", "lossless: false"))


def test_a_dragonfly_gets_a_lossless_class_per_routing_phase():
    df = presets.build("dragonfly", {"a": "3", "h": "1", "p": "1"})
    assert lossless.routing_classes(df, "minimal") == 2       # local, global, local
    for mode in ("valiant", "ugal", "ugal-l"):                 # up to two global hops
        assert lossless.routing_classes(df, mode) == 3
    assert lossless.routing_classes(df, "other") == 3        # a mode it does not know: 3
    plus = presets.build("dragonfly-plus", {})
    assert lossless.routing_classes(plus, "minimal") == 2
    for name in ("leaf-spine", "three-tier", "rail-only"):      # no groups joined by links
        assert lossless.routing_classes(presets.build(name, {}), "minimal") == 1
    wide = presets.build("dragonfly", {"a": "2", "h": "15", "p": "16"})   # 16 + 1 + 15
    with pytest.raises(ConfigError, match="limits a switch to 31 ports; g1r1 has 32"):
        lossless.routing_classes(wide, "minimal")


def test_phase_ports_are_the_global_link_ends_both_ways():
    def sw(name, pod, *peers):
        return {"name": name, "pod": pod, "ports": [
            {"port": i + 1, "peer": p, "peer_kind": "host" if p.startswith("h") else "switch"}
            for i, p in enumerate(peers)]}
    topo = {"switches": [sw("a1", 1, "h1", "a2", "b1"), sw("a2", 1, "h2", "a1"),
                         sw("b1", 2, "h3", "a1", "b2"), sw("b2", 2, "h4", "b1")]}
    assert lossless.phase_ports(topo) == {("a1", 3), ("b1", 2)}
    for s in topo["switches"]:
        s["pod"] = None                                          # not a dragonfly
    assert lossless.phase_ports(topo) == set()


def test_gate_messages_name_their_class_gate():
    from emulator.dataplane.lossless import pfc
    msg = pfc.gate_message(7, 1, FRAME, 1 << 20, cls=2)
    handle, parent = struct.unpack_from("=II", msg, 16 + 8)
    assert handle == pfc.GATE_HANDLE + (2 << 16) and parent == pfc.CLASS_LOSSLESS + 2


def test_a_deadlock_is_a_cycle_seen_at_two_looks_in_a_row():
    w = lossless.CycleWatch()
    for t, cycle in ((0.1, None), (0.2, ["a", "b"]), (0.3, None),      # a moment: not named
                     (0.4, ["a", "c"]), (0.5, ["a", "c"]), (0.6, ["a", "c"]),
                     (0.7, None), (0.8, ["a", "c"]), (0.9, ["a", "c"])):
        w.update(cycle, t)
    assert w.named == [{"cycle": ["a", "c"], "t": 0.4}, {"cycle": ["a", "c"], "t": 0.8}]
