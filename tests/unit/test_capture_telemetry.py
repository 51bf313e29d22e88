"""Capture specs, the telemetry port check and the group-stats reader (pure, no root)."""

import socket

import pytest

from emulator.dataplane.observe import capture
from emulator.errors import ConfigError
from emulator.experiments.spec.build import check_telemetry
from emulator.fabric import addressing, presets


@pytest.fixture(scope="module")
def topo():
    return addressing.plan(presets.build("leaf-spine", {"spines": "2", "leaves": "2",
                                                        "hosts_per_leaf": "1"}))


def test_capture_specs_name_hosts_switches_and_ports(topo):
    assert capture.parse("h1", topo) == [("h1", "eth0")]
    assert capture.parse("leaf1:eth3, h2", topo) == [("leaf1", "eth3"), ("h2", "eth0")]
    leaf1 = [p["name"] for s in topo["switches"] if s["name"] == "leaf1" for p in s["ports"]]
    assert capture.parse("leaf1", topo) == [("leaf1", p) for p in leaf1]
    assert capture.parse("h1,h1:eth0", topo) == [("h1", "eth0")]     # once each
    assert capture.parse(None, topo) == [] and capture.parse("", topo) == []


@pytest.mark.parametrize("spec,words", [("h9", "unknown node 'h9'"),
                                        ("leaf1:eth9", "no port 'eth9'"),
                                        ("h1:eth7", "its ports: eth0")])
def test_bad_capture_specs_say_what_is_wrong(topo, spec, words):
    with pytest.raises(ConfigError) as e:
        capture.parse(spec, topo)
    assert words in str(e.value) and "--capture" in str(e.value)


def test_telemetry_port_must_be_a_free_tcp_port():
    check_telemetry(None)
    for bad in (0, 70000):
        with pytest.raises(ConfigError) as e:
            check_telemetry(bad)
        assert "1-65535" in str(e.value)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(ConfigError) as e:
            check_telemetry(busy.getsockname()[1])
        assert "not free" in str(e.value)


def test_group_stats_are_read_per_bucket():
    from emulator.dataplane.observe.telemetry import count_flows, parse_group_stats
    text = ("OFPST_GROUP reply (OF1.5) (xid=0x2):\n"
            " group_id=1073741825,duration=2.5s,ref_count=4,packet_count=30,byte_count=3000,"
            "bucket0:packet_count=10,byte_count=1000,bucket1:packet_count=20,byte_count=2000\n"
            " group_id=7,duration=2.5s,ref_count=1,packet_count=0,byte_count=0,"
            "bucket0:packet_count=0,byte_count=0\n")
    assert parse_group_stats(text) == [(1073741825, 0, 10), (1073741825, 1, 20), (7, 0, 0)]
    flows = (" cookie=0x1, priority=100,ip,nw_dst=10.0.0.1 actions=output:1\n"
             " priority=0 actions=drop\n")
    assert count_flows(flows) == 2
