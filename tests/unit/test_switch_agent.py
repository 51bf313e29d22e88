"""The switch-agent timing model (emulator/fabric/switch_agent.py) on a fake clock,
and the proxy's message classification."""

import struct

import pytest

from emulator.errors import ConfigError
from emulator.fabric import switch_agent as sa
from emulator.fabric.switch_agent import BARRIER, CHANGE, ECHO, OTHER, PORT_STATUS, Agent, Params

P = Params(latency_ms=1.0, processing_ms=0.5, table_rate=100.0, event_ms=10.0)


def ms(t):
    return round(t * 1e3, 6)


def test_a_message_crosses_the_channel_then_is_processed():
    a = Agent(P)
    assert ms(a.to_switch(0.0, OTHER)) == 1.5            # 1 latency + 0.5 processing


def test_changes_install_in_order_at_the_table_rate():
    a = Agent(P)
    done = [ms(a.to_switch(0.0, CHANGE, 1)) for _ in range(3)]
    # 1 ms latency, then 0.5 + 10 ms each, one after the other
    assert done == [11.5, 22.0, 32.5]


def test_a_barrier_is_answered_after_the_changes_before_it():
    a = Agent(P)
    for _ in range(4):
        a.to_switch(0.0, CHANGE, 1)
    t = a.to_switch(0.0, BARRIER)
    assert ms(t) == 1 + 4 * 10.5 + 0.5
    assert ms(a.to_controller(t, OTHER)) == 1 + 4 * 10.5 + 0.5 + 1


def test_an_early_barrier_is_answered_before_the_changes_are_in():
    a = Agent(Params(latency_ms=1.0, processing_ms=0.5, table_rate=100.0,
                     early_barrier=True))
    last = [a.to_switch(0.0, CHANGE, 1) for _ in range(4)][-1]
    t = a.to_switch(0.0, BARRIER)
    assert ms(t) == 1.5 and t < last


def test_echoes_only_cross_the_channel():
    a = Agent(P)
    for _ in range(10):
        a.to_switch(0.0, CHANGE, 1)
    assert ms(a.to_switch(0.0, ECHO)) == 1.0


def test_a_message_arriving_when_the_agent_is_idle_starts_at_once():
    a = Agent(P)
    a.to_switch(0.0, CHANGE, 1)                   # done at 11.5 ms
    assert ms(a.to_switch(1.0, CHANGE, 1)) == 1000 + 1 + 10.5


def test_a_port_status_leaves_after_the_event_latency_and_order_is_kept():
    a = Agent(P)
    ps = a.to_controller(0.0, PORT_STATUS)
    assert ms(ps) == 11.0
    # a reply emitted just after the port status does not overtake it
    assert ms(a.to_controller(0.001, OTHER)) == 11.0
    assert ms(a.to_controller(0.05, OTHER)) == 51.0


def test_a_bundle_costs_its_members():
    a = Agent(P)
    msgs = [(OTHER, 0)] + [(CHANGE, 1)] * 5 + [(OTHER, 0)]    # open, 5 adds, commit
    last = [a.to_switch(0.0, k, n) for k, n in msgs][-1]
    assert ms(last) == 1 + 7 * 0.5 + 5 * 10


def test_ideal_is_no_model_and_zero_params_cost_nothing():
    assert sa.parse("ideal") is None
    a = Agent(Params())
    assert a.to_switch(3.0, CHANGE, 1) == 3.0
    assert a.to_controller(3.0, PORT_STATUS) == 3.0


def test_scaling_stretches_every_time():
    s = P.scaled(4)
    assert (s.latency_ms, s.processing_ms, s.event_ms, s.change_ms()) == (4, 2, 40, 40)


def test_presets_files_and_bad_input(tmp_path):
    assert sa.parse("hardware") == sa.HARDWARE
    f = tmp_path / "agent.yaml"
    f.write_text("base: hardware\ntable_rate: 50\nearly_barrier: true\n")
    p = sa.parse(str(f))
    assert p.table_rate == 50 and p.early_barrier and p.event_ms == sa.HARDWARE.event_ms
    f.write_text("table_rte: 50\n")
    with pytest.raises(ConfigError, match="table_rte: unknown key"):
        sa.parse(str(f))
    f.write_text("latency_ms: -1\n")
    with pytest.raises(ConfigError, match="latency_ms"):
        sa.parse(str(f))
    with pytest.raises(ConfigError, match="not a profile .ideal, hardware, he-sosr15, "
                                          "kuzniar-hp5406zl, kuzniar-pica8"):
        sa.parse(str(tmp_path / "missing.yaml"))
    f.write_text("shift_order: sideways\n")
    with pytest.raises(ConfigError, match="shift_order.*lower, higher, other"):
        sa.parse(str(f))


def _msg(kind, body=b""):
    return struct.pack("!BBHI", 6, kind, 8 + len(body), 1) + body


def test_a_job_drill_stretches_the_model_and_the_detection_alike():
    from emulator.experiments.drill import workload as dt
    scaled, detect = dt.stretched_agent(P, 0.001, 250.0)
    assert detect == pytest.approx(0.25)
    assert scaled.event_ms == 2500 and scaled.change_ms() == pytest.approx(2500)
    scales = dt.agent_scales(P, scaled, 0.001, 250.0)
    assert scales["real"]["event_ms"] == 10 and scales["emulated"]["event_ms"] == 2500
    assert (scales["detect_real_ms"], scales["detect_emulated_ms"]) == (1.0, 250.0)
    assert "time scale r/s = 250" in dt.scales_line(P, scaled, scales)
    # ideal: no model, the detection as given (today's job drill)
    assert dt.stretched_agent(None, 0.001, 250.0) == (None, 0.001)
    assert dt.agent_scales(None, None, 0.001, 250.0) == "ideal"


def test_the_proxy_takes_new_parameters_for_every_switch(tmp_path):
    import threading

    from emulator.dataplane.ovs import agent_proxy as ap
    proxy = ap.Proxy((P, {}), ("127.0.0.1", 1), str(tmp_path / "agent.jsonl"))

    class FakeRelay:
        def __init__(self):
            self.lock, self.agent, self.ended = threading.Lock(), Agent(P), threading.Event()
            self.dpid = "1"
    relay = FakeRelay()
    proxy.relays = [relay]
    (tmp_path / "agent.jsonl.params").write_text('{"event_ms": 2500, "table_rate": 0.8}')
    proxy.reload()
    assert proxy.params.event_ms == 2500 and relay.agent.p.table_rate == 0.8
    assert '"d": "params"' in (tmp_path / "agent.jsonl").read_text()


def test_a_stretched_job_drill_waits_long_enough_for_the_restore():
    from emulator.experiments.drill import workload as dt
    assert dt.restore_timeout(None) == 60
    # 300 changes at 1.25 s each plus their messages and round trips
    assert dt.restore_timeout(P.scaled(125)) == pytest.approx(
        60 + 300 * (1250 + 62.5 + 250) / 1e3)


def test_the_proxy_reads_whole_messages_across_reads():
    from emulator.dataplane.ovs import agent_proxy as ap
    stream = _msg(ap.FLOW_MOD, b"x" * 20) + _msg(ap.BARRIER_REQUEST) + _msg(ap.GROUP_MOD)

    class Sock:
        chunks = [stream[:5], stream[5:30], stream[30:]]

        def recv(self, n):
            return self.chunks.pop(0) if self.chunks else b""
    sock = Sock()
    msgs, rest = ap.read_msgs(sock, b"")
    assert [m[1] for m in msgs] == [ap.FLOW_MOD] and rest == stream[28:30]
    msgs, rest = ap.read_msgs(sock, rest)
    assert [m[1] for m in msgs] == [ap.BARRIER_REQUEST, ap.GROUP_MOD] and rest == b""
    assert ap.read_msgs(sock, b"") == ([], b"")
