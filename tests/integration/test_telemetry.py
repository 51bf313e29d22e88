"""Live telemetry (root): while a fabric runs, 127.0.0.1:PORT/metrics serves
per-link counters that move with the traffic, the switches' flow and group
counts, and the fidelity gauge; a busy port is one clear error, exit 2."""

import re
import socket
import subprocess
import sys

from emulator.dataplane.session import Session, free_port
from emulator.fabric import presets
from tests.conftest import REPO


def scrape(url):
    r = subprocess.run(["curl", "-sf", "--max-time", "20", url], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def metric(text, name, **labels):
    """The value of ``name`` with exactly these labels (in any order), or None."""
    for m in re.finditer(rf"^{name}\{{(.*)\}} ([-0-9.e+]+)$", text, re.M):
        if dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))) == labels:
            return float(m.group(2))
    return None


def test_the_endpoint_serves_per_link_counters_during_a_run(tmp_path):
    fabric = presets.build("leaf-spine", {"spines": "2", "leaves": "2", "hosts_per_leaf": "1"})
    port = free_port()
    with Session(fabric, results_base=str(tmp_path), telemetry=port) as s:
        url = f"http://127.0.0.1:{port}/metrics"
        before = scrape(url)
        h2 = s.topo["hosts"][1]["ports"][0]["ip"]
        s.net.run_in("h1", ["ping", "-c", "20", "-i", "0.01", "-s", "1000", h2], timeout=30)
        after = scrape(url)
    assert metric(before, "fabric_run_info", run=s.topo["run"], fabric=s.topo["fabric"]) == 1
    # h1's traffic left leaf1 towards h2 over some uplink, and came back to h1
    sent = {ln: metric(after, "fabric_link_tx_bytes_total", link=ln) or 0 for ln in
            ("leaf1->spine1", "leaf1->spine2", "leaf1->h1")}
    was = {ln: metric(before, "fabric_link_tx_bytes_total", link=ln) or 0 for ln in sent}
    assert sent["leaf1->h1"] - was["leaf1->h1"] >= 20 * 1000
    assert (sent["leaf1->spine1"] + sent["leaf1->spine2"]
            - was["leaf1->spine1"] - was["leaf1->spine2"]) >= 20 * 1000
    assert metric(after, "fabric_link_drops_total", link="leaf1->spine1") == 0
    assert metric(after, "fabric_link_backlog_bytes", link="leaf1->spine1") is not None
    assert metric(after, "fabric_switch_flows", switch="leaf1") > 0
    assert metric(after, "fabric_switch_groups", switch="leaf1") > 0
    assert re.search(r"^fabric_fidelity_faithful -1\.0$", after, re.M)
    # gone with the fabric
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_a_busy_telemetry_port_is_one_error_before_anything_is_built(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        p = subprocess.run([sys.executable, "-m", "emulator", "run", "--telemetry", str(port),
                            "--results", str(tmp_path)], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "--telemetry" in p.stderr and "not free" in p.stderr
    assert not any(tmp_path.iterdir())


def test_ecn_marks_are_served_per_link(tmp_path):
    """With ECN marking on, an incast into h1 shows marks at /metrics on links toward
    h1 only (leaf1->h1, or an uplink where h3's and h4's flows hashed together),
    never on a link away from h1."""
    from emulator.dataplane.lossless import ecn
    from emulator.experiments.workloads.collective import run_collective
    fabric = presets.build("leaf-spine", {"spines": "2", "leaves": "2", "hosts_per_leaf": "2"})
    port = free_port()
    with Session(fabric, results_base=str(tmp_path), telemetry=port,
                 ecn=ecn.parse("10KB")) as s:
        url = f"http://127.0.0.1:{port}/metrics"
        before = scrape(url)
        rep = run_collective(s, "incast", [1 << 20], warmup=0)
        after = scrape(url)
    assert [r["wrong"] for r in rep["rows"]] == [0]
    links = [f"{sw['name']}->{p['peer']}" for sw in s.topo["switches"] for p in sw["ports"]]
    name = "fabric_link_ecn_marked_packets_total"
    assert all((metric(before, name, link=lk) or 0) == 0 for lk in links)
    marked = {lk: metric(after, name, link=lk) for lk in links}
    assert sum(marked.values()) > 0, marked
    toward_h1 = {"leaf1->h1", "spine1->leaf1", "spine2->leaf1",     # h3, h4 -> h1 cross
                 "leaf2->spine1", "leaf2->spine2"}                    # leaf2's uplinks
    assert all(n == 0 for lk, n in marked.items() if lk not in toward_h1), \
        {lk: n for lk, n in marked.items() if n}
    assert s.results["ecn"]["marked_total"] >= sum(marked.values())
