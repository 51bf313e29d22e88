"""The Clos presets: node/link counts, ports, labels, rates, addressing, YAML round trip."""

import pytest

from emulator.errors import ConfigError
from emulator.fabric import addressing, presets, spec


def kinds(f):
    out = {}
    for n in f.nodes:
        out[n.kind] = out.get(n.kind, 0) + 1
    return out


def peers(f, name):
    return [lk.other(name).node for lk in f.links_of(name)]


@pytest.mark.parametrize("name,params", [
    ("three-tier", {}), ("three-tier", {"superspine_attach": "all"}),
    ("dual-link", {}), ("dual-link", {"spines": "1", "mode": "active-standby"}),
    ("dual-plane", {}), ("multi-plane", {"planes": "3"}),
    ("dual-tor", {"mode": "active-standby"}), ("dual-plane", {"planes": "1"}),
])
def test_yaml_round_trip(name, params):
    f = presets.build(name, params)
    back = spec.load_text(spec.dump(f))
    assert back.nodes == f.nodes and back.links == f.links


def test_three_tier_counts_ports_and_pods():
    f = presets.build("three-tier", {"pods": "3", "spines_per_pod": "2", "leaves_per_pod": "2",
                                     "hosts_per_leaf": "2", "superspines": "4"})
    assert kinds(f) == {"host": 12, "leaf": 6, "spine": 6, "superspine": 4}
    # hosts + leaf-spine full mesh per pod + each spine to the 2 super-spines of its plane
    assert len(f.links) == 12 + 3 * 2 * 2 + 6 * 2
    assert peers(f, "leaf3") == ["h5", "h6", "spine3", "spine4"]      # pod 2
    assert peers(f, "spine4") == ["leaf3", "leaf4", "superspine3", "superspine4"]
    assert peers(f, "superspine3") == ["spine2", "spine4", "spine6"]   # plane 2
    assert f.node("leaf3").pod == 2 and f.node("spine4").pod == 2
    assert f.node("spine4").plane == 2 and f.node("superspine3").plane == 2
    assert f.node("h5").pod == 2
    plan = addressing.plan(f)
    assert [s["dpid"] for s in plan["switches"] if s["kind"] == "superspine"] == [
        0x30001, 0x30002, 0x30003, 0x30004]
    assert all(h["routes"] == [] for h in plan["hosts"])


def test_three_tier_attach_all_and_bad_plane_split():
    f = presets.build("three-tier", {"superspine_attach": "all", "superspines": "3"})
    assert peers(f, "spine1") == ["leaf1", "leaf2", "superspine1", "superspine2", "superspine3"]
    assert peers(f, "superspine2") == ["spine1", "spine2", "spine3", "spine4"]
    assert f.node("superspine2").plane is None
    with pytest.raises(ConfigError, match="superspines=3 is not a multiple of spines_per_pod=2"):
        presets.build("three-tier", {"superspines": "3"})


def test_three_tier_oversubscription_at_both_tiers():
    f = presets.build("three-tier", {"hosts_per_leaf": "4", "oversubscription": "2",
                                     "spine_oversubscription": "4"})
    assert presets.oversubscription(f, "leaf1") == pytest.approx(2.0)
    assert f.uplinks("leaf1")[0].rate_bps == 40_000_000       # 4*40 / (2 spines * 2)
    assert presets.oversubscription(f, "spine1") == pytest.approx(4.0)
    with pytest.raises(ConfigError, match="give spine_uplink_rate or spine_oversubscription"):
        presets.build("three-tier", {"spine_uplink_rate": "10Mbps",
                                     "spine_oversubscription": "2"})


def test_dual_link_two_spines_load_balancing():
    f = presets.build("dual-link", {"leaves": "3", "secondary_rate": "10Mbps"})
    assert kinds(f) == {"host": 6, "leaf": 3, "spine": 2}
    assert [(lk.other("leaf2").node, lk.rate_bps, lk.role) for lk in f.uplinks("leaf2")] == [
        ("spine1", 40_000_000, None), ("spine2", 10_000_000, None)]
    assert presets.oversubscription(f, "leaf2") == pytest.approx(80 / 50)


def test_dual_link_one_spine_active_standby_marks_both_ports():
    f = presets.build("dual-link", {"spines": "1", "leaves": "2", "mode": "active-standby"})
    assert [(lk.other("leaf1").node, lk.end("spine1").port if lk.other("leaf1").node == "spine1"
             else None, lk.role) for lk in f.uplinks("leaf1")] == [
        ("spine1", "eth1", None), ("spine1", "eth2", "standby")]
    plan = addressing.plan(f)
    spine = next(s for s in plan["switches"] if s["name"] == "spine1")
    assert [p.get("role") for p in spine["ports"]] == [None, "standby", None, "standby"]
    assert sum(1 for lk in plan["links"] if lk.get("role") == "standby") == 2


def test_dual_link_oversubscription_counts_active_uplinks_only():
    lb = presets.build("dual-link", {"oversubscription": "2"})
    assert lb.uplinks("leaf1")[0].rate_bps == 20_000_000     # 80 / (2 * 2)
    ast = presets.build("dual-link", {"oversubscription": "2", "mode": "active-standby"})
    assert {lk.rate_bps for lk in ast.uplinks("leaf1")} == {40_000_000}
    with pytest.raises(ConfigError, match="not both"):
        presets.build("dual-link", {"oversubscription": "2", "secondary_rate": "1Mbps"})
    with pytest.raises(ConfigError, match="'standby' is not one of"):
        presets.build("dual-link", {"mode": "standby"})


def test_dual_tor_hosts_have_one_address_on_two_tors():
    f = presets.build("dual-tor", {"tor_pairs": "2", "hosts_per_pair": "3", "spines": "2",
                                   "mode": "active-standby"})
    assert kinds(f) == {"host": 6, "leaf": 4, "spine": 2}
    assert len(f.links) == 6 * 2 + 4 * 2
    assert peers(f, "h4") == ["leaf3", "leaf4"]                 # pair 2: ToR A, ToR B
    assert [lk.role for lk in f.links_of("h4")] == [None, "standby"]
    assert f.node("h4").bond == "active-standby"
    for lk in f.links:     # non-stacked: no ToR-to-ToR link
        assert {f.node(lk.a.node).kind, f.node(lk.b.node).kind} != {"leaf"}
    plan = addressing.plan(f, "ab12")
    h4 = next(h for h in plan["hosts"] if h["name"] == "h4")
    assert [(p["port"], p["ip"], p["switch"]) for p in h4["ports"]] == [
        ("bond0", "10.0.0.4", "h4.nic")]
    assert h4["leaf"] == "leaf3" and h4["bond"]["mode"] == "active-standby"
    assert [(m["port"], m["switch"], m["role"]) for m in h4["bond"]["members"]] == [
        ("eth0", "leaf3", None), ("eth1", "leaf4", "standby")]
    nic = next(s for s in plan["switches"] if s["name"] == "h4.nic")
    assert (nic["kind"], nic["tier"], nic["dpid"], nic["bridge"]) == ("nic", 0, 4, "flab12n4")
    assert [(p["port"], p["peer"], p["peer_port"], p.get("role")) for p in nic["ports"]] == [
        (1, "h4", "bond0", None), (2, "leaf3", 1, None), (3, "leaf4", 1, "standby")]
    leaf4 = next(s for s in plan["switches"] if s["name"] == "leaf4")
    assert leaf4["ports"][0] == {"port": 1, "name": "eth1", "intf": "flab12l4-e1",
                                 "peer": "h4.nic", "peer_kind": "nic", "peer_port": 3,
                                 "rate_bps": 40_000_000, "role": "standby"}
    assert {"a": "h4.nic:eth1", "b": "h4:bond0", "rate_bps": 80_000_000} in plan["links"]
    assert presets.oversubscription(f, "leaf1") == pytest.approx(1.5)   # 3 x 40 / 2 x 40


def test_dual_plane_tor_a_and_b_in_separate_planes():
    f = presets.build("dual-plane", {"tor_pairs": "3", "spines": "4"})
    assert f.name == "dual-plane-3p2h4s-aa"
    assert kinds(f) == {"host": 6, "leaf": 6, "spine": 4}
    assert [f.node(s).plane for s in ("spine1", "spine2", "spine3", "spine4")] == [1, 1, 2, 2]
    assert [f.node(t).plane for t in ("leaf1", "leaf2", "leaf5", "leaf6")] == [1, 2, 1, 2]
    assert peers(f, "leaf5") == ["h5", "h6", "spine1", "spine2"]
    assert peers(f, "leaf6") == ["h5", "h6", "spine3", "spine4"]
    assert peers(f, "spine3") == ["leaf2", "leaf4", "leaf6"]
    single = presets.build("dual-plane", {"tor_pairs": "3", "spines": "4", "planes": "1",
                                          "oversubscription": "1"})
    assert single.name == "dual-tor-3p2h4s-aa"
    assert peers(single, "leaf5") == ["h5", "h6", "spine1", "spine2", "spine3", "spine4"]
    # same ToR uplink capacity: 4 x 20 = 2 x 40
    assert {lk.rate_bps for lk in single.uplinks("leaf5")} == {20_000_000}
    assert presets.oversubscription(single, "leaf5") == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="spines=3 is not a multiple of planes=2"):
        presets.build("dual-plane", {"spines": "3"})


def test_bond_is_validated():
    doc = spec.dump(presets.build("dual-tor", {"tor_pairs": "1", "hosts_per_pair": "1",
                                               "spines": "1"}))
    assert "bond: active-active" in doc
    for bad, msg in [
        (doc.replace("bond: active-active", "bond: lacp"), "unknown bond mode 'lacp'"),
        (doc.replace("kind: leaf}", "kind: leaf, bond: active-active}", 1),
         "only hosts have a bond"),
        (doc.replace("bond: active-active", "bond: active-standby"),
         "active-standby needs exactly one active link"),
        (doc.replace("'leaf2:eth1'", "'leaf1:eth5'"),
         "must go to different switches"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            spec.load_text(bad)


def test_multi_plane_hosts_have_one_nic_per_plane_and_rail_routes():
    f = presets.build("multi-plane", {"planes": "3", "leaves_per_plane": "2",
                                      "hosts_per_leaf": "2", "spines_per_plane": "2"})
    assert kinds(f) == {"host": 4, "leaf": 6, "spine": 6}
    assert len(f.links) == 4 * 3 + 6 * 2
    assert [(lk.end("h3").port, lk.other("h3").node) for lk in f.links_of("h3")] == [
        ("eth0", "leaf2"), ("eth1", "leaf4"), ("eth2", "leaf6")]
    assert [f.node(n).plane for n in ("leaf2", "leaf4", "leaf6", "spine5")] == [1, 2, 3, 3]
    plan = addressing.plan(f)
    h1 = plan["hosts"][0]
    assert [p["ip"] for p in h1["ports"]] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    # one /32 per port of every other host, through the local NIC of that plane
    assert len(h1["routes"]) == 3 * 3
    assert {"dst": "10.0.0.5/32", "dev": "eth1", "src": "10.0.0.2"} in h1["routes"]
    assert {"dst": "10.0.0.12/32", "dev": "eth2", "src": "10.0.0.3"} in h1["routes"]


def test_planes_need_a_host_between_them():
    f = presets.build("multi-plane", {"planes": "2", "leaves_per_plane": "1",
                                      "hosts_per_leaf": "1", "spines_per_plane": "1"})
    doc = f.to_spec()
    # cut h1's plane-2 NIC: the planes share no host any more
    doc["topology"]["links"] = [lk for lk in doc["topology"]["links"]
                                if lk["endpoints"][0] != "h1:eth1"]
    with pytest.raises(ConfigError, match=r"planes \[2\] share no host with plane 1"):
        spec.parse(doc)
    # and a plane that is itself cut in two is refused
    doc = f.to_spec()
    doc["topology"]["nodes"]["leaf9"] = {"kind": "leaf", "plane": 1}
    doc["topology"]["nodes"]["h9"] = {"kind": "host"}
    doc["topology"]["links"].append({"endpoints": ["h9:eth0", "leaf9:eth1"], "rate": "1Mbps"})
    with pytest.raises(ConfigError, match="leaf9 cannot reach"):
        spec.parse(doc)


def test_standby_role_is_validated():
    doc = presets.build("dual-link").to_spec()
    doc["topology"]["links"][-1]["role"] = "backup"
    with pytest.raises(ConfigError, match=r"links\[7\].role: unknown role 'backup'"):
        spec.parse(doc)
    doc["topology"]["links"][-1]["role"] = "standby"
    assert spec.parse(doc).links[-1].role == "standby"
    doc["topology"]["links"][0]["role"] = "standby"
    with pytest.raises(ConfigError, match="only switch-to-switch links and the links of a host with bond"):
        spec.parse(doc)


def test_every_preset_is_listed_with_its_parameters():
    assert set(presets.PRESETS) >= {"leaf-spine", "three-tier", "dual-link", "dual-plane",
                                    "multi-plane"}
    for name in presets.PRESETS:      # Clos presets: an oversubscription; dragonflies: none
        key = "global_rate" if name.startswith("dragonfly") else "oversubscription"
        assert key in presets.describe(name)
