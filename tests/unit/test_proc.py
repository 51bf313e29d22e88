"""Subprocess calls: checked, timed out, and never orphaned by a signal."""

import signal
import subprocess

import pytest

from emulator.dataplane.system import proc
from emulator.errors import RunFailed


class Stop(BaseException):
    pass


def test_run_checks_exit_status_timeout_and_missing_command():
    assert proc.run(["cat"], input="abc") == "abc"
    with pytest.raises(RunFailed, match="false exited 1"):
        proc.run(["false"])
    with pytest.raises(RunFailed, match="command not found"):
        proc.run(["no-such-command-here"])
    with pytest.raises(RunFailed, match="timed out"):
        proc.run(["sleep", "10"], timeout=0.3)


def test_a_signal_while_the_child_starts_kills_and_reaps_it(monkeypatch):
    # The signal lands after the fork, before Popen() returns: subprocess.run
    # would never see the child, which would go on (an ovs-vsctl creating
    # bridges after the teardown deleted them).
    children = []
    real = subprocess.Popen

    def popen(*a, **kw):
        child = real(["sleep", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        children.append(child)
        signal.raise_signal(signal.SIGINT)
        return child

    def raise_stop(signum, frame):
        raise Stop()
    old = signal.signal(signal.SIGINT, raise_stop)
    monkeypatch.setattr(subprocess, "Popen", popen)
    try:
        with pytest.raises(Stop):
            proc.run(["ovs-vsctl", "add-br", "x"], timeout=60)
    finally:
        signal.signal(signal.SIGINT, old)
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait()
                pytest.fail("the child outlived the signal")
    assert children[0].returncode == -signal.SIGKILL
    assert not signal.pthread_sigmask(signal.SIG_BLOCK, set()) & {signal.SIGINT}


def test_an_interrupt_swallowed_by_a_finalizer_is_raised_again():
    import gc
    import time

    from emulator.dataplane.system.signals import Interrupted, signal_of, signals_as_exceptions

    class Dies:
        def __del__(self):        # the handler runs in here: Python drops its exception
            signal.raise_signal(signal.SIGINT)
            sum(range(1000))

    caught, before = None, signal.getsignal(signal.SIGINT)
    with signals_as_exceptions():
        try:
            Dies()
            gc.collect()
            for _ in range(200):
                time.sleep(0.001)
        except KeyboardInterrupt as e:
            caught = e
    assert isinstance(caught, KeyboardInterrupt)
    assert signal.getsignal(signal.SIGINT) == before           # restored
    assert signal_of(Interrupted("SIGTERM")) == signal.SIGTERM and signal_of(ValueError()) is None


def test_a_signal_another_thread_receives_during_teardown_waits_for_its_end():
    # the mask holds signals in the masking thread only: one sent while a sampler
    # thread runs may go to that thread, and Python runs the handler in the main one
    import os
    import threading

    from emulator.dataplane.system.signals import signals_as_exceptions, signals_masked
    go, sent = threading.Event(), threading.Event()

    def sampler():
        go.wait(5)
        os.kill(os.getpid(), signal.SIGTERM)
        sent.set()
    t = threading.Thread(target=sampler, daemon=True)
    steps = []
    with signals_as_exceptions():
        t.start()
        with pytest.raises(BaseException) as info:
            with signals_masked():
                go.set()
                sent.wait(5)
                for _ in range(1000):          # bytecodes for the handler to run between
                    sum(range(10))
                steps.append("teardown finished")
        t.join(5)
    assert steps == ["teardown finished"]
    assert type(info.value).__name__ == "Interrupted" and info.value.args == ("SIGTERM",)
