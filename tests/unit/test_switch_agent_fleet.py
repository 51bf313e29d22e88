"""The switch-agent model per switch kind: a fabric file's ``switch_agent:``
(emulator/fabric/switch_agent.py ``Fleet``), the command line over it, the
proxy's model per datapath id and the drill's prediction per switch."""


import pytest

from emulator.__main__ import main
from emulator.errors import ConfigError
from emulator.fabric import spec
from emulator.fabric import switch_agent as sa
from emulator.fabric.switch_agent import Fleet, Params

FABRIC = """name: two
topology:
  defaults: {rate: 40Mbps}
  nodes: {h1: {kind: host}, h2: {kind: host}, leaf1: {kind: leaf}, leaf2: {kind: leaf},
          spine1: {kind: spine}}
  links:
    - endpoints: ["h1:eth0", "leaf1:eth1"]
    - endpoints: ["h2:eth0", "leaf2:eth1"]
    - endpoints: ["leaf1:eth2", "spine1:eth1"]
    - endpoints: ["leaf2:eth2", "spine1:eth2"]
"""


def load(agent_yaml):
    return spec.load_text(FABRIC + "switch_agent: " + agent_yaml + "\n")


def test_one_model_for_every_switch_by_name_or_parameters():
    f = load("hardware").switch_agent
    assert f.uniform == sa.HARDWARE and f.for_kind("spine") == sa.HARDWARE
    f = load("{base: hardware, table_rate: 1000}").switch_agent
    assert f.for_kind("leaf").table_rate == 1000 and f.for_kind("leaf").event_ms == \
        sa.HARDWARE.event_ms
    assert load("ideal").switch_agent.ideal


def test_a_model_per_switch_kind_with_a_default():
    f = load("{default: hardware, leaf: ideal, spine: {base: hardware, table_rate: 50}}"
             ).switch_agent
    assert f.for_kind("leaf") is None                    # ideal
    assert f.for_kind("spine").table_rate == 50
    assert f.for_kind("superspine") == sa.HARDWARE       # the default
    assert f.uniform is None and not f.ideal
    assert "leaf: ideal" in f.text() and "spine: channel 0 ms" in f.text()
    f = load("{spine: hardware}").switch_agent           # unnamed kinds: ideal
    assert f.for_kind("leaf") is None and f.for_kind("spine") == sa.HARDWARE


def test_the_file_round_trips_through_show_yaml():
    fab = load("{default: hardware, leaf: {latency_ms: 2}}")
    again = spec.load_text(spec.dump(fab))
    assert again.switch_agent == fab.switch_agent
    fab = load("hardware")
    assert spec.load_text(spec.dump(fab)).switch_agent == fab.switch_agent


@pytest.mark.parametrize("text, where, what", [
    ("{leef: hardware}", "switch_agent.leef", "a model per switch kind"),
    ("{leaf: hardwire}", "switch_agent.leaf", "'hardwire': use ideal, hardware"),
    ("{spine: {table_rte: 5}}", "switch_agent.spine.table_rte", "unknown key"),
    ("{default: {latency_ms: -1}}", "switch_agent.default.latency_ms", "a number >= 0"),
    ("{leaf: hardware, latency_ms: 3}", "switch_agent", "not both"),
    ("{spine: {base: asic}}", "switch_agent.spine.base", "use hardware"),
    ("7", "switch_agent", "expected a mapping"),
])
def test_bad_models_are_refused_naming_the_key(text, where, what):
    with pytest.raises(ConfigError) as e:
        load(text)
    assert e.value.where == where and what in e.value.message


def test_validate_exits_2_on_a_bad_model(tmp_path, capsys):
    path = tmp_path / "f.yaml"
    path.write_text(FABRIC + "switch_agent: {leaf: fast}\n")
    assert main(["validate", str(path)]) == 2
    assert "switch_agent.leaf: 'fast': use ideal, hardware" in capsys.readouterr().err


def test_the_command_line_overrides_the_file(tmp_path):
    fab = load("{default: hardware, leaf: ideal}")
    assert sa.for_run(None, fab) == fab.switch_agent
    assert sa.for_run("ideal", fab) is None
    assert sa.for_run("hardware", fab) == Fleet(sa.HARDWARE)
    assert sa.for_run(None, load("ideal")) is None
    assert sa.for_run(None, spec.load_text(FABRIC)) is None
    with pytest.raises(ConfigError, match="remote"):
        sa.for_run("hardware", fab, "remote:127.0.0.1:6653")


def test_the_proxy_gives_each_datapath_its_kinds_model(tmp_path):
    from emulator.dataplane.ovs import agent_proxy as ap
    fleet = Fleet(None, (("spine", sa.HARDWARE),))
    doc = fleet.for_dpids({1: "leaf", 2: "leaf", 0x20001: "spine"})
    default, by_dpid = ap.load_params(doc)
    assert default == Params() and by_dpid[1] == Params()        # ideal: no delay
    assert by_dpid[0x20001] == sa.HARDWARE
    proxy = ap.Proxy((default, by_dpid), ("127.0.0.1", 1), str(tmp_path / "a.jsonl"))
    assert proxy.params_of(0x20001) == sa.HARDWARE and proxy.params_of(None) == Params()
    assert ap.load_params(sa.HARDWARE.as_dict()) == (sa.HARDWARE, {})   # one model


def test_a_fleet_stretches_and_its_slowest_figures_bound_the_timeouts():
    slow = Params(latency_ms=2, processing_ms=1, table_rate=50, event_ms=5)
    fast = Params(latency_ms=1, processing_ms=3, table_rate=0, event_ms=20)
    f = Fleet(fast, (("spine", slow), ("leaf", None)))
    s = f.slowest()
    assert (s.latency_ms, s.processing_ms, s.table_rate, s.event_ms) == (2, 3, 50, 20)
    assert f.scaled(10).for_kind("spine").table_rate == 5 and f.scaled(10).for_kind("leaf") is None
    assert f.as_dict()["leaf"] == "ideal" and f.as_dict()["spine"]["table_rate"] == 50


def test_the_drill_predicts_each_switch_at_its_own_model():
    from emulator.fabric.agents import predict
    leaf = Params(latency_ms=1, processing_ms=0, table_rate=100, event_ms=10)
    spine = Params(latency_ms=1, processing_ms=0, table_rate=10, event_ms=10)
    fleet = Fleet(None, (("leaf", leaf), ("spine", spine)))
    topo = {"switches": [{"dpid": 1, "kind": "leaf"}, {"dpid": 0x20001, "kind": "spine"}]}
    from emulator.experiments.drill import agent as drill_agent
    models = drill_agent.models_of(fleet, topo)
    assert models == {1: leaf, 0x20001: spine}
    cal = predict.Calibration(0.0, 0.0, 0.0, 0.0, 0.0)
    two = [sa.Change(sa.ADD, None, 0, ("group", g)) for g in (1, 2)]
    push = predict.push_ms(models, {1: two, 0x20001: two}, {}, cal, 64)
    # the spine's 10/s dominates: 2 changes of 100 ms each, then the round trips
    assert push == pytest.approx(1 + 200 + 1)
