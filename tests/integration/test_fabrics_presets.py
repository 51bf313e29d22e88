"""Every Clos preset and the dragonflies on real OVS (root): builds, fully reachable, survives a link cut.

Small instances, one Session each.  Reachability is all host pairs to every
host *port* address (rail-only / rail-optimized hosts have one per rail), with real pings;
the cut is a fault injector link-down (both ends) and the check is repeated
until every pair answers again or a deadline passes (a condition, not a sleep).
"""

import subprocess
import time

import pytest

from emulator.dataplane.faults import Injector
from emulator.dataplane.session import Session
from emulator.fabric import presets

CASES = [
    ("three-tier", {}, "leaf1-spine1"),
    ("three-tier", {"superspine_attach": "all", "superspines": "2"}, "spine1-superspine1"),
    ("dual-link", {"spines": "1", "mode": "active-standby"}, "leaf1-spine1"),
    ("dual-link", {"spines": "2", "secondary_rate": "20Mbps"}, "leaf1-spine2"),
    ("dual-tor", {"hosts_per_pair": "1", "mode": "active-standby"}, "h1-leaf1"),
    ("dual-plane", {"hosts_per_pair": "1"}, "leaf1-spine1"),
    ("multi-plane", {}, "leaf3-spine3"),                      # rail-only, former name
    ("rail-optimized", {"hosts_per_leaf": "1"}, "leaf3-spine1"),
    ("dragonfly", {"a": "2", "p": "1"}, "g1r1-g2r2"),          # a global link: 5 groups
    ("dragonfly-plus", {"p": "1", "groups": "3"}, "g1l1-g1s1"),
]
PING = ('for ip in "$@"; do if ping -n -q -c 1 -W 0.5 "$ip" >/dev/null 2>&1; '
        'then echo "ok $ip"; else echo "no $ip"; fi; done')


def unreachable(s, timeout=30.0):
    """Pairs (host, port IP of another host) that do not answer within ``timeout``."""
    todo = {(h["name"], p["ip"]) for h in s.topo["hosts"] for o in s.topo["hosts"]
            if o is not h for p in o["ports"]}
    deadline = time.monotonic() + timeout
    while todo and time.monotonic() < deadline:
        by_src = {}
        for src, ip in sorted(todo):
            by_src.setdefault(src, []).append(ip)
        procs = {src: subprocess.Popen(["mnexec", "-a", str(s.net.hosts[src].pid), "sh", "-c",
                                        PING, "ping", *ips], stdout=subprocess.PIPE, text=True)
                 for src, ips in by_src.items()}
        for src, p in procs.items():
            out, _ = p.communicate(timeout=60)
            assert p.returncode == 0
            todo -= {(src, line.split()[1]) for line in out.splitlines()
                     if line.startswith("ok ")}
    return todo


def tx_packets(s, intf):
    sw = next(x["name"] for x in s.topo["switches"] if any(p["intf"] == intf
                                                           for p in x["ports"]))
    with open(f"{s.net.sysfs(sw)}/class/net/{intf}/statistics/tx_packets") as f:
        return int(f.read())


@pytest.mark.parametrize("name,params,cut", CASES, ids=[f"{n}-{c}" for n, _, c in CASES])
def test_preset_builds_reaches_and_survives_a_cut(name, params, cut, tmp_path):
    fabric = presets.build(name, params)
    with Session(fabric, results_base=str(tmp_path)) as s:
        n = len(s.topo["hosts"])
        assert s.results["reachability"]["reachable"] == n * (n - 1)
        assert unreachable(s) == set()
        standby = [p["intf"] for sw in s.topo["switches"] for p in sw["ports"]
                   if p.get("role") == "standby"]
        before = {i: tx_packets(s, i) for i in standby}
        inj = Injector(s)
        try:
            inj.link_down(cut)
            assert unreachable(s) == set(), f"{name}: pairs lost after cutting {cut}"
            if standby:
                assert any(tx_packets(s, i) > before[i] for i in standby), "standby never used"
            inj.link_up(cut)
            assert unreachable(s) == set()
        finally:
            inj.close()
    assert s.results["controller"]["problems"] == []


def test_active_standby_keeps_the_standby_idle(tmp_path):
    fabric = presets.build("dual-link", {"spines": "2", "mode": "active-standby"})
    with Session(fabric, results_base=str(tmp_path)) as s:
        standby = [p["intf"] for sw in s.topo["switches"] for p in sw["ports"]
                   if p.get("role") == "standby"]
        assert len(standby) == 4
        before = {i: tx_packets(s, i) for i in standby}
        assert unreachable(s) == set()
        assert {i: tx_packets(s, i) for i in standby} == before
    assert s.results["controller"]["problems"] == []
