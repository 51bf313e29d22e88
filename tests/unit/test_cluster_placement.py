"""One fabric on several servers: the servers' syntax, the placement, the tunnels,
the MTU they carry (emulator/fabric/cluster.py)."""

import pytest

from emulator.errors import ConfigError
from emulator.fabric import addressing, cluster, presets, spec
from emulator.fabric.units import link_mtu


def servers(n):
    return cluster.parse_servers(",".join(f"root@10.9.0.{10 + i}" for i in range(n)))


def plan(name="leaf-spine", **params):
    return addressing.plan(presets.build(name, {k: str(v) for k, v in params.items()}), "ab12")


def test_servers_from_text_and_mappings():
    got = cluster.parse_servers("root@10.0.0.1,lab@10.0.0.2,10.0.0.3")
    assert [(s.name, s.user, s.address) for s in got] == [
        ("srv1", "root", "10.0.0.1"), ("srv2", "lab", "10.0.0.2"), ("srv3", "root", "10.0.0.3")]
    got = cluster.parse_servers([{"address": "10.0.0.7", "user": "ops", "name": "rack-a"}])
    assert got[0].dest == "ops@10.0.0.7" and got[0].name == "rack-a"


@pytest.mark.parametrize("value,needle", [
    ("root@server1", "not an IPv4 address"),
    ("root@127.0.0.1", "cannot be a server's underlay address"),
    ("root@10.0.0.1,root@10.0.0.1", "given twice"),
    ("Bad User@10.0.0.1", "not a user name"),
    ([{"address": "10.0.0.1", "port": 22}], "unknown key 'port'"),
    ("", "give one or more servers"),
])
def test_bad_servers_are_named(value, needle):
    with pytest.raises(ConfigError) as e:
        cluster.parse_servers(value)
    assert needle in str(e.value)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_leaves_stay_with_their_hosts_and_only_spine_links_cross(n):
    topo = plan()
    where = cluster.place(topo, servers(n))
    assert set(where) == {sw["name"] for sw in topo["switches"]} | {h["name"] for h in topo["hosts"]}
    for h in topo["hosts"]:
        assert where[h["name"]] == where[h["ports"][0]["switch"]]
    ports, host_links = cluster.crossing(topo, where)
    assert host_links == []
    tier = {sw["name"]: sw["tier"] for sw in topo["switches"]}
    assert all({tier[sw["name"]], tier[p["peer"]]} == {1, 2} for sw, p in ports)
    assert len({s for s in where.values()}) == n          # every server carries something


def test_two_servers_on_the_default_fabric_split_it_in_half():
    topo = plan()
    where = cluster.place(topo, servers(2))
    assert sorted(n for n, s in where.items() if s == "srv1") == [
        "h1", "h2", "h3", "h4", "leaf1", "leaf2", "spine1", "spine2"]
    ports, _ = cluster.crossing(topo, where)
    assert len(ports) // 2 == 8      # each leaf's two uplinks to the other server's spines


def test_dual_tor_pairs_and_their_nics_stay_together():
    topo = plan("dual-tor")
    where = cluster.place(topo, servers(2))
    for sw in topo["switches"]:
        if sw["tier"] == 0:
            leaves = {where[p["peer"]] for p in sw["ports"] if p["peer_kind"] != "host"}
            assert leaves == {where[sw["name"]]}
    with pytest.raises(ConfigError, match="at most 2 servers"):
        cluster.place(topo, servers(3))


def test_placement_by_plane_that_splits_a_host_is_refused():
    with pytest.raises(ConfigError, match="use --placement auto"):
        cluster.place(plan("multi-plane"), servers(2), "plane")


def test_tunnels_pair_up_with_one_vni_per_link():
    topo = plan()
    where = cluster.place(topo, servers(3))
    t = cluster.tunnels(topo, where, servers(3), "ab12")
    ends = [e for per in t.values() for e in per]
    by_vni = {}
    for e in ends:
        by_vni.setdefault(e["vni"], []).append(e)
    assert all(len(v) == 2 for v in by_vni.values())      # one VNI, two ends
    for a, b in by_vni.values():
        assert (a["switch"], a["local"]) == (b["peer"], b["remote"])
        assert (b["switch"], b["local"]) == (a["peer"], a["remote"])
    assert len(by_vni) == len(cluster.crossing(topo, where)[0]) // 2
    other = cluster.tunnels(topo, where, servers(3), "ab13")
    assert {e["vni"] for v in other.values() for e in v}.isdisjoint(by_vni)


def test_parallel_links_get_their_own_tunnels():
    topo = plan("dual-link")
    where = cluster.place(topo, servers(2))
    t = cluster.tunnels(topo, where, servers(2), "ab12")
    vnis = [e["vni"] for e in t["srv1"]]
    assert len(vnis) == len(set(vnis)) == 2


def test_mtu_check_names_the_largest_roce_mtu_that_fits():
    assert cluster.check_mtu(9000, 4096) == link_mtu(4096)
    assert cluster.check_mtu(1500, 1024) == 1450          # RoCE 1024 frames: 1152 bytes
    with pytest.raises(ConfigError) as e:
        cluster.check_mtu(1500, 4096, "srv2")
    msg = str(e.value)
    assert "--mtu 1024" in msg and "srv2" in msg
    assert f"underlay MTU to {link_mtu(4096) + 50} or more" in msg


def test_part_holds_only_its_nodes_and_their_links():
    topo = plan()
    where = cluster.place(topo, servers(2))
    part = cluster.part(topo, where, "srv2")
    names = {sw["name"] for sw in part["switches"]} | {h["name"] for h in part["hosts"]}
    assert names == {n for n, s in where.items() if s == "srv2"}
    for lk in part["links"]:
        assert {lk["a"].split(":")[0], lk["b"].split(":")[0]} <= names


def test_fabric_file_servers_round_trip():
    text = """
name: two
servers: [root@10.1.0.2, {address: 10.1.0.3, user: lab, name: b}]
placement: auto
topology:
  nodes: {h1: {kind: host}, h2: {kind: host}, leaf1: {kind: leaf}, leaf2: {kind: leaf},
          spine1: {kind: spine}}
  links:
    - {endpoints: ["h1:eth0", "leaf1:eth1"], rate: 40Mbps}
    - {endpoints: ["h2:eth0", "leaf2:eth1"], rate: 40Mbps}
    - {endpoints: ["leaf1:eth2", "spine1:eth1"], rate: 40Mbps}
    - {endpoints: ["leaf2:eth2", "spine1:eth2"], rate: 40Mbps}
"""
    fabric = spec.load_text(text)
    assert [s.dest for s in fabric.cluster.servers] == ["root@10.1.0.2", "lab@10.1.0.3"]
    again = spec.load_text(spec.dump(fabric))
    assert again.cluster == fabric.cluster
    with pytest.raises(ConfigError, match="placement needs servers"):
        spec.load_text(text.replace("servers: [root@10.1.0.2, {address: 10.1.0.3, user: lab, "
                                    "name: b}]\n", ""))


def _doc(**over):
    doc = {"root": True, "ovs": "ovs-vswitchd (Open vSwitch) 3.1.0", "mininet": "2.3.0",
           "python": "3.11.2", "project": "abc", "missing": [], "underlay_mtu": 9000,
           "ovs_netdev": False, "boot_id": "x", "wmem_default": 64 << 20,
           "tunnels": ["vxlan"]}
    doc.update(over)
    return doc


@pytest.mark.parametrize("over,needle", [
    ({"ovs": "ovs-vswitchd (Open vSwitch) 2.17.9"}, "runs Open vSwitch ovs-vswitchd (Open vSwitch) 2.17.9, this machine"),
    ({"project": "def"}, "runs the project's code def"),
    ({"mininet": None}, "lacks Mininet"),
    ({"missing": ["mnexec"]}, "lacks mnexec"),
    ({"ovs_netdev": True}, "userspace bridges"),
    ({"underlay_mtu": 1500}, "--mtu 1024"),
    ({"underlay_mtu": None}, "no route back"),
    ({"wmem_default": 212992}, "net.core.wmem_default is 212992"),
    ({"tunnels": ["gretap"]}, "cannot make VXLAN devices (it has: gretap)"),
])
def test_preflight_names_the_first_server_that_falls_short(over, needle):
    from emulator.dataplane.cluster.servers import judge
    srv = servers(2)
    docs = {"srv1": _doc(), "srv2": _doc(**over)}
    with pytest.raises(Exception) as e:
        judge(srv, docs, _doc(), {"srv1": "10.9.0.1", "srv2": "10.9.0.1"}, 4096)
    assert needle in str(e.value) and "srv2" in str(e.value)
    judge(srv, {"srv1": _doc(), "srv2": _doc()}, _doc(), {"srv1": "a", "srv2": "a"}, 4096)


def test_parallel_links_with_crossed_port_numbers_pair_their_own_ends():
    text = """
name: crossed
topology:
  nodes: {h1: {kind: host}, h2: {kind: host}, leaf1: {kind: leaf}, leaf2: {kind: leaf},
          spine1: {kind: spine}, spine2: {kind: spine}}
  links:
    - {endpoints: ["h1:eth0", "leaf1:eth1"], rate: 40Mbps}
    - {endpoints: ["h2:eth0", "leaf2:eth1"], rate: 40Mbps}
    - {endpoints: ["leaf1:eth2", "spine1:eth1"], rate: 40Mbps}
    - {endpoints: ["leaf2:eth2", "spine1:eth2"], rate: 40Mbps}
    - {endpoints: ["leaf2:eth3", "spine2:eth1"], rate: 40Mbps}
    - {endpoints: ["leaf1:eth3", "spine2:eth4"], rate: 40Mbps}
    - {endpoints: ["leaf1:eth4", "spine2:eth3"], rate: 40Mbps}
"""
    topo = addressing.plan(spec.load_text(text), "ab12")
    srv = servers(2)
    where = cluster.place(topo, srv)
    assert where["leaf1"] != where["spine2"]
    ends = [e for per in cluster.tunnels(topo, where, srv, "ab12").values() for e in per]
    peer_port = {(sw["name"], p["port"]): (p["peer"], p["peer_port"])
                 for sw in topo["switches"] for p in sw["ports"]}
    by_vni = {}
    for e in ends:
        by_vni.setdefault(e["vni"], []).append(e)
    assert len(by_vni) == 3 and all(len(v) == 2 for v in by_vni.values())
    for a, b in by_vni.values():
        assert peer_port[(a["switch"], a["port"])] == (b["switch"], b["port"])


def test_the_summary_names_the_servers_and_what_crosses():
    from emulator.report.summary import servers_text
    doc = {"servers": {"srv1": {"address": "10.9.0.10", "nodes": ["h1", "leaf1"]},
                       "srv2": {"address": "10.9.0.11", "nodes": ["h2", "leaf2", "spine1"]}},
           "crossing_links": 2, "placement": "auto",
           "one_way_latency": "not measured: the servers' clocks are not shared",
           "clocks": {"offset_ms": {"srv1": 0.1, "srv2": -3.2}, "error_ms": 0.4}}
    first, second = servers_text(doc)
    assert "srv1 (10.9.0.10) 2 nodes; srv2 (10.9.0.11) 3 nodes; 2 links between them" in first
    assert "not measured" in second and "within 0.4 ms" in second
    assert servers_text(None) == []


def test_show_prints_the_placement(capsys):
    from emulator.__main__ import main
    assert main(["show", "--servers", "10.9.0.1,10.9.0.2,10.9.0.3"]) == 0
    out = capsys.readouterr().out.splitlines()[-1]
    assert out == ("servers (placement auto): srv1 (10.9.0.1): 8 nodes; srv2 (10.9.0.2): "
                   "4 nodes; srv3 (10.9.0.3): 4 nodes; 10 links between them")
    assert main(["show", "--servers", ",".join(f"10.9.0.{i}" for i in range(1, 6))]) == 2
    assert "at most 4 servers" in capsys.readouterr().err


def _engine_doc(counts, lat_max, t0):
    return {"window_s": 1.0, "frame_len": 4170,
            "streams": [{"name": "s", "per_flow": {"a#0": 10}}],
            "receivers": [{"name": "r", "t0_ns": t0, "latency_ms": {"p50": 1.0},
                           "flows": [{"flow": "a#0", "first_arrival_ns": t0 + 5,
                                      "latency_us": {"min": 1.0},
                                      "disruptions": [{"start_ns": t0 + 7, "end_ns": t0 + 9,
                                                       "ms": 0.000002}]}]}],
            "latency_ms": {"p50": 1.0, "max": lat_max},
            "latency_hist": {"bin_ns": 100_000, "n": sum(counts.values()),
                             "sum_ns": 150_000 * sum(counts.values()),
                             "counts": {str(k): v for k, v in counts.items()}},
            "engine": {"cpu_s": 0.5, "sent_packets": 10, "received_packets": 10,
                       "cpu_us_per_packet": 25.0}}


def test_engine_results_from_servers_merge_and_clocks_align():
    from emulator.dataplane.cluster.cluster_traffic import merge_results, shift_times
    a, b = _engine_doc({10: 90}, 2.0, 1_000), _engine_doc({30: 10}, 5.0, 2_000)
    shift_times(b["receivers"], 500)
    flow = b["receivers"][0]["flows"][0]
    assert b["receivers"][0]["t0_ns"] == 1_500 and flow["first_arrival_ns"] == 1_505
    assert flow["disruptions"][0]["start_ns"] == 1_507 and flow["disruptions"][0]["ms"] > 0
    shared = merge_results([a, b], shared_clock=True)
    assert shared["latency_ms"]["p50"] == 1.1 and shared["latency_ms"]["p99"] == 3.1
    assert shared["latency_ms"]["max"] == 5.0
    assert shared["engine"]["sent_packets"] == 20 and shared["engine"]["engines"] == 2
    assert len(shared["receivers"]) == 2
    apart = merge_results([a, b], shared_clock=False)
    assert apart["latency_ms"]["p50"] is None and "not measured" in apart["latency_ms"]["note"]
    assert all(r["latency_ms"] is None and r["flows"][0]["latency_us"] is None
               for r in apart["receivers"])


def test_a_server_shell_leaves_no_mn_c_cleanup_behind(monkeypatch):
    """The cluster edition registers each remote node's server for `ssh SERVER sudo
    mn -c` (every Mininet there) in mininet.clean's callbacks; a run's servers are
    cleaned by their workers, so a server shell takes its entry out again."""
    from mininet.examples.cluster import ClusterCleanup

    from emulator.dataplane.cluster import servers
    monkeypatch.setattr(servers.ServerShell, "startShell", lambda self, *a, **k: None)
    monkeypatch.setattr(ClusterCleanup, "serveruser", {"10.0.0.1": "root"})
    [s] = cluster.parse_servers(["root@10.9.9.9"], "--servers")
    shell = servers.ServerShell(s, ["ssh"])
    assert shell.dest == "root@10.9.9.9"
    assert ClusterCleanup.serveruser == {"10.0.0.1": "root"}     # others' entries stay
