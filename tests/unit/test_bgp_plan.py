"""The routed plan of a BGP fabric: RFC 7938's ASNs, the addresses, FRR's configuration,
the fabrics refused (fabric.routing; pure)."""

import argparse
import dataclasses
import ipaddress

import pytest

from emulator.errors import ConfigError, FabricError
from emulator.experiments.drill.drill import file_part, mode_plan
from emulator.experiments.spec.build import check as check_spec
from emulator.fabric import addressing, presets, spec
from emulator.fabric.model import Fabric, Node
from emulator.fabric.routing import addresses, asn, frrconf
from emulator.fabric.runspec import RunSpec
from lab.modes import LB, Control, Peering


def bgp(name, **params):
    f = presets.build(name, {k: str(v) for k, v in params.items()})
    return dataclasses.replace(f, control=Control.BGP)


def test_leaf_spine_asns_follow_rfc7938():
    f = bgp("leaf-spine")
    plan = asn.plan(f)
    spines = {plan[n.name] for n in f.switches if n.kind == "spine"}
    leaves = [plan[n.name] for n in f.switches if n.kind == "leaf"]
    assert len(spines) == 1                          # the top tier shares one ASN
    assert len(set(leaves)) == len(leaves) == 4       # one per ToR
    assert spines.isdisjoint(leaves)
    assert all(64512 <= a <= 65534 for a in plan.values())   # RFC 6996 private


def test_three_tier_has_one_asn_per_pod_of_spines():
    f = bgp("three-tier", pods=3)
    plan = asn.plan(f)
    tops = {plan[n.name] for n in f.switches if n.kind == "superspine"}
    by_pod = {}
    for n in f.switches:
        if n.kind == "spine":
            by_pod.setdefault(n.pod, set()).add(plan[n.name])
    assert len(tops) == 1
    assert all(len(v) == 1 for v in by_pod.values())          # a pod's spines share it
    pod_asns = {next(iter(v)) for v in by_pod.values()}
    assert len(pod_asns) == 3 and pod_asns.isdisjoint(tops)
    tors = [plan[n.name] for n in f.switches if n.kind == "leaf"]
    assert len(set(tors)) == len(tors) and pod_asns.isdisjoint(tors)


def test_a_fabric_past_the_2_byte_private_range_gets_4_byte_asns():
    small = asn.plan(bgp("leaf-spine", leaves=64, spines=1, hosts_per_leaf=1))
    assert max(small.values()) < 65535
    # 1100 ToRs do not fit the 1023 private 2-byte ASNs
    big = Fabric("big", tuple(Node(f"leaf{i}", "leaf") for i in range(1100)) +
                 (Node("spine1", "spine"),), ())
    plan = asn.plan(big)
    assert min(plan.values()) == asn.PRIVATE_4B
    assert len(set(plan.values())) == 1101


@pytest.mark.parametrize("name", ["dragonfly", "dragonfly-plus", "dual-plane"])
def test_presets_that_cannot_run_under_bgp_are_refused_by_name(name):
    f = presets.build(name, {})
    why = asn.refusal(f, {"preset": name})
    assert why and why.startswith(f"preset {name} cannot run under --control bgp")
    with pytest.raises(ConfigError):
        asn.check(f, {"preset": name})


@pytest.mark.parametrize("name", ["leaf-spine", "three-tier", "dual-link", "dual-tor",
                                  "rail-only", "multi-plane", "rail-optimized"])
def test_clos_presets_run_under_bgp(name):
    assert asn.refusal(presets.build(name, {}), {"preset": name}) is None


def test_a_fabric_file_linking_two_leaves_is_refused_by_its_name():
    f = spec.load_text("""
name: odd
topology:
  defaults: {rate: 40Mbps}
  nodes: {h1: {kind: host}, h2: {kind: host}, leaf1: {kind: leaf}, leaf2: {kind: leaf}}
  links:
    - endpoints: ["h1:eth0", "leaf1:eth1"]
    - endpoints: ["h2:eth0", "leaf2:eth1"]
    - endpoints: ["leaf1:eth2", "leaf2:eth2"]
""")
    assert "fabric odd cannot run under --control bgp: leaf1-leaf2" in asn.refusal(f)


def test_leaf_subnets_and_host_links():
    doc = addressing.plan(bgp("leaf-spine"))
    assert doc["control"] == "bgp"
    leaves = [sw for sw in doc["switches"] if sw["kind"] == "leaf"]
    subnets = [ipaddress.ip_network(sw["bgp"]["subnet"]) for sw in leaves]
    assert [str(n) for n in subnets] == ["10.1.0.0/24", "10.1.1.0/24", "10.1.2.0/24",
                                          "10.1.3.0/24"]
    by_leaf = {sw["name"]: n for sw, n in zip(leaves, subnets)}
    macs = {sw["name"]: sw["bgp"]["mac"] for sw in doc["switches"]}
    assert len(set(macs.values())) == len(macs)
    for h in doc["hosts"]:
        p = h["ports"][0]
        net = ipaddress.ip_network(f"{p['gateway']}/31")
        assert ipaddress.ip_address(p["ip"]) in net and p["prefix_len"] == 31
        assert net.subnet_of(by_leaf[p["switch"]])
        assert p["gateway_mac"] == macs[p["switch"]]
        assert h["ip"] == p["ip"] and h["rules"] == [] and h["routes"] == []
    ips = [p["ip"] for h in doc["hosts"] for p in h["ports"]]
    assert len(set(ips)) == len(ips)


def test_fabric_links_are_31s_with_the_lower_tier_on_the_even_address():
    doc = addressing.plan(bgp("leaf-spine"))
    sw = {s["name"]: s for s in doc["switches"]}
    seen = set()
    for s in doc["switches"]:
        for p in frrconf.fabric_ports(s):
            mine, theirs = ipaddress.ip_address(p["ip"]), ipaddress.ip_address(p["peer_ip"])
            assert ipaddress.ip_network(f"{mine}/31", strict=False) == \
                ipaddress.ip_network(f"{theirs}/31", strict=False)
            assert (int(mine) % 2 == 0) == (s["tier"] < sw[p["peer"]]["tier"])
            assert p["peer_asn"] == sw[p["peer"]]["bgp"]["asn"]
            seen.add(str(mine))
    assert len(seen) == 2 * 16                          # 16 links, both ends distinct


def test_dual_tor_hosts_get_one_address_per_nic_and_source_rules():
    doc = addressing.plan(bgp("dual-tor"))
    assert not any(s["kind"] == "nic" for s in doc["switches"])   # no NIC switches
    h = doc["hosts"][0]
    assert [p["switch"] for p in h["ports"]] == ["leaf1", "leaf2"]
    assert len({p["ip"] for p in h["ports"]}) == 2
    assert [(r["src"], r["dev"], r["via"]) for r in h["rules"]] == [
        (p["ip"], p["port"], p["gateway"]) for p in h["ports"]]
    assert len({r["table"] for r in h["rules"]}) == 2
    assert all(lk["b"] != "h1:bond0" for lk in doc["links"])


def test_rail_only_hosts_reach_other_rails_through_that_rails_nic():
    doc = addressing.plan(bgp("rail-only"))
    h = doc["hosts"][0]
    leaf_of = {s["bgp"]["subnet"]: s["name"] for s in doc["switches"] if s["bgp"]["subnet"]}
    rail_of_leaf = {s["name"]: s["plane"] for s in doc["switches"]}
    port_rail = {p["port"]: rail_of_leaf[p["switch"]] for p in h["ports"]}
    assert h["routes"]
    for r in h["routes"]:
        assert port_rail[r["dev"]] == rail_of_leaf[leaf_of[r["dst"]]]


def test_bgpd_configuration_of_a_leaf():
    doc = addressing.plan(bgp("leaf-spine"))
    leaf1 = doc["switches"][0]
    text = frrconf.bgpd_conf(leaf1)
    assert text.startswith("frr defaults datacenter\n")
    assert f"router bgp {leaf1['bgp']['asn']}" in text
    for line in (" bgp bestpath as-path multipath-relax", "  maximum-paths 64",
                 " timers bgp 3 9", " neighbor FABRIC bfd", " neighbor FABRIC bfd profile fabric",
                 "  aggregate-address 10.1.0.0/24 summary-only", "  network 10.1.0.0/31",
                 "  network 10.1.0.2/31"):
        assert line + "\n" in text
    for p in frrconf.fabric_ports(leaf1):
        assert f" neighbor {p['peer_ip']} remote-as {p['peer_asn']}\n" in text
    assert "route-map" not in text
    spine = next(s for s in doc["switches"] if s["kind"] == "spine")
    assert "network" not in frrconf.bgpd_conf(spine)


def test_bfd_profile_and_unnumbered_sessions():
    doc = addressing.plan(bgp("leaf-spine"))
    leaf1 = doc["switches"][0]
    conf = frrconf.configs(leaf1, 50, 4, Peering.UNNUMBERED)
    assert "  detect-multiplier 4\n  receive-interval 50\n  transmit-interval 50\n" \
        in conf["bfdd"]
    port = frrconf.fabric_ports(leaf1)[0]
    assert f" neighbor {port['intf']} interface peer-group FABRIC\n" in conf["bgpd"]
    assert "no ipv6 nd suppress-ra" in conf["zebra"]


def test_a_standby_link_is_the_last_resort():
    doc = addressing.plan(bgp("dual-link", spines=1, mode="active-standby"))
    leaf1 = doc["switches"][0]
    standby = [p for p in frrconf.fabric_ports(leaf1) if p.get("role") == "standby"]
    assert len(standby) == 1
    text = frrconf.bgpd_conf(leaf1)
    assert f"  neighbor {standby[0]['peer_ip']} route-map STANDBY-IN in\n" in text
    assert " set local-preference 50\n" in text
    asn_ = leaf1["bgp"]["asn"]
    assert f" set as-path prepend {asn_} {asn_}\n" in text


def test_the_run_names_the_control_plane_and_the_fabric_carries_it():
    f = presets.build("leaf-spine", {})
    s = RunSpec(f, control="bgp")
    assert s.control == Control.BGP and s.fabric.control == Control.BGP
    assert RunSpec.from_doc(s.to_doc()) == s
    assert RunSpec(dataclasses.replace(f, control=Control.BGP)).control == Control.BGP
    assert s.replace(control=Control.OPENFLOW).fabric.control == Control.OPENFLOW
    with pytest.raises(FabricError):
        RunSpec(f, control="ospf")


def test_the_fabric_file_key():
    text = "name: x\ncontrol: bgp\ntopology:\n  nodes: {h1: {kind: host}, leaf1: {kind: leaf}}\n" \
           "  links:\n    - {endpoints: ['h1:eth0', 'leaf1:eth1'], rate: 40Mbps}\n"
    f = spec.load_text(text)
    assert f.control == Control.BGP and f.to_spec()["control"] == "bgp"
    with pytest.raises(ConfigError, match="control"):
        spec.load_text(text.replace("control: bgp", "control: ospf"))


def test_next_hop_mac():
    assert addresses.next_hop_mac({"gateway_mac": "02:fa:00:00:00:01"},
                                  {"mac": "02:00:00:00:00:05"}) == "02:fa:00:00:00:01"
    assert addresses.next_hop_mac({"mac": "a"}, {"mac": "02:00:00:00:00:05"}) == \
        "02:00:00:00:00:05"


def test_the_drills_rows_side_by_side_and_their_file_names():
    args = argparse.Namespace(control="openflow,bgp", lb="ecmp,dlb",
                              failover="controller,fast-failover")
    rows = mode_plan(RunSpec(presets.build("leaf-spine", {})), args)
    labels = [label for label, _ in rows]
    assert labels == ["openflow/controller", "openflow/fast-failover",
                      "openflow/fast-failover+dlb", "bgp+bfd"]
    assert rows[-1][1]["control"] == Control.BGP and rows[-1][1]["lb"] == LB.ECMP
    assert all("/" not in file_part(label) for label in labels)


def test_trimming_is_refused_under_bgp():
    # the routers' ports get no trimming classes (dataplane.routed)
    s = RunSpec(presets.build("leaf-spine", {}), control="bgp", transport="uet", cc="nscc",
                trim=134)
    with pytest.raises(ConfigError, match="--control openflow"):
        check_spec(s)
    check_spec(s.replace(control=Control.OPENFLOW))
