"""Modeled loss-of-signal detection and the drill's stall figure (pure, no root).

``detect.parse_detect`` reads ``--detect``; ``Injector.switch_ports`` and
``_neighbour_ports`` decide which switch ports a cut or a crash signals;
the port-mod the Detector sends is os-ken's encoding, checked field by
field against the OpenFlow 1.3 layout; ``drill_stats.summarise`` reports the stall (the longest gap of the
flows that do not cross the fault) apart from the crossing flows' gap;
``ofcodec.port_is_live`` treats a config-down port as dead.
"""

import struct
import types

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp13
from os_ken.ofproto import ofproto_v1_3_parser as parser13
from os_ken.ofproto import ofproto_v1_5 as ofp15
from os_ken.ofproto import ofproto_v1_5_parser as parser15

from controller.ofcodec import port_is_live
from emulator.dataplane.faults import Injector
from emulator.dataplane.links import detect
from emulator.errors import ConfigError
from emulator.experiments.drill import stats as drill_stats
from emulator.fabric import addressing, presets


@pytest.mark.parametrize("text,seconds", [("os", None), ("OS", None), ("1ms", 0.001),
                                          ("500us", 0.0005), ("0.002s", 0.002), ("3", 0.003),
                                          ("0", 0.0), ("0ms", 0.0)])
def test_parse_detect(text, seconds):
    assert detect.parse_detect(text) == seconds


@pytest.mark.parametrize("text", ["", "fast", "-1ms", "11s", "1 parsec", "ms"])
def test_parse_detect_rejects_what_is_not_a_delay(text):
    with pytest.raises(ConfigError) as e:
        detect.parse_detect(text)
    assert "--detect" in str(e.value) and "1ms" in str(e.value)


def injector(topo, tmp_path):
    session = types.SimpleNamespace(topo=topo, dir=str(tmp_path))
    return Injector(session, log_path=str(tmp_path / "faults.jsonl"))


def test_a_cut_signals_both_switch_ends_and_a_host_link_only_the_switch(tmp_path):
    topo = addressing.plan(presets.build("leaf-spine", {"spines": "2", "leaves": "2",
                                                        "hosts_per_leaf": "1"}))
    inj = injector(topo, tmp_path)
    leaf1 = next(s for s in topo["switches"] if s["name"] == "leaf1")
    up = next(p for p in leaf1["ports"] if p["peer"] == "spine1")
    ports = inj.switch_ports("leaf1-spine1")
    assert ports == [("leaf1", up["port"]), ("spine1", up["peer_port"])]
    assert inj.switch_ports("spine1-leaf1") == [("spine1", up["peer_port"]),
                                                ("leaf1", up["port"])]
    down = next(p for p in leaf1["ports"] if p["peer"] == "h1")
    assert inj.switch_ports("h1-leaf1") == [("leaf1", down["port"])]


def test_a_crash_signals_every_switch_facing_it(tmp_path):
    topo = addressing.plan(presets.build("leaf-spine", {"spines": "2", "leaves": "3",
                                                        "hosts_per_leaf": "1"}))
    inj = injector(topo, tmp_path)
    faced = inj._neighbour_ports("spine1")
    assert sorted(sw for sw, _ in faced) == ["leaf1", "leaf2", "leaf3"]
    for sw, port in faced:
        entry = next(p for s in topo["switches"] if s["name"] == sw
                     for p in s["ports"] if p["port"] == port)
        assert entry["peer"] == "spine1"
    # a leaf's crash: its spines, never its hosts (a host has no switch port to tell)
    assert sorted(sw for sw, _ in inj._neighbour_ports("leaf1")) == ["spine1", "spine2"]


@pytest.mark.parametrize("down", [True, False])
def test_the_port_mod_sets_or_clears_port_down_only(down):
    msg = parser13.OFPPortMod(detect._Datapath(), port_no=3, hw_addr="aa:bb:cc:00:00:03",
                              config=ofp13.OFPPC_PORT_DOWN if down else 0,
                              mask=ofp13.OFPPC_PORT_DOWN)
    msg.xid = 7
    msg.serialize()
    version, msg_type, length, xid = detect.ofproto_parser.header(bytes(msg.buf))
    assert (version, msg_type, length, xid) == (ofp13.OFP_VERSION, ofp13.OFPT_PORT_MOD,
                                                ofp13.OFP_PORT_MOD_SIZE, 7)
    # port_no, hw_addr, config, mask, advertise (ofp_port_mod, OpenFlow 1.3)
    port_no, hw, config, mask, _ = struct.unpack_from("!I4x6s2xIII", bytes(msg.buf), 8)
    assert port_no == 3 and hw == bytes.fromhex("aabbcc000003")
    assert mask == ofp13.OFPPC_PORT_DOWN
    assert config == (ofp13.OFPPC_PORT_DOWN if down else 0)


def port(config=0, state=ofp15.OFPPS_LIVE):
    return parser15.OFPPort(port_no=1, length=0, hw_addr="00:00:00:00:00:01", name=b"p",
                            config=config, state=state, properties=[])


def test_a_config_down_port_is_dead_to_the_controller():
    assert port_is_live(port())
    assert not port_is_live(port(config=ofp15.OFPPC_PORT_DOWN))
    assert not port_is_live(port(state=ofp15.OFPPS_LINK_DOWN))
    assert not port_is_live(port(config=ofp15.OFPPC_PORT_DOWN, state=ofp15.OFPPS_LINK_DOWN))


def test_a_port_whose_bfd_session_is_down_is_dead_to_the_controller():
    # carrier up, not config-down, but Open vSwitch cleared LIVE (BFD forwarding false)
    assert not port_is_live(port(state=0))


SHOW = """---- fl1234l1-e3 ----
\tForwarding: true
\tDetect Multiplier: 3
\tConcatenated Path Down: false
\tTX Interval: Approx 5ms
\tRX Interval: Approx 5ms
\tDetect Time: now +14ms
\tNext TX Time: now +3ms
\tLast TX Time: now -1ms

\tLocal Flags: none
\tLocal Session State: up
---- fl1234l1-e4 ----
\tForwarding: false
\tTX Interval: Approx 1000ms
\tLocal Session State: down
"""


def test_bfd_show_is_read_per_interface():
    from emulator.dataplane.links import bfd
    got = bfd.parse_show(SHOW)
    assert got == {"fl1234l1-e3": {"forwarding": True, "state": "up", "tx_ms": 5, "rx_ms": 5},
                   "fl1234l1-e4": {"forwarding": False, "state": "down", "tx_ms": 1000,
                                   "rx_ms": None}}


@pytest.mark.parametrize("text,ms", [("5", 5), ("5ms", 5), ("2ms", 2), ("1000", 1000)])
def test_parse_bfd_interval(text, ms):
    from emulator.dataplane.links import bfd
    assert bfd.parse_interval(text) == ms


@pytest.mark.parametrize("text", ["1ms", "0", "fast", "2s", ""])
def test_parse_bfd_interval_rejects(text):
    from emulator.dataplane.links import bfd
    with pytest.raises(ConfigError) as e:
        bfd.parse_interval(text)
    assert "--bfd" in str(e.value)


def flow(crosses, gap, lost=0):
    return {"crosses": crosses, "longest_gap_ms": gap, "loss_window_ms": lost,
            "recovery_ms": gap, "fault_lost_packets": lost, "duplicated_packets": 0,
            "reordered_packets": 0}


def test_the_stall_is_the_longest_gap_of_flows_that_do_not_cross():
    repeats = [{"flows": {"a": flow(True, 12.0, 5), "b": flow(False, 6.0), "c": flow(False, 2.5)},
                "controller": None},
               {"flows": {"a": flow(True, 9.0, 4), "b": flow(False, 4.0), "c": flow(False, 8.0)},
                "controller": None}]
    sm = drill_stats.summarise(repeats)
    assert sm["stall_ms"] == {"n": 2, "median": 7.0, "p95": 8.0, "max": 8.0}
    assert sm["longest_gap_ms"]["max"] == 12.0
    assert sm["non_crossing_lost_packets"] == 0
    text = drill_stats.table([{"mode": "fast-failover", "summary": sm, "repeats": repeats}])
    row = next(line for line in text.splitlines() if line.startswith("fast-failover"))
    assert "7.0" in row.split()
    assert "stall" in text


def test_no_stall_figure_when_every_flow_crosses():
    sm = drill_stats.summarise([{"flows": {"a": flow(True, 3.0, 1)}, "controller": None}])
    assert sm["stall_ms"] is None
    text = drill_stats.table([{"mode": "controller", "summary": sm, "repeats": [{}]}])
    # mode, gap x3, lost/pps x3, then no controller convergence and no stall
    assert text.splitlines()[2].split()[7:9] == ["-", "-"]


@pytest.mark.parametrize("percent,rule", [
    (50, "numgen random mod 10000 < 5000 counter drop"),
    (5, "numgen random mod 10000 < 500 counter drop"),
    (0.5, "numgen random mod 10000 < 50 counter drop"),
    (100, "counter drop"),
])
def test_gray_loss_rules_cover_1_to_100_percent(percent, rule):
    from emulator.dataplane.faults import loss_rule
    assert loss_rule(percent) == rule


def test_calm_is_the_longest_gap_before_the_fault_of_flows_that_do_not_cross():
    ms = 1_000_000
    recv = {"received_packets": 100, "duplicated_packets": 0, "reordered_packets": 0,
            "total_disruptions": 3, "longest_disruption": None,
            "disruptions": [
                {"start_ns": 10 * ms, "end_ns": 40 * ms, "ms": 30.0, "skipped": 0},  # start-up
                {"start_ns": 200 * ms, "end_ns": 204 * ms, "ms": 4.0, "skipped": 0},  # calm
                {"start_ns": 499 * ms, "end_ns": 508 * ms, "ms": 9.0, "skipped": 0},  # spans it
            ]}
    f = drill_stats.flow_result(recv, 100, 500 * ms, 1500 * ms, 1000, calm_from=100 * ms)
    assert f["calm_gap_ms"] == 4.0          # neither the start-up gap nor the fault's
    assert f["longest_gap_ms"] == 9.0
    assert drill_stats.flow_result(recv, 100, 500 * ms, None, 1000)["calm_gap_ms"] is None
    repeats = [{"flows": {"a": dict(flow(True, 12.0, 5), calm_gap_ms=3.0),
                          "b": dict(flow(False, 6.0), calm_gap_ms=f["calm_gap_ms"]),
                          "c": dict(flow(False, 2.5), calm_gap_ms=2.0)}, "controller": None}]
    sm = drill_stats.summarise(repeats)
    assert sm["calm_ms"]["median"] == 4.0 and sm["stall_ms"]["median"] == 6.0
    row = drill_stats.table([{"mode": "m", "summary": sm, "repeats": repeats}]).splitlines()[2]
    assert row.split()[8:10] == ["6.0", "4.0"]


def test_sequences_skipped_by_a_gap_and_arriving_later_are_not_lost():
    ms = 1_000_000
    gap = {"start_ns": 510 * ms, "end_ns": 513 * ms, "ms": 3.0, "skipped": 8}
    recv = {"received_packets": 4200, "duplicated_packets": 0, "reordered_packets": 8,
            "total_disruptions": 1, "longest_disruption": None, "disruptions": [gap]}
    f = drill_stats.flow_result(recv, 4200, 500 * ms, 1500 * ms, 1000)
    assert f["fault_lost_packets"] == 0 and f["loss_window_ms"] == 0.0
    assert f["recovery_ms"] == 0.0 and f["longest_gap_ms"] == 3.0
    # 5 of them really lost: the fault lost 5, not 8
    f = drill_stats.flow_result(dict(recv, received_packets=4195), 4200, 500 * ms,
                                1500 * ms, 1000)
    assert f["fault_lost_packets"] == 5 and f["loss_window_ms"] == 5.0


def test_a_gap_starting_within_one_interval_before_the_restore_is_the_restores():
    """The packet before a restore's loss was sent at most 1/pps before the restore
    (and arrived later): its gap counts as restore loss, not as a late recovery."""
    ms = 1_000_000
    fault = {"start_ns": 500 * ms, "end_ns": 512 * ms, "ms": 12.0, "skipped": 10}
    restore = {"start_ns": 1499 * ms + ms // 2, "end_ns": 1510 * ms, "ms": 10.5,
               "skipped": 6}
    recv = {"received_packets": 984, "duplicated_packets": 0, "reordered_packets": 0,
            "total_disruptions": 2, "longest_disruption": None,
            "disruptions": [fault, restore]}
    f = drill_stats.flow_result(recv, 1000, 500 * ms, 1500 * ms, 1000)
    assert f["fault_lost_packets"] == 10 and f["recovery_ms"] == 12.0
    assert f["restore_lost_packets"] == 6
    # a fault that lasts until the restore is still the fault's
    stuck = dict(fault, end_ns=1505 * ms, ms=1005.0, skipped=1000)
    f = drill_stats.flow_result(dict(recv, received_packets=0 + 500, disruptions=[stuck]),
                                1500, 500 * ms, 1500 * ms, 1000)
    assert f["recovery_ms"] == 1005.0 and f["restore_lost_packets"] == 0


def test_the_detection_is_timed_from_the_first_end_going_down(tmp_path):
    """A link is dead once its first end is down; setting the second end down can wait
    milliseconds on rtnetlink while Open vSwitch reconfigures.  The modelled loss of
    signal counts from the first end, not the last (which added the wait to it)."""
    topo = addressing.plan(presets.build("leaf-spine", {"spines": "2", "leaves": "2",
                                                        "hosts_per_leaf": "1"}))
    inj = injector(topo, tmp_path)
    now = [1_000_000_000]
    inj.clock = lambda: now[0]

    class SlowNetlink:                    # the second end waits 8 ms
        calls = 0

        def link(self, *_, **__):
            SlowNetlink.calls += 1
            now[0] += 200_000 if SlowNetlink.calls == 1 else 8_000_000
    told = []
    inj.detector = types.SimpleNamespace(
        notify=lambda ports, down, t_cut: told.append(t_cut) or {"t_notify_ns": t_cut})
    inj._resolved = lambda ends: [(SlowNetlink(), 1), (SlowNetlink(), 2)]
    inj.ends = lambda link, side: [None, None]
    inj.s.net = types.SimpleNamespace()          # one machine: no set_links
    ev = inj.link_down("leaf1-spine1")
    assert told == [1_000_200_000]                    # after the first end, not at 8.2 ms
    assert ev["t_cut_ns"] == 1_000_200_000 and ev["t_ns"] == 1_000_000_000


def test_with_the_adaptive_stage_a_cut_keeps_the_rescuing_switch_end_up(tmp_path):
    """A dead port's egress decides its frames again (--lb dlb|packet), so a cut sets
    down only the link's other end (the kept end loses its carrier with it); a
    chosen side, or no stage, is cut as asked."""
    topo = addressing.plan(presets.build("leaf-spine", {"spines": "2", "leaves": "2",
                                                        "hosts_per_leaf": "1"}))
    inj = injector(topo, tmp_path)
    inj.s.net = types.SimpleNamespace(switch_netns=lambda name: None)
    leaf, spine = inj.ends("leaf1-spine1")
    assert inj._cut_ends("leaf1-spine1", "both") == ([leaf, spine], [])
    inj.s.adaptive = types.SimpleNamespace(rescuing_ends=lambda: {leaf})
    assert inj._cut_ends("leaf1-spine1", "both") == ([spine], [leaf])
    assert inj._cut_ends("spine1-leaf1", "both") == ([spine], [leaf])
    assert inj._cut_ends("leaf1-spine1", "a") == ([leaf], [])
    inj.s.adaptive = types.SimpleNamespace(rescuing_ends=lambda: {leaf, spine})
    down, kept = inj._cut_ends("leaf1-spine1", "both")
    assert len(down) == 1 and len(kept) == 1                  # one end must go down


def test_a_ctrl_c_during_a_link_change_lands_once_every_end_is_set(tmp_path):
    """pyroute2's event loop turns an interrupt raised inside it into "Event loop
    stopped before Future completed": a cut's netlink verbs hold SIGINT, which
    is raised as KeyboardInterrupt once the change is whole."""
    import os
    import signal

    from emulator.dataplane.system.signals import signals_as_exceptions
    topo = addressing.plan(presets.build("leaf-spine", {"spines": "2", "leaves": "2",
                                                        "hosts_per_leaf": "1"}))
    inj = injector(topo, tmp_path)
    inj.s.net = types.SimpleNamespace()          # one machine: no set_links
    done = []

    class InterruptedNetlink:
        def link(self, *_, index, **__):
            if not done:
                os.kill(os.getpid(), signal.SIGINT)      # Ctrl-C in the first change
            done.append(index)
    with signals_as_exceptions():
        with pytest.raises(KeyboardInterrupt):
            inj._set([(InterruptedNetlink(), 1), (InterruptedNetlink(), 2)], "down")
    assert done == [1, 2]
