"""The controller against real OVS userspace bridges (root only).

The test builds its own tiny fabric — 2 spines, 2 leaves, one host port per
leaf — out of OVS bridges named ``fltest<4 hex>...`` (datapath_type=netdev,
fail_mode=secure, OpenFlow13+15). Switch-to-switch links are patch ports so
``ofproto/trace`` follows packets across bridges; host ports are internal
ports. It starts ``python -m controller`` on a free 127.0.0.1 port and
checks the installed state with ovs-ofctl and ofproto/trace. Everything it
creates is deleted in the fixture teardown.
"""

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): builds its own bridges in the machine's Open vSwitch
LAYOUT_INDEPENDENT = True

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
TIMEOUT = 20

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create OVS bridges"),
    pytest.mark.skipif(subprocess.run(["which", "ovs-vsctl"], capture_output=True).returncode,
                       reason="Open vSwitch is not installed"),
]


def sh(*cmd, timeout=TIMEOUT):
    """Run a command, check its status, return stdout."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode:
        raise AssertionError(f"{' '.join(cmd)} -> {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def wait_until(cond, what, timeout=TIMEOUT, step=0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def topology_doc(tag):
    """2 leaves x 2 spines, host h<i> on leaf<i> port 1; uplinks on ports 2-3."""
    def br(kind, i):
        return f"fltest{tag}{kind}{i}"
    switches, hosts = [], []
    for i in (1, 2):
        ip, mac = f"10.0.0.{i}", f"02:00:00:00:00:{i:02x}"
        hosts.append({"name": f"h{i}", "ip": ip, "mac": mac, "pod": None, "plane": None,
                      "ports": [{"port": "eth0", "ip": ip, "mac": mac, "prefix_len": 16,
                                 "switch": f"leaf{i}", "switch_port": 1, "rate_bps": 10**7}]})
        ports = [{"port": 1, "name": "eth1", "intf": f"{br('l', i)}-e1", "peer": f"h{i}",
                  "peer_kind": "host", "peer_port": "eth0", "rate_bps": 10**7}]
        ports += [{"port": 1 + s, "name": f"eth{1 + s}", "intf": f"{br('l', i)}-e{1 + s}",
                   "peer": f"spine{s}", "peer_kind": "spine", "peer_port": i, "rate_bps": 10**7}
                  for s in (1, 2)]
        switches.append({"name": f"leaf{i}", "kind": "leaf", "tier": 1, "dpid": 0x10000 | i,
                         "dpid_hex": "%016x" % (0x10000 | i), "bridge": br("l", i),
                         "hash_seed": 1000 + i, "pod": None, "plane": None, "ports": ports})
    for s in (1, 2):
        ports = [{"port": i, "name": f"eth{i}", "intf": f"{br('s', s)}-e{i}", "peer": f"leaf{i}",
                  "peer_kind": "leaf", "peer_port": 1 + s, "rate_bps": 10**7} for i in (1, 2)]
        switches.append({"name": f"spine{s}", "kind": "spine", "tier": 2, "dpid": 0x20000 | s,
                         "dpid_hex": "%016x" % (0x20000 | s), "bridge": br("s", s),
                         "hash_seed": 2000 + s, "pod": None, "plane": None, "ports": ports})
    return {"schema_version": 1, "fabric": "fltest-2s2l1h", "run": tag, "subnet": "10.0.0.0/16",
            "params": {}, "switches": switches, "hosts": hosts, "links": []}


def build_bridges(doc):
    """Create the bridges and ports of ``doc``; return the bridge names."""
    names = {s["name"]: s for s in doc["switches"]}
    created = []
    try:
        for s in doc["switches"]:
            sh("ovs-vsctl", "--", "add-br", s["bridge"], "--", "set", "bridge", s["bridge"],
               "datapath_type=netdev", "fail_mode=secure", "protocols=OpenFlow13,OpenFlow15",
               f"other-config:datapath-id={s['dpid_hex']}")
            created.append(s["bridge"])
        for s in doc["switches"]:
            for p in s["ports"]:
                args = ["ovs-vsctl", "add-port", s["bridge"], p["intf"], "--", "set", "interface",
                        p["intf"], f"ofport_request={p['port']}"]
                if p["peer_kind"] == "host":
                    args.append("type=internal")
                else:
                    peer = names[p["peer"]]
                    args += ["type=patch", f"options:peer={peer['bridge']}-e{p['peer_port']}"]
                sh(*args)
                if p["peer_kind"] == "host":
                    sh("ip", "link", "set", p["intf"], "up")
    except BaseException:
        delete_bridges(created)
        raise
    return created


def delete_bridges(bridges):
    for b in bridges:
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", b], timeout=TIMEOUT, check=True)


class Controller:
    """``python -m controller`` as a subprocess, logging to a file."""

    def __init__(self, topo_path, port, log_path):
        self.port, self.log_path = port, log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "controller", "--topology", str(topo_path),
             "--listen", f"127.0.0.1:{port}"],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(lambda: f"controller listening on 127.0.0.1:{port}" in self.text()
                   or self.proc.poll() is not None, "the ready line")
        assert self.proc.poll() is None, self.text()

    def text(self):
        return Path(self.log_path).read_text(errors="replace")

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=TIMEOUT)
        self.log.close()
        return rc


def dump_flows(br):
    out = sh("ovs-ofctl", "-O", "OpenFlow15", "--no-names", "dump-flows", br)
    flows = []
    for line in out.splitlines()[1:]:
        counters = dict(re.findall(r"(n_packets|n_bytes)=(\d+)", line))
        body = re.sub(r"\s*(duration|n_packets|n_bytes|idle_age|hard_age|reset_counts)=[^,\s]*,?", "",
                      line).strip()
        flows.append((body, int(counters.get("n_packets", 0))))
    return sorted(flows)


def dump_groups(br):
    out = sh("ovs-ofctl", "-O", "OpenFlow15", "--no-names", "dump-groups", br)
    return sorted(line.strip() for line in out.splitlines()[1:])


def trace(br, flow):
    return sh("ovs-appctl", "ofproto/trace", br, flow)


def udp_flow(doc, src, dst, sport):
    h = {x["name"]: x for x in doc["hosts"]}
    return (f"in_port=1,udp,dl_src={h[src]['mac']},dl_dst={h[dst]['mac']},"
            f"nw_src={h[src]['ip']},nw_dst={h[dst]['ip']},udp_src={sport},udp_dst=4791")


@pytest.fixture
def fabric(tmp_path):
    tag = secrets.token_hex(2)
    doc = topology_doc(tag)
    topo_path = tmp_path / "topology.json"
    topo_path.write_text(json.dumps(doc))
    bridges = build_bridges(doc)
    ctls = []

    def start():
        c = Controller(topo_path, free_port(), tmp_path / f"controller{len(ctls)}.log")
        ctls.append(c)
        for b in bridges:
            sh("ovs-vsctl", "set-controller", b, f"tcp:127.0.0.1:{c.port}")
        return c
    try:
        yield doc, bridges, start
    finally:
        for c in ctls:
            c.stop(signal.SIGKILL)
        delete_bridges(bridges)
    for c in ctls:   # Faucet-style: no test may leave an exception or OF error behind
        assert "CONTROLLER-EXCEPTION" not in c.text() and "OFP-ERROR" not in c.text(), c.text()


def converged(bridges, n_groups):
    """True when every leaf has its ECMP group and every bridge its IPv4 flows."""
    for b in bridges:
        flows = [f for f, _ in dump_flows(b)]
        if sum("nw_dst=10.0.0." in f for f in flows) != 2:
            return False
        if ("l" in b[-2:]) and len(dump_groups(b)) != n_groups:
            return False
    return True


def test_select_groups_hash_and_spread(fabric):
    doc, bridges, start = fabric
    ctl = start()
    leaf1 = bridges[0]
    wait_until(lambda: converged(bridges, 1), "the fabric to converge")
    (group,) = dump_groups(leaf1)
    assert "type=select" in group
    assert "selection_method=hash" in group
    assert "fields(ip_src,ip_dst,udp_src,udp_dst)" in group or \
        "fields(nw_src,nw_dst,udp_src,udp_dst)" in group, group
    assert "selection_method_param=1001" in group, group
    assert "watch_port:2" in group and "watch_port:3" in group, group

    # UDP flows that differ only in the source port spread over both uplinks
    spines = set()
    for sport in range(49152, 49152 + 32):
        out = trace(leaf1, udp_flow(doc, "h1", "h2", sport))
        spines |= set(re.findall(r"bridge\(\"(fltest\w+s\d)\"\)", out))
        assert re.search(r"^Datapath actions: .*\d", out, re.M), out
    assert spines == {bridges[2], bridges[3]}, spines
    assert "CONVERGED" in ctl.text()


def test_arp_responder_answers_out_the_in_port(fabric):
    doc, bridges, start = fabric
    start()
    wait_until(lambda: converged(bridges, 1), "the fabric to converge")
    out = trace(bridges[0], "in_port=1,arp,arp_op=1,dl_src=02:00:00:00:00:01,"
                "dl_dst=ff:ff:ff:ff:ff:ff,arp_sha=02:00:00:00:00:01,arp_spa=10.0.0.1,"
                "arp_tha=00:00:00:00:00:00,arp_tpa=10.0.0.2")
    final = re.search(r"^Final flow: (.*)$", out, re.M).group(1)
    for want in ("arp_op=2", "dl_src=02:00:00:00:00:02", "dl_dst=02:00:00:00:00:01",
                 "arp_spa=10.0.0.2", "arp_tpa=10.0.0.1", "arp_sha=02:00:00:00:00:02",
                 "arp_tha=02:00:00:00:00:01"):
        assert want in final, (want, final)
    assert re.search(r"output:IN_PORT|in_port", out), out
    # an unknown target is dropped, not flooded
    out = trace(bridges[0], "in_port=1,arp,arp_op=1,arp_spa=10.0.0.1,arp_tpa=10.0.9.9")
    assert re.search(r"^Datapath actions: drop", out, re.M), out


def test_restart_keeps_tables_and_counters(fabric):
    doc, bridges, start = fabric
    first = start()
    wait_until(lambda: converged(bridges, 1), "the fabric to converge")
    # put packets on some flows so counters are non-zero
    for b in bridges:
        sh("ovs-ofctl", "-O", "OpenFlow15", "packet-out", b,
           "in_port=1 packet=ffffffffffff0200000000010806000108000604000102000000000" +
           "10a0000010000000000000a000002 actions=table")
    before = {b: (dump_flows(b), dump_groups(b)) for b in bridges}
    assert any(n for f, n in before[bridges[0]][0]), before[bridges[0]]
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    second = start()
    wait_until(lambda: second.text().count('"event": "connect"') >= len(bridges),
               "every switch to resync")
    for b in bridges:
        flows, groups = dump_flows(b), dump_groups(b)
        assert groups == before[b][1]
        assert [f for f, _ in flows] == [f for f, _ in before[b][0]]   # same, no dups
        # not reset: the host port's kernel may add packets, never remove them
        assert all(n >= m for (_, n), (_, m) in zip(flows, before[b][0])), (flows, before[b][0])
    assert len(re.findall(r'"event": "connect", .*"sent": 0,', second.text())) == len(bridges), second.text()
    assert second.stop() == 0


def test_link_down_reroutes_and_restart_converges(fabric):
    doc, bridges, start = fabric
    ctl = start()
    leaf1, spine1 = bridges[0], bridges[2]
    wait_until(lambda: converged(bridges, 1), "the fabric to converge")
    # OVS ignores PORT_DOWN on patch ports: remove the port, as if unplugged
    sh("ovs-vsctl", "del-port", leaf1, f"{leaf1}-e2")
    wait_until(lambda: not dump_groups(leaf1), "leaf1's ECMP group to go")
    flows = [f for f, _ in dump_flows(leaf1)]
    assert any("nw_dst=10.0.0.2" in f and "actions=output:3" in f for f in flows), flows
    # the controller logs the port event once it has pushed the change: the groups
    # may be gone a moment before the line is written
    wait_until(lambda: '"event": "port"' in ctl.text(), "the controller to log the port event")
    before = {b: (dump_flows(b), dump_groups(b)) for b in bridges}
    ctl.stop(signal.SIGKILL)
    second = start()
    wait_until(lambda: second.text().count('"event": "connect"') >= len(bridges),
               "every switch to resync")
    # A switch that connects before leaf1 first takes leaf1's missing port for
    # live (liveness is learned per switch, in any order) and is corrected when
    # leaf1 connects: the end state, not each resync, is order-independent.
    wait_until(lambda: all([f for f, _ in dump_flows(b)] == [f for f, _ in before[b][0]]
                           and dump_groups(b) == before[b][1] for b in bridges),
               "every switch to return to the state before the restart")
