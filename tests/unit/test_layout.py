"""Datapath layouts (``fabric.layout``): which switch each Open vSwitch instance carries."""

import dataclasses

import pytest

from emulator.errors import ConfigError
from emulator.fabric import addressing, layout, presets, spec


def topo(name="leaf-spine", **params):
    return addressing.plan(presets.build(name, {k: str(v) for k, v in params.items()}))


def groups(placement):
    return {name: sorted(g) for name, g in placement}


def test_shared_places_nothing():
    assert layout.place(topo(), "shared") == []
    assert layout.crossing_links(topo(), []) == 0


def test_two_instances_cut_every_tier_in_halves():
    placement = layout.place(topo(), "2")
    assert groups(placement) == {"ovs0": ["leaf1", "leaf2", "spine1", "spine2"],
                                 "ovs1": ["leaf3", "leaf4", "spine3", "spine4"]}
    # each leaf reaches the other half's two spines over instance-crossing links
    assert layout.crossing_links(topo(), placement) == 8


def test_per_switch_and_more_instances_than_switches():
    t = topo()
    assert len(layout.place(t, "per-switch")) == 8
    assert layout.crossing_links(t, layout.place(t, "per-switch")) == 16
    big = layout.place(t, "50")
    assert len(big) == 8 and all(len(g) == 1 for _, g in big)
    assert sorted(n for _, g in layout.place(t, "3") for n in g) == \
        sorted(sw["name"] for sw in t["switches"])


def test_pod_keeps_pods_and_puts_the_core_apart():
    placement = groups(layout.place(topo("three-tier"), "pod"))
    assert placement == {"ovs0": ["leaf1", "leaf2", "spine1", "spine2"],
                         "ovs1": ["leaf3", "leaf4", "spine3", "spine4"],
                         "ovs2": ["superspine1", "superspine2", "superspine3",
                                  "superspine4"]}


def test_plane_and_rail_follow_the_planes():
    t = topo("multi-plane")
    assert groups(layout.place(t, "rail")) == groups(layout.place(t, "plane")) == {
        "ovs0": ["leaf1", "leaf2", "spine1", "spine2"],
        "ovs1": ["leaf3", "leaf4", "spine3", "spine4"]}


def test_a_hosts_nic_switch_goes_with_its_first_leaf():
    t = topo("dual-tor")
    placement = layout.place(t, "per-switch")
    home = {n: name for name, g in placement for n in g}
    for sw in t["switches"]:
        if sw["tier"] == 0:
            first_leaf = next(p["peer"] for p in sw["ports"] if p["peer_kind"] != "host")
            assert home[sw["name"]] == home[first_leaf]
    assert len(placement) == 6          # 4 leaves + 2 spines; the NICs add none


def test_a_fabric_without_pods_refuses_the_pod_layout():
    with pytest.raises(ConfigError, match="no pods"):
        layout.place(topo(), "pod")


@pytest.mark.parametrize("text", ["", "zero", "-1", "0", "1.5"])
def test_bad_layouts_are_refused(text):
    with pytest.raises(ConfigError):
        layout.parse(text)


def test_parse_normalises():
    assert layout.parse(" Per-Switch ") == "per-switch"
    assert layout.parse(4) == "4"


def test_auto_keeps_one_instance_on_two_cores_and_splits_on_more():
    assert layout.choose(8, 2)[0] == "shared"
    assert layout.choose(8, 8)[0] == "7"
    assert layout.choose(8, 64)[0] == "8"          # never more than the switches
    assert layout.choose(8, 8, "system")[0] == "shared"


def test_resolve_order_fabric_then_environment_then_auto():
    fabric = presets.build("leaf-spine")
    assert layout.resolve(fabric, 2, env={})[0] == "shared"
    assert layout.resolve(fabric, 2, env={"FABRIC_LAB_LAYOUT": "2"}) == \
        ("2", "from FABRIC_LAB_LAYOUT")
    named = dataclasses.replace(fabric, layout="per-switch")
    assert layout.resolve(named, 2, env={"FABRIC_LAB_LAYOUT": "2"})[0] == "per-switch"
    with pytest.raises(ConfigError, match="FABRIC_LAB_LAYOUT"):
        layout.resolve(fabric, 2, env={"FABRIC_LAB_LAYOUT": "lots"})


FABRIC = """
name: tiny
layout: {layout}
topology:
  nodes:
    h1: {{kind: host}}
    h2: {{kind: host}}
    leaf1: {{kind: leaf}}
  links:
    - {{endpoints: [h1:eth0, leaf1:eth1], rate: 10Mbps}}
    - {{endpoints: [h2:eth0, leaf1:eth2], rate: 10Mbps}}
"""


def test_the_fabric_file_names_its_layout_and_show_keeps_it():
    fabric = spec.load_text(FABRIC.format(layout="per-switch"))
    assert fabric.layout == "per-switch"
    assert spec.load_text(spec.dump(fabric)).layout == "per-switch"


def test_a_bad_layout_in_the_fabric_file_names_the_key():
    with pytest.raises(ConfigError) as e:
        spec.load_text(FABRIC.format(layout="sideways"))
    assert e.value.where == "layout" and "sideways" in str(e.value)


def test_the_summary_says_the_layout():
    from emulator.report.summary import layout_text
    assert layout_text(None) == ""
    assert layout_text({"layout": "shared", "why": "2 cores", "instances": {},
                        "crossing_links": 0}) == ", layout shared (2 cores): one Open vSwitch"
    assert layout_text({"layout": "2", "why": "asked for", "crossing_links": 8,
                        "instances": {"ovs0": ["leaf1"], "ovs1": ["leaf2"]}}) == \
        ", layout 2 (asked for): 2 Open vSwitch instances, 8 links between them"
