"""Signals as exceptions, so every ``finally`` of a run tears it down.

SIGINT raises KeyboardInterrupt and SIGTERM/SIGHUP raise ``Interrupted`` in
the run's own process; a teardown holds them until it is done
(``signals_masked``), and so does every netlink call (``netlink``).  While a
child process starts they are held in the handler only (``signals_deferred``):
a mask would be the child's too.

Python runs a signal's handler wherever the main thread is between two
bytecodes, also inside a finalizer (``__del__``, a weakref callback) whose
exception it prints as "Exception ignored" and drops: a Ctrl-C that landed
in a WeakSet's callback once let the run go on for its full 20 s. Such a
swallowed interrupt is sent again (``sys.unraisablehook``, from a thread 2 ms
later) and lands in the run's code.
"""

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """SIGTERM/SIGHUP, raised like KeyboardInterrupt so ``finally`` runs."""


_MAIN_PID = None
_held = {"depth": 0, "pending": []}     # holds under way (any thread), arrivals meanwhile
_depth_lock = threading.Lock()


def _raise_interrupted(signum, frame):
    # Forked helpers (pyroute2's netns workers) inherit this handler: they must
    # just die, never unwind into the run's ``finally`` and tear it down.
    if os.getpid() != _MAIN_PID:
        os._exit(128 + signum)
    if _held["depth"]:               # a teardown runs: raised once it is done
        _held["pending"].append(signum)
        return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Interrupted(signal.Signals(signum).name)


def signal_of(exc):
    """The signal an interrupt exception stands for, or None."""
    if isinstance(exc, KeyboardInterrupt):
        return signal.SIGINT
    if isinstance(exc, Interrupted) and exc.args and exc.args[0] in signal.Signals.__members__:
        return signal.Signals[exc.args[0]]
    return None


def _send_again(signum, after_s=0.002):
    # from another thread, a moment later: raised in here (or in the hook) the
    # handler's exception would be dropped again, and the hook not told
    time.sleep(after_s)
    os.kill(os.getpid(), signum)


def _unraisable_hook(previous):
    def hook(unraisable):
        signum = signal_of(unraisable.exc_value)
        if signum is not None and os.getpid() == _MAIN_PID:
            threading.Thread(target=_send_again, args=(signum,), daemon=True).start()
            return
        previous(unraisable)
    return hook


@contextmanager
def signals_as_exceptions():
    """SIGINT -> KeyboardInterrupt, SIGTERM/SIGHUP -> Interrupted, in this process only."""
    global _MAIN_PID
    _MAIN_PID = os.getpid()
    old = {s: signal.signal(s, _raise_interrupted) for s in HANDLED}
    old_hook = sys.unraisablehook
    sys.unraisablehook = _unraisable_hook(old_hook)
    try:
        yield
    finally:
        sys.unraisablehook = old_hook
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def signals_masked():
    """Teardown must finish: hold SIGINT/SIGTERM/SIGHUP until it has.

    The mask holds them in this thread only; the kernel may hand one to
    another thread (a sampler started before), whose arrival Python still
    runs the handler for here: the handler then keeps it, and it is raised
    when the outermost teardown is done."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, set(HANDLED))
    _hold()
    try:
        yield
    finally:
        pending = _release()
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        if pending:
            signal.raise_signal(pending[0])


@contextmanager
def signals_deferred():
    """Hold the run's signals in its handler only, not in the kernel's mask (which
    a child started meanwhile would inherit: a controller that SIGTERM cannot
    stop).  Without the run's handlers (``signals_as_exceptions``) in this
    process nothing is held."""
    if _MAIN_PID != os.getpid() or signal.getsignal(signal.SIGINT) is not _raise_interrupted:
        yield
        return
    _hold()
    try:
        yield
    finally:
        pending = _release()
        if pending:
            signal.raise_signal(pending[0])


def _hold():
    with _depth_lock:
        _held["depth"] += 1


def _release():
    """End one hold: the signals that arrived during it if it was the outermost."""
    with _depth_lock:
        _held["depth"] -= 1
        if _held["depth"]:
            return []
        pending, _held["pending"] = _held["pending"], []
        return pending
