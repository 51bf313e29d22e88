"""Datapath instances: the fabric's switches on the run's own Open vSwitch daemons.

Real ovsdb-server/ovs-vswitchd pairs, each in its own network namespace; the
controller reached through its unix socket; the run gone whole afterwards, and
a dead instance ending the run with one error.
"""

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): names its layouts itself
LAYOUT_INDEPENDENT = True

import os
import signal
import subprocess
import time

import pytest
from test_fabric import NOTHING, leftovers

from emulator.dataplane import cleanup, runstate
from emulator.dataplane.ovs import datapath
from emulator.dataplane.ovs.instances import Instance, stop_all
from emulator.dataplane.session import Session
from emulator.dataplane.system import ovs
from emulator.errors import RunFailed
from emulator.fabric import presets
from tests.conftest import emulator


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    with Session(presets.build("leaf-spine"), layout="2",
                 results_base=str(tmp_path_factory.mktemp("two"))) as s:
        yield s
    assert leftovers(s.results["run"]) == NOTHING


def test_two_instances_carry_the_fabric_and_it_is_reachable(two):
    n = len(two.topo["hosts"])
    assert two.results["reachability"]["reachable"] == n * (n - 1)
    assert two.results["datapath"]["allocator"] == "tcmalloc"
    assert two.results["layout"] == {
        "layout": "2", "why": "asked for", "crossing_links": 8,
        "instances": {"ovs0": ["leaf1", "leaf2", "spine1", "spine2"],
                      "ovs1": ["leaf3", "leaf4", "spine3", "spine4"]}}
    # nothing of the run in the machine's own Open vSwitch or root namespace
    tag = two.state.tag
    assert not [b for b in ovs.vsctl("list-br").split() if tag in b]
    assert not [i for i, t in cleanup.our_interfaces().items() if t == tag]
    for inst in two.net.instances:
        assert sorted(inst.vsctl("list-br").split()) == sorted(
            sw["bridge"] for sw in two.topo["switches"] if sw["name"] in inst.switches)
        # the daemon forwards in its own namespace, holding its switches' ports
        pid = inst.vswitchd_pid()
        assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
        assert os.readlink(f"/proc/{pid}/ns/net") == os.readlink(inst.netns)
        assert runstate.processes_of(tag).get(pid) == tag
        # on tcmalloc (setup.sh installs it): netdev-linux's per-receive buffers
        assert datapath.vswitchd_allocator(pid) == "tcmalloc"
        ports = os.listdir(f"{two.net.sysfs(inst.switches[0])}/class/net")
        assert {p["intf"] for sw in two.topo["switches"] if sw["name"] in inst.switches
                for p in sw["ports"]} <= set(ports)
    # every bridge reached the controller through its unix socket (OVS writes the
    # connection's state to its database every few seconds)
    names = [sw["name"] for sw in two.topo["switches"]]
    deadline = time.monotonic() + 20
    while set((status := two.net.controller_status(names)).values()) != {"connected"}:
        assert time.monotonic() < deadline, f"bridges not connected to the controller: {status}"
        time.sleep(0.5)
    assert sorted(status) == sorted(names)
    ctl = two.net.ovs("leaf1").vsctl("get", "controller", two.topo["switches"][0]["bridge"],
                                     "target")
    assert ctl.strip().strip('"').startswith("unix:") and tag in ctl


def test_a_cut_in_one_instance_is_repaired(two):
    from emulator.dataplane.faults import Injector
    from emulator.dataplane.observe.reach import ping_round
    inj = Injector(two)
    try:
        inj.link_down("leaf1-spine1")
        names = [h["name"] for h in two.topo["hosts"]]
        pairs = [(a, b) for a in names for b in names if a != b]
        deadline = time.monotonic() + 20
        while ping_round(two.net, pairs) != set(pairs):
            assert time.monotonic() < deadline, "not repaired around leaf1-spine1"
    finally:
        inj.link_up("leaf1-spine1")
        inj.close()


def test_a_dead_instance_ends_the_run_naming_its_switches(tmp_path):
    t0 = noticed = None
    with pytest.raises(RunFailed) as e:
        with Session(presets.build("leaf-spine"), layout="2",
                     results_base=str(tmp_path)) as s:
            tag = s.state.tag
            victim = s.net.instances[1]
            t0 = time.monotonic()
            victim.procs["ovs-vswitchd"].send_signal(signal.SIGKILL)
            try:
                while time.monotonic() - t0 < 30:
                    time.sleep(0.05)
            except BaseException:               # the session's watch interrupts the wait
                noticed = time.monotonic()      # before the teardown, which is not timed
                raise
    assert noticed is not None and noticed - t0 < 10, "the run did not notice its dead instance"
    msg = str(e.value)
    assert "datapath instance ovs1 died" in msg and "leaf3, leaf4, spine3, spine4" in msg
    assert leftovers(tag) == NOTHING
    logs = os.path.join(s.dir, "ovs-ovs1", "ovs-vswitchd.log")
    assert os.path.exists(logs)


def test_clean_stops_only_this_projects_instances(tmp_path):
    # a foreign Open vSwitch pair (no run tag), and a dead run whose pid file names it
    env = {k: v for k, v in os.environ.items() if k != runstate.RUN_ENV}
    foreign = Instance("ovs0", ["x"], str(tmp_path), env).start({})
    fake = os.path.join(runstate.STATE_ROOT, "fe11")
    os.makedirs(os.path.join(fake, "ovs0"))
    try:
        with open(os.path.join(fake, "ovs0", "ovs-vswitchd.child"), "w") as f:
            f.write(f"{foreign.vswitchd_pid()}\n")
        c = emulator("clean", timeout=120)
        assert c.returncode == 0, c.stderr
        assert "removed 0 instance daemons" in c.stdout
        assert foreign.alive() and not os.path.exists(fake)
    finally:
        stop_all([foreign])
        subprocess.run(["rm", "-rf", fake], timeout=10, check=True)


def test_sigkill_then_clean_removes_the_instances(tmp_path):
    from test_interrupts import run_tag, start_run, wait_for_text
    p, log = start_run(tmp_path, "--layout", "2", "--duration", "30")
    tag = run_tag(wait_for_text(log, "traffic:", p))
    p.kill()
    p.wait(timeout=30)
    from emulator.dataplane.ovs.instances import pidfile_daemons
    daemons = pidfile_daemons(os.path.join(runstate.STATE_ROOT, tag), tag)
    assert len(daemons) == 6                   # 2 x (holder, ovsdb-server, ovs-vswitchd)
    c = emulator("clean", timeout=120)
    assert c.returncode == 0, c.stderr
    assert "removed 6 instance daemons" in c.stdout
    assert leftovers(tag) == NOTHING
    # gone, or a zombie waiting for whoever inherited it to reap it
    assert not [d for d in daemons if os.path.exists(f"/proc/{d}")
                and not cleanup._is_zombie(d)]


def test_a_layout_the_fabric_cannot_have_is_one_error_and_builds_nothing(tmp_path):
    before = leftovers()
    p = emulator("run", "--layout", "pod", "--results", str(tmp_path / "res"))
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        "error: --layout: layout pod: this fabric has no pods; use a number of instances "
        "or per-switch"]
    assert not (tmp_path / "res").exists() and leftovers() == before


def test_a_missing_instance_tool_is_one_error_and_builds_nothing(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ovs-vsctl", "ovs-ofctl", "mnexec", "ping", "ethtool", "ip", "sh",
                 "ovs-vswitchd", "ovsdb-tool", "ovs-appctl", "nsenter", "modprobe"):
        found = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True,
                               text=True, timeout=10).stdout.strip()
        if found:
            os.symlink(found, bin_dir / tool)
    before = leftovers()
    p = emulator("run", "--layout", "2", "--results", str(tmp_path / "res"),
                 env={**os.environ, "PATH": str(bin_dir)})
    assert p.returncode == 2, p.stderr
    (line,) = [x for x in p.stderr.strip().splitlines() if x.startswith("error")]
    assert "layout 2 needs ovsdb-server" in line and "setup.sh" in line, line
    assert not (tmp_path / "res").exists() and leftovers() == before


def test_a_remote_controller_with_instances_is_refused_before_anything(tmp_path):
    from emulator.errors import ConfigError
    with pytest.raises(ConfigError, match="cannot reach a remote controller"):
        with Session(presets.build("leaf-spine"), layout="2", controller="remote:127.0.0.1:1",
                     results_base=str(tmp_path / "res")):
            pass
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("preset,lay,instances", [
    ("three-tier", "pod", 3),            # two pods and the super-spines
    ("multi-plane", "rail", 2),          # one per plane
    ("dual-tor", "per-switch", 6),       # the hosts' NIC switches go with their leaves
])
def test_named_layouts_build_reachable_fabrics(preset, lay, instances, tmp_path):
    with Session(presets.build(preset), layout=lay, results_base=str(tmp_path)) as s:
        n = s.results["reachability"]["pairs"]
        assert n and s.results["reachability"]["reachable"] == n
        assert len(s.net.instances) == instances
        assert sorted(sw for i in s.net.instances for sw in i.switches) == \
            sorted(sw["name"] for sw in s.topo["switches"])
