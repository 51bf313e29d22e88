"""Hardening (root): repeated runs leak nothing; bad environments give one actionable line.

Leak figures are counted the same way as bench/bench_leaks.py: root-namespace
interfaces, distinct network namespaces (``/proc/*/ns/net`` inodes), processes,
and ovs-vswitchd's open file descriptors.  Other engineers' fabrics may come and
go on the same machine meanwhile, so the machine-wide figures are compared only
when no other fabric-lab run existed before and after; what this test's own
runs left behind (by run tag) is always asserted to be nothing.
"""

import os
import re
import subprocess
import sys

import pytest

from emulator.dataplane import runstate
from tests.conftest import REPO, emulator
from tests.integration import logcheck

sys.path.insert(0, os.path.join(REPO, "bench"))
import bench_leaks  # noqa: E402

RUNS = 10
SMALL = ["-P", "spines=1", "-P", "leaves=2", "-P", "hosts_per_leaf=1"]


def test_repeated_runs_leak_nothing(tmp_path):
    alone_before = not runstate.known_tags()
    offset = logcheck.ovs_log_offset()
    before = bench_leaks.snapshot()
    tags = bench_leaks.runs(RUNS, str(tmp_path), SMALL)
    after = bench_leaks.snapshot()
    alone_after = not runstate.known_tags()
    assert len(tags) == RUNS
    for tag in tags:
        assert bench_leaks.leftovers(tag) == bench_leaks.NOTHING, tag
        assert logcheck.ovs_problems(offset, tag) == []
    for d in os.listdir(tmp_path):
        assert runner_problems(os.path.join(tmp_path, d)) == []
    if alone_before and alone_after:
        assert after == before, bench_leaks.diff(before, after)
    else:
        print("other fabric-lab runs were active: machine-wide figures not compared",
              bench_leaks.diff(before, after))


def runner_problems(d):
    from emulator.dataplane.session import controller_problems
    return controller_problems(os.path.join(d, "controller.log"))


def one_error_line(p):
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_not_root_is_one_message(tmp_path):
    p = subprocess.run([sys.executable, "-m", "emulator", "run", *SMALL, "--results",
                        str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60,
                       user=65534, group=65534, env={"PATH": os.environ["PATH"]})
    assert p.returncode == 2, p.stderr
    line = one_error_line(p)
    assert "must run as root" in line and "sudo .venv/bin/python -m emulator run" in line
    assert os.listdir(tmp_path) == []


def test_missing_tool_is_one_message(tmp_path):
    # A PATH that has everything the run needs except ethtool.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ovs-vsctl", "ovs-ofctl", "mnexec", "ping", "ip", "sh"):
        found = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True,
                               text=True, timeout=10, check=True).stdout.strip()
        os.symlink(found, bin_dir / tool)
    results = tmp_path / "results"
    p = emulator("run", *SMALL, "--results", str(results),
                 env={**os.environ, "PATH": str(bin_dir)})
    assert p.returncode == 2, p.stderr
    line = one_error_line(p)
    assert re.fullmatch(r"error: missing ethtool: run sudo \./setup\.sh .*", line), line
    assert not results.exists()


def test_missing_ovs_daemon_is_one_message(tmp_path):
    # ovs-vsctl finds ovsdb-server's socket under OVS_RUNDIR: point it at nothing.
    env = {**os.environ, "OVS_RUNDIR": str(tmp_path / "no-ovs")}
    results = tmp_path / "results"
    p = emulator("run", *SMALL, "--results", str(results), env=env)
    assert p.returncode == 2, p.stderr
    line = one_error_line(p)
    assert "Open vSwitch is not running" in line and "setup.sh" in line
    assert not results.exists()
    p = emulator("check", *SMALL, env=env)
    assert p.returncode == 2 and "Open vSwitch is not running" in one_error_line(p)


@pytest.mark.parametrize("bad,expect", [
    (["--path", "h1:h9:49152"], "unknown host 'h9'"),
    (["--path", "h1-h2"], "is not SRC:DST:UDP_SPORT"),
    (["--cut", "leaf1-spine7"], "no link between 'leaf1' and 'spine7'"),
    (["--controller", "app:/nonexistent.py"], "no such app file"),
])
def test_check_rejects_bad_arguments_before_building(bad, expect, tmp_path):
    p = emulator("check", *SMALL, *bad, "--results", str(tmp_path))
    assert p.returncode == 2, p.stdout + p.stderr
    assert expect in one_error_line(p)
    assert os.listdir(tmp_path) == []
