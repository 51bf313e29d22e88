"""Child processes: one-shot commands (checked, timed out) and ``Child``, the one
class of the processes a run starts and stops (controller, proxies, engines,
daemons, captures).

``run`` and ``attempt`` run a command to its end: a timeout always, the exit
status checked (``run``) or returned (``attempt``).  ``Child`` starts a
process (environment, directory, a session of its own), waits for it to be
ready, and stops it: the signal, a wait with a timeout, SIGKILL, the reap,
the exit status.  A signal (Ctrl-C, SIGTERM) that arrives while a child is
being started is held until the child exists, then the child is killed and
reaped before the exception leaves: a child made inside ``Popen()`` would
otherwise outlive the run that never saw its pid.
"""

import signal
import subprocess
import time
from collections import namedtuple

from emulator.dataplane.system.signals import signals_deferred
from emulator.errors import RunFailed

PIPE, DEVNULL, STDOUT = subprocess.PIPE, subprocess.DEVNULL, subprocess.STDOUT
# Held while a one-shot command is being started; the run turns them into exceptions.
_DEFERRED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}

Completed = namedtuple("Completed", "returncode stdout stderr")


class TimedOut(RunFailed):
    """A child did not exit (or a command did not finish) within its timeout."""


def in_netns(netns, argv):
    """``argv`` run inside the network namespace at path ``netns`` (None: here)."""
    return (["nsenter", f"--net={netns}"] if netns else []) + list(argv)


def run(argv, timeout=30, check=True, input=None, env=None):
    """Run ``argv``; return stdout.  Raise RunFailed naming the command on failure.

    A signal (Ctrl-C, SIGTERM) that arrives while the child is being started
    is held until it exists, so the child is always killed and reaped before
    the exception leaves: an ``ovs-vsctl add-br`` orphaned inside
    ``Popen()`` (subprocess.run never saw its pid) once created a run's
    bridges after its teardown had deleted them.  The child inherits the
    held signals blocked; it is stopped with SIGKILL on any exception.
    """
    done = attempt(argv, timeout, input=input, env=env)
    if check and done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise RunFailed(f"{' '.join(argv[:8])} exited {done.returncode}: "
                        f"{detail[-1] if detail else 'no output'}")
    return done.stdout


def attempt(argv, timeout=30, input=None, env=None):
    """Run ``argv`` to its end: ``Completed(returncode, stdout, stderr)`` whatever its
    exit status; TimedOut (the child killed and reaped) past ``timeout`` s,
    RunFailed if there is no such command."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
    child = None
    try:
        try:
            child = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None
                                     else subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        except FileNotFoundError:
            raise RunFailed(f"{argv[0]}: command not found")
        signal.pthread_sigmask(signal.SIG_SETMASK, old)   # a held signal is raised here
        out, err = child.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _killed(child)
        raise TimedOut(f"{' '.join(argv[:6])} ... timed out after {timeout}s")
    except BaseException:
        _killed(child)
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return Completed(child.returncode, out, err)


def _killed(child):
    """SIGKILL ``child`` (if started) and reap it, whatever else arrives meanwhile."""
    if child is None:
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
    try:
        child.kill()
        child.wait(timeout=10)
        for f in (child.stdin, child.stdout, child.stderr):
            if f is not None:
                f.close()
    except (OSError, subprocess.TimeoutExpired):
        pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def wait_until(cond, timeout, what, interval=0.02):
    """Poll ``cond`` until it is true; RunFailed naming ``what`` past ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RunFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Child:
    """One child process: started (``start``) or taken from what started it (a
    Mininet node's ``popen``), waited on, stopped, always reaped.  ``what``
    names it in every message; ``log`` is where its output goes, for them."""

    def __init__(self, popen, what, log=None):
        self.popen = popen
        self.what = what
        self.log = log

    @classmethod
    def start(cls, argv, what=None, *, log=None, cwd=None, env=None, stdin=None,
              stdout=None, stderr=None, text=False, new_session=False, pass_fds=()):
        """Start ``argv`` (FileNotFoundError if there is no such command)."""
        popen = None
        try:
            with signals_deferred():
                popen = subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout,
                                         stderr=stderr, text=text, pass_fds=pass_fds,
                                         start_new_session=new_session)
        except BaseException:
            _killed(popen)
            raise
        return cls(popen, what or argv[0], log)

    # ----- what it is -------------------------------------------------------

    @property
    def pid(self):
        return self.popen.pid

    @property
    def returncode(self):
        return self.popen.returncode

    @property
    def stdin(self):
        return self.popen.stdin

    @property
    def stdout(self):
        return self.popen.stdout

    @property
    def stderr(self):
        return self.popen.stderr

    def poll(self):
        """Its exit status, or None while it runs."""
        return self.popen.poll()

    def alive(self):
        return self.popen.poll() is None

    # ----- waiting ----------------------------------------------------------

    def wait(self, timeout=None):
        """Its exit status once it exits; TimedOut if it still runs after ``timeout`` s."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimedOut(f"{self.what} did not exit within {timeout:.0f}s") from None

    def communicate(self, input=None, timeout=None):
        """(stdout, stderr) once it exits; TimedOut after ``timeout`` s (it still runs,
        and a second call collects what is left)."""
        try:
            return self.popen.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimedOut(f"{self.what} did not finish within {timeout:.0f}s") from None

    def wait_ready(self, cond, timeout, what):
        """Poll ``cond`` until it is true (``what`` names it); RunFailed at once if the
        child exits meanwhile, or past ``timeout`` s."""
        def ready():
            if self.popen.poll() is not None:
                see = f"; see {self.log}" if self.log else ""
                raise RunFailed(f"{self.what} exited with status {self.popen.returncode} "
                                f"at start{see}")
            return cond()
        wait_until(ready, timeout, what)

    def finish(self, timeout):
        """Wait for it; killed past ``timeout`` s; RunFailed unless it exited 0."""
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RunFailed(f"{self.what} did not finish within {timeout:.0f}s") from None
        if self.popen.returncode != 0:
            err = self.popen.stderr.read() if self.popen.stderr else b""
            if isinstance(err, bytes):
                err = err.decode(errors="replace")
            lines = err.strip().splitlines()
            raise RunFailed(f"{self.what} exited {self.popen.returncode}: "
                            f"{lines[-1] if lines else 'no message'}")
        return 0

    # ----- stopping ---------------------------------------------------------

    def send_signal(self, sig):
        """``sig`` to it, if it still runs."""
        self.popen.send_signal(sig)

    def kill(self, timeout=10):
        """SIGKILL (if it still runs) and reap; its exit status.  TimedOut if it is
        not gone after ``timeout`` s (a process stuck in the kernel)."""
        if self.popen.poll() is None:
            self.popen.kill()
        return self.wait(timeout)

    def stop(self, timeout=10, sig=signal.SIGTERM):
        """``sig``, up to ``timeout`` s for it to exit, then SIGKILL; reaped; its exit
        status (negative: the signal that ended it)."""
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill(timeout)
        return self.popen.returncode
