"""The fidelity verdict: network drops vs emulation drops, latency vs the queue bound."""

from emulator.experiments.measure import fidelity
from emulator.report.summary import fidelity_lines


def counters(**kw):
    base = {"network_drops": {}, "ovs_socket_drops": {}, "ovs_tx_drops": {},
            "softnet_drops": 0, "ovs_cpu": 0.4, "machine_busy": 0.5, "cpus": 2}
    base.update(kw)
    return base


TOPO = {"switches": [{"name": "leaf1", "tier": 1, "kind": "leaf"},
                     {"name": "spine1", "tier": 2, "kind": "spine"}]}


def test_queue_bound_counts_every_queue_on_the_longest_path():
    assert fidelity.queue_bound_ms(TOPO, 30) == 120       # host-leaf-spine-leaf-host
    three = {"switches": TOPO["switches"] + [{"name": "s", "tier": 3, "kind": "superspine"}]}
    assert fidelity.queue_bound_ms(three, 10) == 60
    nic = {"switches": TOPO["switches"] + [{"name": "h1.nic", "tier": 0, "kind": "nic"}]}
    assert fidelity.queue_bound_ms(nic, 10) == 60


def test_clean_run_is_faithful():
    d = fidelity.verdict(100_000, counters(), engine={"socket_drops": 0, "skipped_packets": 0},
                         latency={"p99": 3.0, "max": 8.0}, bound_ms=120)
    assert d["verdict"] == "faithful" and not d["reasons"] and d["remedy"] is None


def test_link_queue_drops_are_the_network_and_stay_faithful():
    d = fidelity.verdict(100_000, counters(network_drops={"leaf1->spine1": 30_000}),
                         latency={"p99": 35.0, "max": 40.0}, bound_ms=120)
    assert d["verdict"] == "faithful"
    assert d["network_drops"]["total"] == 30_000
    assert d["network_drops"]["by_link"] == {"leaf1->spine1": 30_000}
    assert d["emulation_drops"]["total"] == 0


def test_ovs_socket_drops_make_it_emulator_bound_with_a_remedy():
    d = fidelity.verdict(100_000, counters(ovs_socket_drops={"spine1->leaf2": 500},
                                           softnet_drops=20))
    assert d["verdict"] == "emulator-bound"
    assert d["emulation_drops"]["total"] == 520
    assert "ovs_port_sockets" in d["reasons"][0] and "kernel_backlog" in d["reasons"][0]
    assert "lower the link rates" in d["remedy"] and "--mtu" not in d["remedy"]
    small = fidelity.verdict(100_000, counters(softnet_drops=50), frame_len=1098)
    assert "--mtu 4096" in small["remedy"]


def test_a_few_emulation_drops_below_the_limit_are_a_note():
    d = fidelity.verdict(1_000_000, counters(softnet_drops=3))
    assert d["verdict"] == "faithful" and d["warnings"]


def test_sender_behind_schedule_is_an_emulation_shortfall():
    d = fidelity.verdict(10_000, counters(), engine={"skipped_packets": 50})
    assert d["verdict"] == "emulator-bound"
    assert "50 of 10050 frames" in d["reasons"][0]
    assert d["emulation_drops"]["sender_behind_schedule"] == 50


def test_latency_beyond_the_queues_is_hidden_queueing():
    d = fidelity.verdict(10_000, counters(), latency={"p99": 1800.0, "max": 4200.0},
                         bound_ms=120)
    assert d["verdict"] == "emulator-bound"
    assert "1800.0 ms exceeds the 120 ms" in d["reasons"][0]
    stall = fidelity.verdict(10_000, counters(), latency={"p99": 10.0, "max": 400.0},
                             bound_ms=120)
    assert stall["verdict"] == "faithful" and "stall" in stall["warnings"][0]


def test_cpu_near_budget_is_noted_not_judged():
    d = fidelity.verdict(10_000, counters(ovs_cpu=0.97, machine_busy=0.99))
    assert d["verdict"] == "faithful" and len(d["warnings"]) == 2


def test_a_completion_time_near_saturation_is_noted():
    near = fidelity.verdict(10_000, counters(machine_busy=0.93), timing=True)
    assert near["verdict"] == "faithful"
    assert any("93% busy, near saturation" in w for w in near["warnings"])
    assert not fidelity.verdict(10_000, counters(machine_busy=0.89), timing=True)["warnings"]
    assert not fidelity.verdict(10_000, counters(machine_busy=0.93))["warnings"]   # no timing
    assert fidelity.verdict(10_000, counters(machine_busy=0.96),
                            timing=True)["verdict"] == "emulator-bound"


def test_hypervisor_steal_is_noted_with_its_share(tmp_path):
    d = fidelity.verdict(10_000, counters(machine_steal=0.09))
    assert d["verdict"] == "faithful" and d["cpu"]["machine_steal"] == 0.09
    assert any("hypervisor took 9%" in w for w in d["warnings"])
    assert "hypervisor steal 9%" in "\n".join(fidelity_lines(d))
    quiet = fidelity.verdict(10_000, counters(machine_steal=0.01))
    assert not quiet["warnings"]
    # 4 % on average, but 19 % in one 100 ms window: a stall, noted with its peak
    burst = fidelity.verdict(10_000, counters(machine_steal=0.04, cpu_windows={
        "window_ms": 100, "windows": 50, "saturated_at": 0.95, "saturated": 0,
        "longest_saturated_ms": 0, "max_busy": 0.6, "max_steal": 0.19}))
    assert any("up to 19% in a 100 ms window" in w for w in burst["warnings"])
    stolen = fidelity.verdict(10_000, counters(machine_steal=0.16),
                              engine={"skipped_packets": 16})
    assert stolen["verdict"] == "emulator-bound"
    assert stolen["remedy"].startswith("run again when the host's other guests are quieter")
    # a completion time under 10 % steal or more is the host's: emulator-bound
    timed = fidelity.verdict(10_000, counters(machine_steal=0.12), timing=True)
    assert timed["verdict"] == "emulator-bound" and "12%" in timed["reasons"][0]
    assert timed["remedy"].startswith("run again when the host's other guests are quieter")
    assert fidelity.verdict(10_000, counters(machine_steal=0.07), timing=True)["verdict"] \
        == "faithful"
    # the steal column of /proc/stat (the 8th), read next to busy and total
    from emulator.dataplane.observe import counters as c
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3\n")
    before = c.machine_cpu(str(stat))
    assert before == (190, 1000, 35)
    stat.write_text("cpu  200 0 50 1600 10 0 5 135 0 0\n")
    assert c.steal_share(before, c.machine_cpu(str(stat))) == 100 / 1000
    assert c.steal_share((0, 0), (5, 10)) == 0.0          # a reading without steal


def test_saturated_cpu_windows_are_counted_and_noted():
    import time

    from emulator.dataplane.observe import counters as c
    shares = [(0.5, 0.0), (1.0, 0.0), (0.96, 0.1), (0.3, 0.0), (0.95, 0.02), (0.2, 0.0)]
    w = c.windows_summary(shares, 0.1)
    assert (w["windows"], w["saturated"], w["longest_saturated_ms"]) == (6, 3, 200)
    assert w["max_busy"] == 1.0 and w["max_steal"] == 0.1 and w["saturated_at"] == 0.95
    assert c.windows_summary([], 0.1) is None
    d = fidelity.verdict(10_000, counters(machine_busy=0.6, cpu_windows=w))
    assert d["verdict"] == "faithful" and d["cpu"]["windows"] == w
    assert any("saturated (>= 95% busy) in 3 of 6 100 ms windows (longest 200 ms)" in x
               for x in d["warnings"])
    assert "saturated 3/6 of its 100 ms windows" in "\n".join(fidelity_lines(d))
    calm = fidelity.verdict(10_000, counters(cpu_windows=c.windows_summary([(0.4, 0)], 0.1)))
    assert not calm["warnings"]
    # the sampler: (busy, total, steal) jiffies read every window
    ticks = iter([(0, 0, 0), (19, 20, 1), (29, 40, 1)] + [(29, 40, 1)] * 1000)
    sampler = c.CpuWindows(window_s=0.01, read=lambda: next(ticks)).start()
    time.sleep(0.1)
    w = sampler.stop()
    assert sampler.shares[:2] == [(0.95, 0.05), (0.5, 0.0)] and w["saturated"] == 1
    # only the windows that overlap the traffic (a collective's ranks start up first)
    s2 = c.CpuWindows(window_s=0.1)
    s2.shares, s2.ends = [(1.0, 0), (1.0, 0), (0.4, 0), (0.5, 0)], [0.1, 0.2, 0.3, 0.4]
    assert s2.summary()["saturated"] == 2
    inside = s2.summary(within=(0.25, 0.4))
    assert inside["windows"] == 2 and inside["saturated"] == 0
    assert s2.summary(within=(0.15, 0.4))["saturated"] == 1


def test_summary_lines_say_the_verdict_and_the_why():
    d = fidelity.verdict(100, counters(ovs_socket_drops={"leaf1->h1": 50}))
    text = "\n".join(fidelity_lines(d))
    assert "EMULATOR-BOUND" in text and "why:" in text and "remedy:" in text
    assert "not the fabric's" in text
    assert fidelity_lines(None) == []


def test_lost_frames_are_split_over_links_by_their_queue_drops():
    # OVS retries a refused frame, so a queue counts more drop events than frames lost
    d = fidelity.verdict(3600, counters(network_drops={"leaf1->spine1": 1438,
                                                       "leaf2->spine1": 1439}), lost=2374)
    net = d["network_drops"]
    assert net["total"] == 2374 and set(net["by_link"]) == {"leaf1->spine1", "leaf2->spine1"}
    assert abs(net["by_link"]["leaf1->spine1"] - 1187) <= 1
    assert net["queue_drop_events"]["leaf2->spine1"] == 1439
    # frames the emulator lost on the way are not charged to the links
    e = fidelity.verdict(3600, counters(network_drops={"a->b": 10}, softnet_drops=4), lost=10)
    assert e["network_drops"]["total"] == 6
    assert fidelity.network_drops({"a": 3}, None) == {"a": 3}
    assert fidelity.network_drops({}, 5) == {}


def test_drops_on_a_faulted_link_are_the_faults_not_the_emulators():
    c = counters(ovs_tx_drops={"leaf1->spine1": 40, "leaf2->spine2": 3})
    d = fidelity.verdict(1000, c, lost=40, faulted={"leaf1->spine1"})
    assert d["emulation_drops"]["ovs_send"] == {"leaf2->spine2": 3}
    assert d["network_drops"]["by_link"] == {"leaf1->spine1": 37}
    assert fidelity.verdict(1000, c, lost=40)["emulation_drops"]["total"] == 43


def test_a_soak_counts_a_faulted_link_s_drops_as_its_faults_only_within_its_windows():
    """Over a soak nearly every link is faulted once: Open vSwitch's drops on a link
    outside the windows its faults held it down are the emulator's."""
    c = counters(ovs_tx_drops={"leaf1->spine1": 40}, ovs_socket_drops={"leaf1->spine1": 5})
    d = fidelity.verdict(10_000, c, faulted={"leaf1->spine1"},
                         fault_drops={"ovs_tx_drops": {"leaf1->spine1": 38}})
    assert d["emulation_drops"]["ovs_send"] == {"leaf1->spine1": 2}
    assert d["emulation_drops"]["ovs_port_sockets"] == {"leaf1->spine1": 5}
    assert d["emulation_drops"]["total"] == 7
    assert d["network_drops"]["by_link"] == {"leaf1->spine1": 38}


def test_frames_lost_where_nothing_counts_are_the_emulators_unless_a_fault_took_them():
    """No queue, socket or send counter saw them: with no fault injected they were
    lost inside Open vSwitch (its send buffer full), not by the links."""
    d = fidelity.verdict(30_000, counters(), lost=600)
    assert d["verdict"] == "emulator-bound"
    assert d["emulation_drops"]["uncounted"] == 600 and d["emulation_drops"]["total"] == 600
    assert d["network_drops"]["total"] == 0
    assert "uncounted" in d["reasons"][0]
    faulted = fidelity.verdict(30_000, counters(), lost=600, faulted={"leaf1->spine1"})
    assert faulted["verdict"] == "faithful"
    assert faulted["network_drops"]["by_link"] == {"leaf1->spine1": 600}
    # queue drops explain them: the network's, as before
    queued = fidelity.verdict(30_000, counters(network_drops={"leaf1->h1": 10}), lost=600)
    assert queued["verdict"] == "faithful" and queued["emulation_drops"]["uncounted"] == 0


def test_a_completion_time_on_a_saturated_machine_is_emulator_bound():
    busy = counters(machine_busy=0.97)
    assert fidelity.verdict(1000, busy, timing=True)["verdict"] == "emulator-bound"
    assert fidelity.verdict(1000, busy)["verdict"] == "faithful"


def test_deep_queues_beyond_the_ovs_send_buffer_get_a_note():
    from emulator.dataplane.ovs.datapath import queue_capacity_note
    from emulator.fabric import addressing, presets
    topo = addressing.plan(presets.build("leaf-spine", {}))
    # 40 switch ports at 40 Mbit/s: 30 ms queues hold 6 MB, 2000 ms ones 400 MB
    assert queue_capacity_note(topo, 30.0, send_buffer=64 << 20) is None
    note = queue_capacity_note(topo, 2000.0, send_buffer=64 << 20)
    assert "400 MB" in note and "34 MB" in note and "uncounted" in note


def test_ingress_drops_a_pause_came_too_late_for_are_the_emulators():
    # a lossless fabric: the pause model blamed itself for 12 ingress drops
    # (pfc_agent.Agent.blame_drops), lost where the receivers counted them
    d = fidelity.verdict(10_000, counters(pause_late_drops={"spine1->leaf1": 12}), lost=12)
    assert d["verdict"] == "emulator-bound"
    assert d["network_drops"]["total"] == 0
    assert d["emulation_drops"]["pause_late"] == 12 == d["emulation_drops"]["total"]
    assert "headroom" in d["remedy"]
    assert "lossless pauses too late 12" in "\n".join(fidelity_lines(d))


def test_counters_delta_names_the_late_pause_drops_by_link():
    from emulator.dataplane.observe.counters import delta
    topo = {"switches": [{"name": "spine1", "ports": [{"intf": "s2p1", "peer": "leaf1"}]}],
            "hosts": []}
    snap = {"t": 0.0, "queues": {}, "ovs_socket": {}, "ovs_interface": {}, "softnet": 0,
            "ovs_cpu_s": None, "machine": (0, 100, 0),
            "pfc_drops": {"s2p1": 1}, "pfc_late": {"s2p1": 4}}
    later = dict(snap, t=1.0, machine=(50, 200, 0), pfc_drops={"s2p1": 1},
                 pfc_late={"s2p1": 10})
    d = delta(snap, later, topo)
    assert d["pause_late_drops"] == {"spine1->leaf1": 6}
    assert d["network_drops"] == {}
