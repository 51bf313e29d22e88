"""Every preset survives the loss of any single link or switch that leaves a path (root).

Exhaustive on small instances, ONE Session per preset: every link a fault
can take (switch-to-switch links and host links; a bonded host's link is its
NIC switch's link to a ToR, ``h1-leaf1``; the host's internal ``bond0`` link
is not a target) is cut in turn (both ends down), and every switch (not the
NIC switches: a NIC crash is a host death) is crashed in turn (every port
down).  For each fault:

1. ``faults.surviving_pairs`` decides from the plan which (host, host port
   address) pairs still have a path both ways: switches forward, NIC
   switches and hosts never transit, a host sends through the port its
   routes name (multi-plane: that rail's NIC); a host whose only link or
   only switch died drops out;
2. the fault is injected (``faults.Injector``) and the test waits for the
   controller to have acknowledged (``CONVERGED`` after barriers) the
   port-down event of every switch port the fault took;
3. every surviving pair must answer a ping (retried until a deadline: the
   condition, not a sleep), and every other pair must not (the fault is
   real, and no packet finds a path the model forbids, e.g. through a NIC);
4. the fault is undone, the controller's port-up events awaited, every
   pair must answer again, and every switch's flow and group tables must be
   exactly what they were before the fault.

Failures are collected over all faults of a preset and reported together.
Pings run in parallel, one process per destination.  Sizes: the smallest
instances that still have redundancy at every tier (one host per leaf
except where hosts sharing a ToR pair are a case of their own); the 12
instances, 186 faults, take about 80 s here (2 cores, userspace OVS).
"""

import subprocess
import time

import pytest

from emulator.dataplane.faults import Injector, fault_links, surviving_pairs
from emulator.dataplane.session import Session
from emulator.fabric import presets

CASES = [
    ("leaf-spine", {"spines": "2", "leaves": "2", "hosts_per_leaf": "1"}),
    ("three-tier", {"pods": "2", "spines_per_pod": "2", "leaves_per_pod": "1",
                    "hosts_per_leaf": "1", "superspines": "2"}),
    ("three-tier", {"pods": "2", "spines_per_pod": "2", "leaves_per_pod": "1",
                    "hosts_per_leaf": "1", "superspines": "2", "superspine_attach": "all"}),
    ("dual-link", {"spines": "1", "leaves": "2", "hosts_per_leaf": "1"}),
    ("dual-link", {"spines": "1", "leaves": "2", "hosts_per_leaf": "1",
                   "mode": "active-standby"}),
    ("dual-link", {"spines": "2", "leaves": "2", "hosts_per_leaf": "1"}),
    ("dual-link", {"spines": "2", "leaves": "2", "hosts_per_leaf": "1",
                   "mode": "active-standby"}),
    ("dual-tor", {"tor_pairs": "2", "hosts_per_pair": "2", "mode": "active-standby"}),
    ("dual-tor", {"tor_pairs": "2", "hosts_per_pair": "2", "mode": "active-active"}),
    ("dual-plane", {"tor_pairs": "2", "hosts_per_pair": "1", "spines": "2"}),
    ("dual-plane", {"tor_pairs": "2", "hosts_per_pair": "1", "spines": "4",
                    "mode": "active-standby"}),
    ("multi-plane", {"planes": "2", "spines_per_plane": "2", "leaves_per_plane": "2",
                     "hosts_per_leaf": "1"}),
]
# one shell per source host; one ping per destination, all at once
PING = ('for ip in "$@"; do (if ping -n -q -c 1 -W 0.5 "$ip" >/dev/null 2>&1; '
        'then echo "ok $ip"; else echo "no $ip"; fi) & done; wait')
SETTLE_S = 20.0


def ping_round(s, pairs):
    """The (src host, dst IP) pairs of ``pairs`` that answered one ping."""
    by_src = {}
    for src, ip in sorted(pairs):
        by_src.setdefault(src, []).append(ip)
    procs = {src: subprocess.Popen(["mnexec", "-a", str(s.net.hosts[src].pid), "sh", "-c",
                                    PING, "ping", *ips], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
             for src, ips in by_src.items()}
    ok = set()
    for src, p in procs.items():
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        ok |= {(src, line.split()[1]) for line in out.splitlines() if line.startswith("ok ")}
    return ok


def check_pings(s, want, forbid, timeout=SETTLE_S):
    """Problems: pairs of ``want`` that never answered, pairs of ``forbid`` that did."""
    todo, leaked = set(want), set()
    deadline = time.monotonic() + timeout
    first = True
    while todo or first:
        ok = ping_round(s, todo | (set(forbid) if first else set()))
        leaked |= ok & set(forbid)
        todo -= ok
        first = False
        if todo and time.monotonic() > deadline:
            break
    out = []
    if todo:
        out.append(f"{len(todo)} surviving pairs never answered: {sorted(todo)[:6]}")
    if leaked:
        out.append(f"{len(leaked)} pairs answered that have no path: {sorted(leaked)[:6]}")
    return out


def tables(s):
    """{(switch, dump-flows|dump-groups): sorted lines} without counters, in parallel."""
    procs = {(sw["name"], what): subprocess.Popen(
        ["ovs-ofctl", "-O", "OpenFlow15", "--no-stats", what,
         s.net.ovs(sw["name"]).target(sw["bridge"])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for sw in s.topo["switches"] for what in ("dump-flows", "dump-groups")}
    out = {}
    for key, p in procs.items():
        text, err = p.communicate(timeout=20)
        assert p.returncode == 0, err
        # dump-groups starts with a reply header; dump-flows --no-stats has none
        out[key] = sorted(line for line in text.splitlines()
                          if not line.startswith(("OFPST_", "NXST_")))
    return out


def converged_on(s, ports, up, t0_ns):
    """Has the controller acknowledged (barriers) a port event of each of ``ports`` since t0?"""
    import json
    import re
    with open(s.controller.log_path, errors="replace") as f:
        text = f.read()
    seen = set()
    for m in re.finditer(r"CONVERGED (\{.*\})", text):
        ev = json.loads(m.group(1))
        if ev.get("event") == "port" and bool(ev.get("up")) == up \
                and ev["t_event"] >= t0_ns / 1e9:
            seen.add((ev["dpid"], ev["port"]))
    return ports <= seen


def link_ports(s, link):
    """{(dpid, port)}: the switch ports a cut of ``link`` takes down."""
    (sw_name, p), other = link
    dpid = {sw["name"]: sw["dpid"] for sw in s.topo["switches"]}
    out = {(dpid[sw_name], p["port"])}
    if other in dpid:
        out.add((dpid[other], p["peer_port"]))
    return out


def switch_ports(s, name):
    """{(dpid, port)}: a crashed switch's ports and the switch ports facing them."""
    dpid = {sw["name"]: sw["dpid"] for sw in s.topo["switches"]}
    sw = next(x for x in s.topo["switches"] if x["name"] == name)
    out = {(sw["dpid"], p["port"]) for p in sw["ports"]}
    out |= {(dpid[p["peer"]], p["peer_port"]) for p in sw["ports"] if p["peer"] in dpid}
    return out


def faults_of(topo):
    """[(label, kind, target, dead links, dead switches)] for every single fault."""
    out = []
    for name, link in fault_links(topo):
        (sw_name, p), _ = link
        out.append((f"cut {name}", "cut", link, {(sw_name, p["port"])}, set()))
    for sw in topo["switches"]:
        if sw["kind"] != "nic":
            out.append((f"crash {sw['name']}", "crash", sw["name"], set(), {sw["name"]}))
    return out


def wait_for(cond, timeout):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("name,params", CASES,
                         ids=[f"{n}-{'-'.join(v for v in p.values())}" for n, p in CASES])
def test_every_single_failure_that_leaves_a_path_is_survived(name, params, tmp_path,
                                                            monkeypatch):
    monkeypatch.setenv("FABRIC_FAILOVER", "fast-failover")    # the controller's default
    fabric = presets.build(name, params)
    t_start = time.monotonic()
    with Session(fabric, results_base=str(tmp_path)) as s:
        every = surviving_pairs(s.topo)
        n_ports = sum(len(h["ports"]) for h in s.topo["hosts"])
        # with nothing failed: every host to every port address of every other host
        assert len(every) == sum(n_ports - len(h["ports"]) for h in s.topo["hosts"])
        assert check_pings(s, every, ()) == []
        baseline = tables(s)
        inj = Injector(s)
        problems, faults = [], faults_of(s.topo)
        try:
            for label, kind, target, dead_links, dead_switches in faults:
                n_before = len(problems)
                keep = surviving_pairs(s.topo, dead_links, dead_switches)
                ports = link_ports(s, target) if kind == "cut" else switch_ports(s, target)
                ev = inj.link_down(target) if kind == "cut" else inj.switch_crash(target)
                if not wait_for(lambda: converged_on(s, ports, False, ev["t_ns"]), SETTLE_S):
                    problems.append(f"{label}: the controller never acknowledged every port down")
                problems += [f"{label}: {p}" for p in check_pings(s, keep, every - keep)]
                ev = inj.link_up(target) if kind == "cut" else inj.switch_recover(target)
                if not wait_for(lambda: converged_on(s, ports, True, ev["t_ns"]), SETTLE_S):
                    problems.append(f"{label}: the controller never acknowledged every port up")
                problems += [f"{label} restored: {p}" for p in check_pings(s, every, ())]
                if not wait_for(lambda: tables(s) == baseline, 10):
                    now = tables(s)
                    diff = [k for k in baseline if baseline[k] != now[k]]
                    problems.append(f"{label} restored: tables differ from before on {diff}")
                    baseline = now          # judge the next fault on its own
                print(f"{label}: {len(problems) - n_before} problem(s)", *problems[n_before:],
                      sep="\n  ", flush=True)
        finally:
            inj.close()
    elapsed = time.monotonic() - t_start
    print(f"{name} {params}: {len(faults)} faults in {elapsed:.1f}s")
    assert problems == [], f"{name} {params}:\n  " + "\n  ".join(problems)
    assert s.results["controller"]["problems"] == []
