"""Presets and the addressing plan are deterministic functions of the model."""

import pytest

from emulator.errors import ConfigError
from emulator.fabric import addressing, presets
from emulator.fabric.units import format_rate, parse_rate


def test_leaf_spine_counts_and_ports():
    f = presets.build("leaf-spine", {"spines": "3", "leaves": "5", "hosts_per_leaf": "4"})
    assert len(f.hosts) == 20 and len(f.switches) == 8
    assert len(f.links) == 20 + 5 * 3
    assert [lk.other("leaf2").node for lk in f.uplinks("leaf2")] == ["spine1", "spine2", "spine3"]
    # leaf ports: eth1..eth4 face hosts, eth5..eth7 face spines; spine port ethL faces leafL
    assert [lk.end("leaf2").port for lk in f.links_of("leaf2")] == [f"eth{i}" for i in range(1, 8)]
    assert [lk.other("spine3").node for lk in f.links_of("spine3")] == [
        f"leaf{i}" for i in range(1, 6)]


def test_oversubscription_is_a_parameter():
    f = presets.build("leaf-spine", {"spines": "2", "hosts_per_leaf": "4",
                                     "host_rate": "40Mbps", "oversubscription": "2"})
    assert f.uplinks("leaf1")[0].rate_bps == 40_000_000
    assert presets.oversubscription(f, "leaf1") == pytest.approx(2.0)
    default = presets.build("leaf-spine")
    assert presets.oversubscription(default, "leaf1") == pytest.approx(0.5)


@pytest.mark.parametrize("params,expected", [
    ({"spine": "2"}, "unknown parameter 'spine'"),
    ({"spines": "0"}, "outside 1..32"),
    ({"spines": "two"}, "'two' is not a valid int"),
    ({"host_rate": "40"}, "host_rate"),
    ({"uplink_rate": "10Mbps", "oversubscription": "2"}, "not both"),
])
def test_bad_preset_parameters(params, expected):
    with pytest.raises(ConfigError, match=expected):
        presets.build("leaf-spine", params)


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown preset 'fat-tree'"):
        presets.build("fat-tree")


def test_plan_is_deterministic_and_unique():
    f = presets.build("leaf-spine", {"leaves": "8", "hosts_per_leaf": "40"})
    a, b = addressing.plan(f, "ab12"), addressing.plan(f, "ab12")
    assert a == b
    ips = [p["ip"] for h in a["hosts"] for p in h["ports"]]
    macs = [p["mac"] for h in a["hosts"] for p in h["ports"]]
    dpids = [s["dpid"] for s in a["switches"]]
    assert len(set(ips)) == len(ips) == 320 and len(set(macs)) == 320
    assert len(set(dpids)) == len(dpids)
    assert ips[0] == "10.0.0.1" and ips[255] == "10.0.1.0" and macs[299] == "02:00:00:00:01:2c"
    leaf1 = a["switches"][0]
    assert leaf1["dpid"] == 0x10001 and leaf1["bridge"] == "flab12l1"
    assert leaf1["ports"][40]["intf"] == "flab12l1-e41" and leaf1["ports"][40]["peer"] == "spine1"
    assert a["switches"][-1]["dpid"] == 0x20004


def test_hash_seed_modes():
    f = presets.build("leaf-spine")
    per_switch = addressing.plan(f, "0000")
    assert len({s["hash_seed"] for s in per_switch["switches"]}) == len(f.switches)
    same = addressing.plan(f, "0000", seed=42)
    assert {s["hash_seed"] for s in same["switches"]} == {42}


def test_interface_names_fit_linux():
    f = presets.build("leaf-spine", {"leaves": "64", "hosts_per_leaf": "8", "spines": "32"})
    plan = addressing.plan(f, "ffff")
    assert max(len(p["intf"]) for s in plan["switches"] for p in s["ports"]) <= 15


@pytest.mark.parametrize("text,bps", [("50Mbps", 50_000_000), ("1Gbps", 10**9),
                                      ("2.5 Gbit", 2_500_000_000), ("40Mbit/s", 40_000_000)])
def test_rates(text, bps):
    assert parse_rate(text) == bps
    assert parse_rate(format_rate(bps)) == bps


@pytest.mark.parametrize("text", [50, "50", "50M", "fast", "0.5bps", True, None])
def test_bad_rates(text):
    with pytest.raises(ValueError):
        parse_rate(text)
