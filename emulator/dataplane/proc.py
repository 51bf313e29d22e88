"""Subprocess calls that always check their exit status and have a timeout."""

import signal
import subprocess

from emulator.errors import RunFailed

# Held while a child is being started; the run turns them into exceptions.
_DEFERRED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def run(argv, timeout=30, check=True, input=None, env=None):
    """Run ``argv``; return stdout.  Raise RunFailed naming the command on failure.

    A signal (Ctrl-C, SIGTERM) that arrives while the child is being started
    is held until it exists, so the child is always killed and reaped before
    the exception leaves: an ``ovs-vsctl add-br`` orphaned inside
    ``Popen()`` (subprocess.run never saw its pid) once created a run's
    bridges after its teardown had deleted them.  The child inherits the
    held signals blocked; it is stopped with SIGKILL on any exception.
    """
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
        _stop(child)
        raise RunFailed(f"{' '.join(argv[:6])} ... timed out after {timeout}s")
    except BaseException:
        _stop(child)
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    if check and child.returncode != 0:
        detail = (err or out).strip().splitlines()
        raise RunFailed(f"{' '.join(argv[:8])} exited {child.returncode}: "
                        f"{detail[-1] if detail else 'no output'}")
    return out


def _stop(child):
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


def ovs_vsctl(*args, timeout=60):
    """One ovs-vsctl transaction; ``args`` may contain '--' separated commands."""
    return run(["ovs-vsctl", f"--timeout={max(1, int(timeout) - 1)}", *args], timeout=timeout)


def ovs_ofctl(*args, timeout=20):
    return run(["ovs-ofctl", *args], timeout=timeout)


def finish(p, timeout, what):
    """Wait for Popen ``p``; kill it after ``timeout``; RunFailed unless it exited 0."""
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=10)
        raise RunFailed(f"{what} did not finish within {timeout:.0f}s")
    if p.returncode != 0:
        err = p.stderr.read() if p.stderr else b""
        if isinstance(err, bytes):
            err = err.decode(errors="replace")
        lines = err.strip().splitlines()
        raise RunFailed(f"{what} exited {p.returncode}: {lines[-1] if lines else 'no message'}")
