"""Subprocess calls that always check their exit status and have a timeout."""

import subprocess

from emulator.errors import RunFailed


def run(argv, timeout=30, check=True, input=None, env=None):
    """Run ``argv``; return stdout.  Raise RunFailed naming the command on failure."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              input=input, env=env)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"{' '.join(argv[:6])} ... timed out after {timeout}s")
    except FileNotFoundError:
        raise RunFailed(f"{argv[0]}: command not found")
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise RunFailed(f"{' '.join(argv[:8])} exited {proc.returncode}: "
                        f"{detail[-1] if detail else 'no output'}")
    return proc.stdout


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
