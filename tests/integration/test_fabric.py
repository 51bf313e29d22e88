"""A real leaf-spine fabric on OVS with the project's controller (root)."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from emulator.dataplane import runstate
from emulator.dataplane.session import Session
from emulator.dataplane.system import ovs as ovs_tools
from emulator.fabric import presets
from tests.conftest import REPO, emulator, unless_stolen, verdict_of


def leftovers(tag=None):
    """This project's bridges, interfaces, processes and state dirs (of one run)."""
    from emulator.dataplane.cleanup import our_bridges, our_interfaces
    pick = (lambda t: t == tag) if tag else (lambda t: True)
    return {
        "bridges": sorted(b for b, t in our_bridges().items() if pick(t)),
        "interfaces": sorted(i for i, t in our_interfaces().items() if pick(t)),
        "processes": sorted(p for p, t in runstate.processes_of().items() if pick(t)),
        "state": sorted(t for t in runstate.known_tags() if pick(t)),
    }


NOTHING = {"bridges": [], "interfaces": [], "processes": [], "state": []}


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    f = presets.build("leaf-spine")
    with Session(f, results_base=str(tmp_path_factory.mktemp("results"))) as s:
        yield s
    assert leftovers(s.results["run"]) == NOTHING
    assert s.results["controller"]["problems"] == []


def test_every_host_pair_reaches_every_other(fabric):
    reach = fabric.results["reachability"]
    assert reach["pairs"] == 56 and reach["reachable"] == 56
    # and again, now that it has converged: one round, nothing lost
    from emulator.dataplane.observe.reach import ping_round
    names = [h["name"] for h in fabric.topo["hosts"]]
    pairs = [(a, b) for a in names for b in names if a != b]
    assert ping_round(fabric.net, pairs) == set(pairs)


def test_bridges_match_the_plan(fabric):
    for sw in fabric.topo["switches"]:
        br = sw["bridge"]
        ovs = fabric.net.ovs(sw["name"])
        got = ovs.vsctl("get", "bridge", br, "fail_mode", "protocols",
                        "datapath_type", "other-config:datapath-id").splitlines()
        assert got[0] == "secure"
        assert got[1] == '[OpenFlow13, OpenFlow15]'
        assert got[2] == fabric.results["datapath"]["type"]
        assert got[3].strip('"') == sw["dpid_hex"]
        for p in sw["ports"]:
            assert int(ovs.vsctl("get", "interface", p["intf"], "ofport")) == p["port"]
    if fabric.results["datapath"]["type"] == "netdev":
        # setup.sh started Open vSwitch on tcmalloc (netdev-linux's per-receive buffers)
        assert fabric.results["datapath"]["allocator"] == "tcmalloc"
    assert json.load(open(fabric.topology_path)) == fabric.topo


def test_select_groups_hash_udp_source_port(fabric):
    leaf = fabric.topo["switches"][0]
    groups = fabric.net.ovs(leaf["name"]).ofctl("dump-groups", leaf["bridge"])
    selects = [g for g in groups.splitlines() if "type=select" in g]
    assert selects, groups
    uplinks = [p["port"] for p in leaf["ports"] if p["peer_kind"] == "spine"]
    for g in selects:
        assert (f"selection_method=hash,selection_method_param={leaf['hash_seed']},"
                "fields(ip_src,ip_dst,udp_src,udp_dst)") in g
    # the ECMP group toward remote leaves spreads over exactly the uplinks
    spreads = [sorted(int(x) for x in re.findall(r"watch_port:(\d+)", g)) for g in selects]
    assert uplinks in spreads, groups


SENDER = textwrap.dedent("""
    import socket, sys, time
    dst, first, flows, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    socks = []
    for i in range(flows):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("0.0.0.0", first + i))
        socks.append(s)
    payload = bytes(200)
    for n in range(count):
        for s in socks:
            s.sendto(payload, (dst, 4791))
        time.sleep(0.004)
""")


def test_64_udp_flows_use_every_uplink(fabric):
    """64 flows with distinct UDP source ports from leaf1 to leaf2: no idle uplink,
    none above twice the mean."""
    topo = fabric.topo
    leaf1 = topo["switches"][0]
    src = next(h for h in topo["hosts"] if h["ports"][0]["switch"] == "leaf1")
    dst = next(h for h in topo["hosts"] if h["ports"][0]["switch"] == "leaf2")
    uplinks = [p["intf"] for p in leaf1["ports"] if p["peer_kind"] == "spine"]
    before = fabric.net.intf_counters()
    fabric.net.run_in(src["name"], [sys.executable, "-c", SENDER, dst["ip"], "40000", "64",
                                    "30"], timeout=60)
    after = fabric.net.intf_counters()
    sent = {i: after[i][2] - before[i][2] for i in uplinks}
    total = sum(sent.values())
    assert total >= 64 * 30, sent          # every packet left leaf1 on some uplink
    mean = total / len(uplinks)
    assert all(n > 0 for n in sent.values()), sent
    assert max(sent.values()) <= 2 * mean, sent


def test_teardown_leaves_nothing(tmp_path):
    f = presets.build("leaf-spine", {"spines": "2", "leaves": "2", "hosts_per_leaf": "1"})
    with Session(f, results_base=str(tmp_path)) as s:
        tag = s.state.tag
        during = leftovers(tag)
        if s.net.instances:        # FABRIC_LAB_LAYOUT: bridges and ports in their own
            bridges = [b for o in s.net.ovses() for b in o.vsctl("list-br").split()]
            assert len(bridges) == 4 and not during["bridges"] and not during["interfaces"]
        else:
            assert len(during["bridges"]) == 4
            assert len([i for i in during["interfaces"] if "-e" in i]) == 3 * 2 + 2 * 2
        assert during["processes"] and during["state"] == [tag]
    assert leftovers(tag) == NOTHING


def test_malformed_file_exits_2_and_creates_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntopology:\n  nodes: {h1: {kind: host}, leaf1: {kind: leaf}}\n"
                   "  links: [{endpoints: ['h1:eth0', 'leaf9:eth1'], rate: 10Mbps}]\n")
    before_br = ovs_tools.vsctl("list-br")
    before = leftovers()
    p = emulator("run", "-f", str(bad), "--results", str(tmp_path / "res"))
    assert p.returncode == 2
    assert "topology.links[0].endpoints[1]: unknown node 'leaf9'" in p.stderr
    assert ovs_tools.vsctl("list-br") == before_br
    assert leftovers() == before
    assert not (tmp_path / "res").exists()


def test_not_root_gets_one_clear_message(tmp_path):
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        sys.executable, "-m", "emulator", "run", "--results", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "HOME": "/tmp"})
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("error: must run as root") and "sudo" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_allreduce_completes_with_busbw_within_link_rate(fabric):
    from emulator.experiments.workloads.collective import run_collective
    rep = run_collective(fabric, "allreduce", [256 << 10, 1 << 20], ring="topology")
    assert rep["nranks"] == 8 and len(rep["rows"]) == 2
    for row in rep["rows"]:
        assert row["wrong"] == 0, rep["table"]
        assert row["ranks_reporting"] == 8
        # busbw can never beat the link rate; and it must be a real transfer
        assert 0.1 < row["efficiency"] <= 1.0, rep["table"]


def test_default_mix_loses_nothing_and_loads_every_leaf_uplink(fabric):
    from emulator.experiments.workloads.mix import default_mix
    res = unless_stolen(lambda _: default_mix(fabric, duration=2.0, qps=8, load=0.5),
                        lambda r: r["fidelity"])
    assert res["sent_packets"] > 0
    assert res["dropped_packets"] == 0 and res["received_packets"] == res["sent_packets"]
    fid = res["fidelity"]
    assert fid["verdict"] == "faithful", verdict_of(fid)
    assert fid["emulation_drops"]["total"] == 0 and fid["network_drops"]["total"] == 0
    for leaf in res["uplinks"]:
        total = sum(u["tx_bytes"] for u in leaf["loads"])
        assert total > 0
        # 16 QPs leave each leaf over 4 uplinks: a fully idle uplink is possible but
        # unlikely; the spread is recorded, the load must not exceed the link rate
        assert all(u["utilisation"] <= 1.05 for u in leaf["loads"]), leaf


def test_remote_controller_the_user_runs(tmp_path):
    """--controller remote:HOST:PORT: the user's controller (here ours, started by
    hand from `emulator show --json`) drives a fabric the emulator builds."""
    from emulator.dataplane.session import free_port, listening, wait_until
    from emulator.fabric import addressing
    f = presets.build("leaf-spine", {"spines": "2", "leaves": "2", "hosts_per_leaf": "1"})
    topo_path = tmp_path / "topology.json"
    topo_path.write_text(json.dumps(addressing.plan(f)))
    port = free_port()
    ctl = subprocess.Popen([sys.executable, "-m", "controller", "--topology", str(topo_path),
                            "--listen", f"127.0.0.1:{port}"], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: listening(port), 30, "the user's controller")
        # a remote controller listens on TCP: the machine's Open vSwitch reaches it
        with Session(f, results_base=str(tmp_path), controller=f"remote:127.0.0.1:{port}",
                     layout="shared") as s:
            assert s.results["controller"]["kind"] == "remote"
            assert s.results["reachability"]["reachable"] == 2
    finally:
        ctl.terminate()
        ctl.wait(timeout=30)


def test_background_iperf_flows_fold_into_results(fabric):
    from emulator.experiments.workloads.background import Background, parse_spec
    hosts = set(fabric.net.hosts)
    specs = [parse_spec("h1:h5", hosts), parse_spec("h2:h6:udp:5Mbps", hosts)]
    with Background(fabric, specs, 2.0) as bg:
        pass
    tcp, udp = bg.results
    assert "error" not in tcp and "error" not in udp, bg.results
    assert tcp["protocol"] == "TCP" and 1e6 < tcp["bps"] <= 41e6
    assert udp["protocol"] == "UDP" and udp["bps"] == pytest.approx(5e6, rel=0.2)


def test_switch_to_switch_links_are_rate_limited(tmp_path):
    """Uplinks slower than the offered load carry at most their rate, and the
    excess is dropped in their egress queue: congestion is real."""
    from emulator.experiments.workloads.mix import default_mix
    f = presets.build("leaf-spine", {"spines": "1", "leaves": "2", "hosts_per_leaf": "1",
                                     "host_rate": "40Mbps", "uplink_rate": "10Mbps"})
    with Session(f, results_base=str(tmp_path)) as s:
        res = unless_stolen(lambda _: default_mix(s, duration=2.0, qps=2, load=0.75),
                            lambda r: r["fidelity"])                 # 30 Mbit/s per host
    for leaf in res["uplinks"]:
        (up,) = leaf["loads"]
        assert 0.8 < up["utilisation"] <= 1.05, leaf
    assert res["dropped_packets"] > 0.5 * res["sent_packets"], res["dropped_packets"]
    # Those drops are the network's: the two uplinks' queues, not the emulator.
    fid = res["fidelity"]
    assert fid["verdict"] == "faithful", verdict_of(fid)
    by_link = fid["network_drops"]["by_link"]
    assert set(by_link) == {"leaf1->spine1", "leaf2->spine1"}, by_link
    assert sum(by_link.values()) == pytest.approx(res["dropped_packets"], rel=0.02)
    assert fid["emulation_drops"]["total"] <= 1e-4 * res["sent_packets"]
