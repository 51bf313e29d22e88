"""Open vSwitch's command-line tools: ovs-vsctl, ovs-ofctl, ovs-appctl, ovsdb-tool.

Each call is one checked command with a timeout (``proc.run``).  ``db``,
``target`` and a bridge's ``unix:`` socket name the Open vSwitch a call goes
to (a run's own instance, ``dataplane.ovs.instances``); without them, the
machine's daemon on its default sockets.
"""

from emulator.dataplane.system.proc import attempt, run
from emulator.errors import RunFailed


def vsctl(*args, db=None, timeout=60):
    """One ovs-vsctl transaction; ``args`` may contain '--' separated commands."""
    where = [f"--db={db}"] if db else []
    return run(["ovs-vsctl", *where, f"--timeout={max(1, int(timeout) - 1)}", *args],
               timeout=timeout)


def ofctl(*args, input=None, timeout=20):
    return run(["ovs-ofctl", *args], input=input, timeout=timeout)


def appctl(*args, target=None, timeout=10):
    """``ovs-appctl``, to ovs-vswitchd's control socket ``target`` (None: the machine's)."""
    return run(["ovs-appctl", *(["-t", target] if target else []), *args], timeout=timeout)


def ovsdb_tool(*args, timeout=20):
    return run(["ovsdb-tool", *args], timeout=timeout)


def reachable(timeout=10):
    """True if ovs-vsctl reaches the machine's ovsdb-server (the daemon runs)."""
    try:
        return attempt(["ovs-vsctl", f"--timeout={max(1, timeout // 2)}", "show"],
                       timeout=timeout).returncode == 0
    except RunFailed:
        return False


def version(tool="ovs-vsctl"):
    """Open vSwitch's version as ``tool --version`` says it (``3.1.0``), or None."""
    try:
        done = attempt([tool, "--version"], timeout=10)
        return done.stdout.splitlines()[0].split()[-1] if done.returncode == 0 else None
    except (RunFailed, IndexError):
        return None
