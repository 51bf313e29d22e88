"""Interrupted runs leave nothing behind; ``clean`` removes only this project's leftovers."""

import os
import signal
import subprocess
import sys
import time

import pytest

from emulator.dataplane.system import ovs
from tests.conftest import REPO, emulator
from tests.integration.test_fabric import NOTHING, leftovers


def start_run(tmp_path, *extra):
    log = open(tmp_path / "run.log", "w+")
    p = subprocess.Popen([sys.executable, "-m", "emulator", "run", "-P", "spines=2",
                          "-P", "leaves=2", "--results", str(tmp_path / "res"), *extra],
                         cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True)
    return p, log


def wait_for_text(log, text, proc_, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log.seek(0)
        content = log.read()
        if text in content:
            return content
        if proc_.poll() is not None:
            raise AssertionError(f"run exited {proc_.returncode} before {text!r}:\n{content}")
        time.sleep(0.05)
    raise AssertionError(f"no {text!r} within {timeout}s")


def run_tag(content):
    return content.split("... run ", 1)[1][:4]


@pytest.mark.parametrize("sig,moment", [
    (signal.SIGINT, "creating"),            # while building
    (signal.SIGTERM, "waiting for the hosts to reach each other"),
    (signal.SIGINT, "traffic:"),            # while traffic runs
])
def test_signal_at_any_moment_leaves_nothing(tmp_path, sig, moment):
    before = leftovers()
    p, log = start_run(tmp_path, "--duration", "20")
    content = wait_for_text(log, moment, p)
    p.send_signal(sig)
    p.wait(timeout=60)
    log.seek(0)
    out = log.read()
    assert p.returncode in (130, 143), out
    assert "removed everything this run created" in out and "could not remove" not in out
    assert leftovers(run_tag(content)) == NOTHING
    assert leftovers() == before


def test_clean_after_sigkill_removes_only_ours(tmp_path):
    foreign = f"notours{os.getpid() % 10000}"
    ovs.vsctl("add-br", foreign, "--", "set", "bridge", foreign, "datapath_type=netdev")
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        p, log = start_run(tmp_path, "--duration", "30")
        content = wait_for_text(log, "traffic:", p)
        tag = run_tag(content)
        p.kill()
        p.wait(timeout=30)
        left = leftovers(tag)
        # SIGKILL leaves them: bridges in the machine's OVS, or datapath instances
        from emulator.dataplane.ovs.instances import pidfile_daemons
        from emulator.dataplane.runstate import STATE_ROOT
        assert left["processes"] and (left["bridges"] or pidfile_daemons(
            os.path.join(STATE_ROOT, tag), tag)), left
        c = emulator("clean", timeout=120)
        assert c.returncode == 0, c.stderr
        assert leftovers(tag) == NOTHING
        assert foreign in ovs.vsctl("list-br").split()
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
        ovs.vsctl("--if-exists", "del-br", foreign)
