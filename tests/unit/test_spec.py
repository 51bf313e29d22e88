"""Fabric-file parsing: every validation error names its place; nothing else escapes."""

import pytest

from emulator.errors import ConfigError
from emulator.fabric import presets, spec

GOOD = """
name: two-leaf
topology:
  defaults: {rate: 40Mbps}
  nodes:
    h1: {kind: host}
    h2: {kind: host}
    leaf1: {kind: leaf}
    leaf2: {kind: leaf}
    spine1: {kind: spine, hash_seed: 7}
  links:
    - endpoints: ["h1:eth0", "leaf1:eth1"]
    - endpoints: ["h2:eth0", "leaf2:eth1"]
      rate: 20Mbps
    - endpoints: ["leaf1:eth2", "spine1:eth1"]
    - endpoints: ["leaf2:eth2", "spine1:eth2"]
"""


def test_good_file_parses():
    f = spec.load_text(GOOD)
    assert f.name == "two-leaf"
    assert [n.name for n in f.hosts] == ["h1", "h2"]
    assert f.node("spine1").hash_seed == 7
    assert f.links[0].rate_bps == 40_000_000
    assert f.links[1].rate_bps == 20_000_000
    assert [lk.other("leaf1").node for lk in f.uplinks("leaf1")] == ["spine1"]


def error_of(text):
    with pytest.raises(ConfigError) as info:
        spec.load_text(text, source="t.yaml")
    return str(info.value)


@pytest.mark.parametrize("old,new,expected", [
    ('"leaf2:eth2", "spine1:eth2"', '"leaf2:eth2", "leaf9:eth2"',
     "t.yaml: topology.links[3].endpoints[1]: unknown node 'leaf9'"),
    ('"h2:eth0", "leaf2:eth1"', '"h2:eth0", "leaf1:eth1"',
     "topology.links[1].endpoints[1]: port leaf1:eth1 is already used by topology.links[0]"),
    ("rate: 20Mbps", "rate: 20", "topology.links[1].rate: rate 20 has no unit"),
    ("rate: 20Mbps", "rate: 20furlongs", "unknown unit 'furlongs'"),
    ("rate: 20Mbps", "speed: 20Mbps", "topology.links[1].speed: unknown key 'speed'"),
    ("spine1: {kind: spine, hash_seed: 7}", "spine1: {kind: router}",
     "topology.nodes.spine1.kind: unknown kind 'router'"),
    ("spine1: {kind: spine, hash_seed: 7}", "spine1: {kind: spine, colour: red}",
     "topology.nodes.spine1.colour: unknown key 'colour'"),
    ('"leaf1:eth2", "spine1:eth1"', '"leaf1:eth0", "spine1:eth1"',
     "topology.links[2].endpoints[0]: switch port 'eth0' of 'leaf1': N must be"),
    ('"leaf1:eth2", "spine1:eth1"', '"leaf1:port2", "spine1:eth1"',
     "topology.links[2].endpoints[0]: port 'port2' of 'leaf1' is not 'eth<N>'"),
    ('"leaf1:eth2", "spine1:eth1"', '"leaf1-eth2", "spine1:eth1"',
     "topology.links[2].endpoints[0]: 'leaf1-eth2' is not 'node:port'"),
    ('"leaf1:eth2", "spine1:eth1"', '"leaf1:eth2", "leaf1:eth3"',
     "topology.links[2].endpoints: link from 'leaf1' to itself"),
    ('"h2:eth0", "leaf2:eth1"', '"h2:eth0", "h1:eth1"', "hosts connect to switches"),
    ("  defaults: {rate: 40Mbps}\n", "", "topology.links[0].rate: missing"),
    ("name: two-leaf", "name: two leaf", "name: 'two leaf' is not a name"),
    ("name: two-leaf", "name: two-leaf\nversion: 3", "version: unknown key 'version'"),
])
def test_each_error_names_its_place(old, new, expected):
    assert old in GOOD
    assert expected in error_of(GOOD.replace(old, new))


def test_disconnected_fabric_is_rejected():
    text = GOOD.replace('    - endpoints: ["leaf2:eth2", "spine1:eth2"]\n', "")
    assert "disconnected: leaf2 cannot reach 'leaf1'" in error_of(text)


def test_node_without_link_is_rejected():
    text = GOOD.replace("    h2: {kind: host}\n", "    h2: {kind: host}\n    h3: {kind: host}\n")
    assert "topology.nodes.h3: has no link" in error_of(text)


def test_duplicate_keys_are_rejected():
    text = GOOD.replace("    h2: {kind: host}\n", "    h2: {kind: host}\n    h1: {kind: host}\n")
    assert "duplicate key 'h1'" in error_of(text)


@pytest.mark.parametrize("text,expected", [
    ("", "the file must be a mapping"),
    ("[1, 2]", "the file must be a mapping"),
    ("name: x\n", "topology: missing"),
    ("topology: {nodes: {}, links: []}", "topology.nodes: missing or empty"),
    ("a: [", "not valid YAML"),
    ("topology:\n  nodes: {h1: {kind: host}, l1: {kind: leaf}}\n  links: []\n",
     "topology.links: missing or empty"),
    ("topology:\n  nodes: {h1: {kind: host}}\n  links: [{endpoints: ['h1:eth0', 'h1:eth1'], "
     "rate: 1Gbps}]\n", "link from 'h1' to itself"),
])
def test_malformed_documents(text, expected):
    assert expected in error_of(text)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read fabric file"):
        spec.load_file(tmp_path / "nope.yaml")


def test_dump_round_trips_a_preset():
    f = presets.build("leaf-spine", {"spines": "2", "leaves": "3"})
    again = spec.load_text(spec.dump(f))
    assert again.nodes == f.nodes and again.links == f.links and again.name == f.name


def _one_link_fabric(**extra):
    link = {"endpoints": ["h1:eth0", "leaf1:eth1"], "rate": "10Mbps", **extra}
    return {"name": "t", "topology": {"nodes": {"h1": {"kind": "host"}, "leaf1": {"kind": "leaf"}},
                                      "links": [link]}}


def test_link_impairments_parse_and_round_trip():
    from emulator.fabric import spec
    f = spec.parse(_one_link_fabric(loss="2.5%", state="down", delay="5ms", jitter="500us"))
    (lk,) = f.links
    assert (lk.loss_pct, lk.state, lk.delay_s, lk.jitter_s) == (2.5, "down", 0.005, 0.0005)
    assert lk.impaired
    again = spec.load_text(spec.dump(f))
    assert again.links == f.links
    plain = spec.parse(_one_link_fabric()).links[0]
    assert not plain.impaired and plain.state == "up"


import pytest  # noqa: E402


@pytest.mark.parametrize("extra,where", [
    ({"loss": "0%"}, "links[0].loss"), ({"loss": "101"}, "links[0].loss"),
    ({"loss": "lots"}, "links[0].loss"), ({"loss": True}, "links[0].loss"),
    ({"state": "flapping"}, "links[0].state"), ({"delay": "5"}, "links[0].delay"),
    ({"jitter": "1ms"}, "links[0].jitter"),
])
def test_bad_link_impairments_name_their_place(extra, where):
    from emulator.errors import ConfigError
    from emulator.fabric import spec
    with pytest.raises(ConfigError) as e:
        spec.parse(_one_link_fabric(**extra))
    assert where in str(e.value)


def test_impaired_links_and_their_fault_directions():
    from emulator.dataplane.links import impair
    from emulator.fabric import addressing, spec
    topo = addressing.plan(spec.parse(_one_link_fabric(loss="5%")))
    assert [name for name, _ in impair.impaired(topo)] == ["h1:leaf1"]
    assert impair.fault_names(topo) == {"h1->leaf1", "leaf1->h1"}
