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
