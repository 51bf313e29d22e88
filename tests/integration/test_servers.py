"""One fabric on several servers (docs/cluster.md), on servers made on this
machine: network namespaces with their own sshd and underlay addresses
(``namespace_servers``).  Every run goes through the command line, as a user's."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from emulator.dataplane import runstate
from tests.conftest import REPO, emulator, results_of, unless_stolen, verdict_of
from tests.integration.namespace_servers import NamespaceServers

LAYOUT_INDEPENDENT = True      # each server has its own instance, whatever the layout


@pytest.fixture(scope="module")
def two():
    s = NamespaceServers(2).start()
    yield s
    s.close()


@pytest.fixture(scope="module")
def three():
    s = NamespaceServers(3).start()
    yield s
    s.close()


def shared_cores(servers):
    """These servers share this machine's 2 cores: every server's Open vSwitch and
    traffic engine runs on them.  At the default 40 Mbit/s, 2 servers keep the machine
    70-80 % busy and an engine now and then falls 20 ms behind its schedule (the run
    is emulator-bound, rightly); the rates divided by the servers leave room, so what
    is tested is the fabric across servers, not this machine's budget."""
    rate = f"{40 // len(servers.addresses)}Mbps"
    return ("-P", f"host_rate={rate}", "-P", f"uplink_rate={rate}")


def on(servers, *args):
    return ["--servers", servers.servers_arg, "--ssh-config", servers.ssh_config, *args]


def state_dirs():
    """The runs' state directories, here and the servers' (``on-NAME/TAG``)."""
    root = runstate.STATE_ROOT
    return set(glob.glob(f"{root}/[0-9a-f]*")) | set(glob.glob(f"{root}/on-*/*"))


def assert_nothing_left(servers, before_dirs):
    assert servers.leftovers() == []
    assert state_dirs() - before_dirs == set()


@pytest.mark.parametrize("count", ["two", "three"])
def test_the_default_run_is_faithful_on_servers(count, request, tmp_path):
    servers = request.getfixturevalue(count)
    before = state_dirs()

    def measure(attempt):
        base = tmp_path / str(attempt)
        r = emulator("run", *on(servers, *shared_cores(servers), "--results", str(base)))
        assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
        return results_of(base)[0]

    doc = unless_stolen(measure, lambda d: d["traffic"]["fidelity"])
    reach = doc["reachability"]
    assert reach["pairs"] == reach["reachable"] == 56
    srv = doc["servers"]
    n = len(servers.addresses)
    assert len(srv["servers"]) == n
    assert srv["crossing_links"] == {2: 8, 3: 10}[n]        # leaf-spine links only
    assert sorted(x for s in srv["servers"].values() for x in s["nodes"]) == sorted(
        [f"h{i}" for i in range(1, 9)] + [f"leaf{i}" for i in range(1, 5)]
        + [f"spine{i}" for i in range(1, 5)])
    assert doc["controller"]["tls"] is True
    assert doc["controller"]["listen"].startswith(servers.local + ":")
    traffic = doc["traffic"]
    assert traffic["sent_packets"] > 5_000 and traffic["dropped_packets"] == 0
    assert traffic["engine"]["engines"] == n                 # one per server
    assert traffic["latency_ms"]["p50"] is not None          # one kernel: one clock
    assert traffic["fidelity"]["verdict"] == "faithful", verdict_of(traffic["fidelity"])
    assert_nothing_left(servers, before)


@pytest.mark.parametrize("count", ["two", "three"])
def test_allreduce_over_servers_is_exact(count, request, tmp_path):
    servers = request.getfixturevalue(count)
    before = state_dirs()
    r = emulator("run", *on(servers, "--workload", "allreduce", "--sizes", "1M",
                            "--results", str(tmp_path)))
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
    doc, _ = results_of(tmp_path)
    rows = doc["collective"]["rows"]
    assert rows and all(row["wrong"] == 0 for row in rows)
    assert len(doc["servers"]["servers"]) == len(servers.addresses)
    assert doc["reachability"]["reachable"] == 56
    assert_nothing_left(servers, before)


def test_a_drill_cuts_a_link_between_servers(two, tmp_path):
    before = state_dirs()

    def measure(attempt):
        base = tmp_path / f"try{attempt}"
        r = emulator("drill", *on(two, *shared_cores(two), "--fault", "leaf1-spine3",
                                  "--repeat", "1", "--results", str(base)), timeout=400)
        assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
        with open(glob.glob(os.path.join(base, "drill-*", "drill.json"))[0]) as f:
            return json.load(f)["modes"][0]

    mode = unless_stolen(measure, lambda m: m["repeats"][0]["fidelity"])
    rep = mode["repeats"][0]
    cut = rep["events"][0]
    assert cut["kind"] == "link_down" and cut["target"] == "leaf1-spine3"
    assert sorted(cut["detect"]["ports"]) == ["leaf1:5", "spine3:1"]   # one per server
    crossing = [f for f in rep["flows"].values() if f["crosses"]]
    others = [f for f in rep["flows"].values() if not f["crosses"]]
    assert crossing and others
    # the crossing flows lost something and came back; the others lost nothing
    assert sum(f["fault_lost_packets"] for f in crossing) > 0
    assert all(f["received_packets"] > 0 and f["longest_gap_ms"] < 1000 for f in crossing)
    assert sum(f["lost_packets"] for f in others) == 0, verdict_of(rep["fidelity"])
    assert_nothing_left(two, before)


def is_worker(pid):
    """A server's worker process (not the ssh that started it)."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    return b"emulator.dataplane.cluster.worker" in argv and not argv[0].endswith(b"ssh")


def test_sigkill_then_clean_leaves_nothing_on_any_server(two, tmp_path):
    before = state_dirs()
    p = subprocess.Popen([sys.executable, "-m", "emulator", "run",
                          *on(two, "--duration", "60", "--results", str(tmp_path))],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tag = None
    try:
        deadline = time.monotonic() + 120
        for line in p.stdout:
            if line.startswith("... run ") and tag is None:
                tag = line.split()[2].rstrip(":")
            if "traffic:" in line:
                break
            assert time.monotonic() < deadline, "the run never started its traffic"
        assert tag
        # the servers' workers die too: nothing of the run removes itself
        workers = [pid for pid in runstate.processes_of(tag) if is_worker(pid)]
        assert len(workers) == 2
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
        p.stdout.close()
    assert two.leftovers() != []                 # what the dead run left on the servers
    r = emulator("clean", *on(two))
    assert r.returncode == 0, r.stderr
    assert "srv1: removed" in r.stdout and "srv2: removed" in r.stdout
    assert_nothing_left(two, before)
    assert runstate.processes_of(tag) == {}


@pytest.mark.parametrize("how", ["unreachable", "no key"])
def test_a_server_we_cannot_use_is_one_clear_error(two, tmp_path, how):
    before = state_dirs()
    servers = two.servers_arg
    config = two.ssh_config
    if how == "unreachable":
        servers += f",root@{two.prefix}.99"            # nobody there
        want = "unreachable over ssh"
    else:
        config = os.path.join(tmp_path, "ssh_config")
        with open(config, "w") as f:
            f.write(f"Host {two.prefix}.*\n  IdentityFile {tmp_path}/none\n"
                    "  IdentitiesOnly yes\n"
                    f"  UserKnownHostsFile {two.dir}/known_hosts\n  LogLevel ERROR\n")
        want = "no key login"
    r = emulator("run", "--servers", servers, "--ssh-config", config,
                 "--results", str(tmp_path), timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and want in lines[0], r.stderr
    assert_nothing_left(two, before)


def test_an_underlay_without_jumbo_frames_names_the_roce_mtu_that_fits(tmp_path):
    small = NamespaceServers(2, mtu=1500).start()
    try:
        before = state_dirs()
        r = emulator("run", *on(small, "--workload", "none", "--results", str(tmp_path)))
        assert r.returncode == 2
        assert "underlay MTU 1500" in r.stderr and "--mtu 1024" in r.stderr
        assert_nothing_left(small, before)
        r = emulator("run", *on(small, "--workload", "none", "--mtu", "1024",
                                "--results", str(tmp_path)))
        assert r.returncode == 0, r.stderr[-2000:]
        assert_nothing_left(small, before)
    finally:
        small.close()


def test_bad_servers_option_is_refused_before_anything(tmp_path):
    r = emulator("run", "--servers", "root@not-an-address", "--results", str(tmp_path))
    assert r.returncode == 2 and "not an IPv4 address" in r.stderr
    r = emulator("run", "--placement", "pod", "--results", str(tmp_path))
    assert r.returncode == 2 and "need --servers" in r.stderr
    r = emulator("run", "--servers", "root@10.9.9.1", "--layout", "2",
                 "--results", str(tmp_path))
    assert r.returncode == 2 and "drop --layout" in r.stderr
    for command in (["compare"], ["probe"], ["drill", "--workload", "allreduce"]):
        r = emulator(*command, "--servers", "root@10.9.9.1", "--results", str(tmp_path))
        assert r.returncode == 2 and "one machine only" in r.stderr, (command, r.stderr)
    assert os.listdir(tmp_path) == []
