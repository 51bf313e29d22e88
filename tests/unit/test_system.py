"""The system layer: the one child-process class, checked commands, and Ctrl-C
held over netlink changes (no root needed)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from emulator.dataplane.system import proc
from emulator.dataplane.system.netlink import Netlink
from emulator.dataplane.system.signals import signals_as_exceptions
from emulator.errors import RunFailed

IGNORES_TERM = ("import signal, sys, time\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "open(sys.argv[1], 'w').close()\n"
                "time.sleep(60)\n")


def python(script, *args):
    return [sys.executable, "-c", script, *map(str, args)]


def test_a_child_starts_in_its_directory_environment_and_session(tmp_path):
    out = tmp_path / "out"
    with open(out, "w") as f:
        child = proc.Child.start(
            python("import os; print(os.getcwd(), os.environ['X'], os.getsid(0) == os.getpid())"),
            "printer", cwd=tmp_path, env=dict(os.environ, X="42"), stdout=f,
            new_session=True)
        assert child.wait(10) == 0
    assert out.read_text().split() == [str(tmp_path), "42", "True"]


def test_stop_kills_and_reaps_a_child_that_ignores_sigterm(tmp_path):
    ready = tmp_path / "ready"
    child = proc.Child.start(python(IGNORES_TERM, ready), "stubborn")
    child.wait_ready(ready.exists, 10, "the stubborn child")
    t0 = time.monotonic()
    assert child.stop(timeout=0.3) == -signal.SIGKILL
    assert time.monotonic() - t0 < 5
    assert not child.alive() and not os.path.exists(f"/proc/{child.pid}")     # reaped


def sleeping(child):
    """``child`` once it runs ``sleep`` (a signal that arrives between fork and exec is
    taken by the handler the test process has for it, not by ``sleep``)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{child.popen.pid}/comm") as f:
            if f.read().strip() == "sleep":
                return child
        time.sleep(0.01)
    raise AssertionError("the child never ran sleep")


def test_stop_returns_the_exit_status_of_a_child_that_obeys():
    # as the emulator starts them: under its handlers (a shell that started the tests in
    # the background ignores SIGINT, and an ignored signal stays ignored across exec)
    with signals_as_exceptions():
        child = sleeping(proc.Child.start(["sleep", "30"], "sleeper"))
        assert child.stop() == -signal.SIGTERM
        assert child.stop() == -signal.SIGTERM       # once stopped, stopping again says so
        child = sleeping(proc.Child.start(["sleep", "30"], "sleeper"))
        assert child.stop(sig=signal.SIGINT) == -signal.SIGINT


def test_waiting_for_a_child_that_exits_at_start_names_it_and_its_log(tmp_path):
    child = proc.Child.start(python("raise SystemExit(3)"), "the controller",
                             log=str(tmp_path / "ctl.log"))
    with pytest.raises(RunFailed, match=r"the controller exited with status 3 at start; "
                                        r"see .*ctl\.log"):
        child.wait_ready(lambda: False, 10, "the controller to listen")
    child = proc.Child.start(["sleep", "30"], "sleeper")
    with pytest.raises(RunFailed, match="timed out after 0s waiting for nothing"):
        child.wait_ready(lambda: False, 0.1, "nothing")
    child.kill()


def test_timeouts_raise_run_failed_naming_the_command():
    with pytest.raises(proc.TimedOut, match=r"sleep 10 \.\.\. timed out after 0.3s"):
        proc.run(["sleep", "10"], timeout=0.3)
    child = proc.Child.start(["sleep", "30"], "a sleeper")
    with pytest.raises(RunFailed, match="a sleeper did not exit within 0s"):
        child.wait(0.1)
    assert child.alive()                              # waiting does not stop it
    with pytest.raises(RunFailed, match="a sleeper did not finish within 0s"):
        child.finish(0.1)                             # finishing does
    assert child.returncode == -signal.SIGKILL


def test_a_nonzero_exit_raises_with_the_last_line_it_said():
    with pytest.raises(RunFailed, match="sh -c .* exited 3: second"):
        proc.run(["sh", "-c", "echo first >&2; echo second >&2; exit 3"])
    assert proc.attempt(["sh", "-c", "echo out; echo err >&2; exit 3"]) == \
        proc.Completed(3, "out\n", "err\n")
    child = proc.Child.start(["sh", "-c", "echo why >&2; exit 4"], "the job",
                             stderr=proc.PIPE)
    with pytest.raises(RunFailed, match="the job exited 4: why"):
        child.finish(10)
    assert proc.Child.start(["true"], "fine").finish(10) == 0


def test_a_child_inherits_no_held_signal():
    # the run's signals are held in its handler while a child starts, not in the
    # kernel's mask, which the child would inherit (SIGTERM could not stop it)
    status = python("print(open('/proc/self/status').read())")
    with signals_as_exceptions():
        child = proc.Child.start(status, "status", stdout=proc.PIPE, text=True)
        out, _ = child.communicate(timeout=10)
    blocked = int(next(ln for ln in out.splitlines() if ln.startswith("SigBlk:")).split()[1],
                  16)
    assert not blocked & ((1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1)))


def test_a_ctrl_c_while_a_child_starts_kills_it_before_the_interrupt_leaves(monkeypatch):
    children = []
    real = subprocess.Popen

    def popen(*a, **kw):               # the interrupt lands inside Popen(), after the fork
        child = real(["sleep", "30"])
        children.append(child)
        signal.raise_signal(signal.SIGINT)
        return child
    monkeypatch.setattr(subprocess, "Popen", popen)
    with signals_as_exceptions():
        with pytest.raises(KeyboardInterrupt):
            proc.Child.start(["sleep", "30"], "controller")
    assert children[0].returncode == -signal.SIGKILL          # killed and reaped


class FakeRoute:
    """Netlink's socket: its change is interrupted by a Ctrl-C half-way."""

    def __init__(self):
        self.done = []

    def link(self, command, index, state):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):                # bytecodes for the handler to run between
            sum(range(10))
        self.done.append((command, index, state))

    def close(self):
        pass


def test_a_ctrl_c_during_a_netlink_change_is_raised_once_the_change_is_done():
    nl = Netlink.__new__(Netlink)
    nl._ipr = FakeRoute()
    after = []
    with signals_as_exceptions():
        with pytest.raises(KeyboardInterrupt):
            nl.set_state(7, "down")
            after.append("the next statement")
    assert nl._ipr.done == [("set", 7, "down")] and after == []
    assert not signal.pthread_sigmask(signal.SIG_BLOCK, set()) & {signal.SIGINT}


def test_netlink_lookups_in_this_namespace():
    with Netlink() as nl:
        assert nl.index("lo") == 1 and nl.index("no-such-interface") is None
        assert ("lo", 0, 1) in nl.interfaces()
