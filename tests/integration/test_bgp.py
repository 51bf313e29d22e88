"""A small BGP fabric (root): FRR's sessions, reachability, the kernel's local repair,
a cut's convergence, the routers' CLI, and ``clean`` after a SIGKILL."""

import os
import signal
import subprocess
import sys
import time

import pytest

from emulator.dataplane import runstate
from emulator.dataplane.faults import Injector
from emulator.dataplane.routed import bgp, frr
from emulator.dataplane.routed.fib import owners
from emulator.dataplane.session import Session
from emulator.dataplane.system.fibmon import RouteLookup
from emulator.experiments.bgp import drill as bgp_drill
from emulator.fabric import presets
from emulator.fabric.runspec import RunSpec
from lab.modes import Control
from tests.conftest import REPO, emulator
from tests.integration.test_fabric import NOTHING, leftovers

LAYOUT_INDEPENDENT = True       # routers, no Open vSwitch instances


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    f = presets.build("leaf-spine", {"spines": "2", "leaves": "2", "hosts_per_leaf": "1"})
    spec = RunSpec(f, control=Control.BGP, results=str(tmp_path_factory.mktemp("bgp")),
                   bfd="100x3")
    with Session(spec) as s:
        routers = s.net.frr.routers
        yield s
    assert leftovers(s.results["run"]) == NOTHING
    assert not any(os.path.exists(os.path.join(frr.TMPDIR, f"{d}.{c.pid}"))
                   for r in routers.values() for d, c in r.children.items())


def test_every_session_is_established_and_every_pair_reachable(fabric):
    sessions = fabric.results["bgp"]["sessions"]
    assert len(sessions) == 8                       # 4 links, both ends
    assert {x["state"] for x in sessions} == {"Established"}
    assert all(0 < x["established_after_s"] < 15 for x in sessions)
    assert {(x["local_as"], x["remote_as"]) for x in sessions if x["switch"] == "leaf1"} == \
        {(64513, 64512)}
    reach = fabric.results["reachability"]
    assert reach["pairs"] == reach["reachable"] == 2
    assert fabric.results["timings"]["time_to_reachable_s"] < 15


def test_vtysh_reaches_a_routers_daemons_from_its_shell(fabric):
    out = fabric.net.switches["leaf1"].cmd("vtysh -c 'show bgp summary'")
    assert "local AS number 64513" in out
    assert out.count("10.128.0.") >= 2             # both spines as neighbours


def test_ecmp_hashes_the_five_tuple_with_the_switchs_own_seed(fabric):
    ns = fabric.net.switch_netns("leaf1")
    seeds = {}
    for name in ("leaf1", "leaf2"):
        node = fabric.net.switches[name]
        assert node.cmd("cat /proc/sys/net/ipv4/fib_multipath_hash_policy").strip() == "1"
        seeds[name] = node.cmd("cat /proc/sys/net/ipv4/fib_multipath_hash_seed").strip()
    plan = {sw["name"]: str(sw["bgp"]["hash_seed"]) for sw in fabric.topo["switches"]}
    assert seeds == {"leaf1": plan["leaf1"], "leaf2": plan["leaf2"]}
    assert len(set(seeds.values())) == 2            # per switch, not shared
    h1, h2 = fabric.topo["hosts"]
    lk = RouteLookup(ns)
    try:
        devs = {lk.get(h2["ip"], src=h1["ip"], iif=fabric.topo["switches"][0]["ports"][0]["intf"],
                       sport=49152 + i, dport=4791)["dev"] for i in range(64)}
    finally:
        lk.close()
    assert len(devs) == 2                           # the source port spreads flows


def test_a_dead_next_hop_is_dropped_by_the_kernel_itself(fabric):
    """Pinned mechanism: the kernel's dead and linkdown next-hop flags (next hops inline,
    ``ignore_routes_with_linkdown=1``).  With leaf1's zebra, bgpd and bfdd stopped
    (SIGSTOP), cutting leaf1-spine1 still takes spine1 out of leaf1's ECMP group at once."""
    r = fabric.net.frr.routers["leaf1"]
    leaf1 = fabric.topo["switches"][0]
    dst = next(p for s_ in fabric.topo["switches"] if s_["name"] == "leaf2"
               for p in s_["ports"] if p["peer_kind"] == "host")["peer_ip"]
    host_port = leaf1["ports"][0]["intf"]
    dead = next(p["intf"] for p in leaf1["ports"] if p["peer"] == "spine1")
    assert r.node.cmd("cat /proc/sys/net/ipv4/conf/all/ignore_routes_with_linkdown") \
        .strip() == "1"
    assert "nhid" not in r.node.cmd("ip -4 route show proto bgp")   # no next-hop objects
    inj = Injector(fabric)
    lk = RouteLookup(fabric.net.switch_netns("leaf1"))
    src = fabric.topo["hosts"][0]["ip"]
    try:
        before = {lk.get(dst, src=src, iif=host_port, sport=49152 + i, dport=4791)["dev"]
                  for i in range(64)}
        assert dead in before
        r.signal_all(signal.SIGSTOP, ("zebra", "bgpd", "bfdd"))
        try:
            inj.link_down("leaf1-spine1")
            after = {lk.get(dst, src=src, iif=host_port, sport=49152 + i, dport=4791)["dev"]
                     for i in range(64)}
            assert dead not in after and after
        finally:
            r.signal_all(signal.SIGCONT, ("zebra", "bgpd", "bfdd"))
        # the daemons see the cut (BFD: 300 ms) before it heals: a flap shorter than
        # their reaction is not what this test is about
        want = bgp.expected(fabric.topo)
        key = next(k for k, v in want.items() if k[0] == "leaf1" and v[0] == "spine1")
        deadline = time.monotonic() + 10
        while key in bgp.up_since(fabric.net.frr) and time.monotonic() < deadline:
            time.sleep(0.05)
        inj.link_up("leaf1-spine1")
    finally:
        lk.close()
        inj.close()
    bgp_drill.settle(fabric)


def test_a_cut_converges_and_names_the_last_router(fabric):
    inj = Injector(fabric)
    try:
        u0 = bgp_drill.updates(fabric)
        ev = inj.link_down("leaf1-spine1")
        time.sleep(1.0)                             # BGP's withdrawals travel meanwhile
        v = bgp_drill.verdict(fabric, inj.events, ev["t_ns"], None, u0)
        inj.link_up("leaf1-spine1")
    finally:
        inj.close()
    assert v["dead_ends"] and v["still"] == {}
    assert v["convergence_ms"] is not None and 0 < v["convergence_ms"] < 1000
    assert v["last_switch"] == "leaf2"              # the remote leaf, told by spine1
    assert v["detected_by"].startswith("carrier") and v["detection_ms"] < 50
    assert v["updates_sent"] >= 1
    assert set(owners(fabric.topo)) == {"10.1.0.0/24", "10.1.1.0/24"}
    bgp_drill.settle(fabric)
    assert bgp.wait_established(fabric.net.frr, fabric.topo, 5)


def test_clean_after_sigkill_removes_the_runs_frr_and_nothing_else(tmp_path, fabric):
    log = open(tmp_path / "run.log", "w+")
    p = subprocess.Popen([sys.executable, "-m", "emulator", "run", "--control", "bgp",
                          "-P", "spines=1", "-P", "leaves=2", "-P", "hosts_per_leaf=1",
                          "--duration", "30", "--results", str(tmp_path / "res")],
                         cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 90
    while True:
        log.seek(0)
        text = log.read()
        if "traffic:" in text:
            break
        assert p.poll() is None and time.monotonic() < deadline, text
        time.sleep(0.05)
    tag = text.split("... run ", 1)[1][:4]
    p.kill()
    p.wait(timeout=30)
    from emulator.dataplane.cleanup import leftovers as left_of
    left = left_of(tag)
    assert left["frr"] and left["state_dirs"], left        # SIGKILL left them running
    daemons = {pid: frr.daemon_name(pid) for pid in left["frr"]}
    c = emulator("clean", timeout=120)
    assert c.returncode == 0, c.stderr
    assert left_of(tag) == {}
    assert leftovers(tag) == NOTHING
    assert not any(os.path.exists(os.path.join(frr.TMPDIR, f"{n}.{pid}"))
                   for pid, n in daemons.items())
    # the module's own BGP run, alive, was left alone: its routers still answer
    assert runstate.processes_of(fabric.results["run"])
    assert bgp.wait_established(fabric.net.frr, fabric.topo, 5)
