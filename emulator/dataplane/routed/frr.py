"""The FRR daemons of every router: zebra, bfdd and bgpd, one set per switch namespace.

As FRR's own topology tests run them (tests/topotests/lib/topotest.py): each
daemon started inside its router's namespaces (``mnexec -a``, network and
mount), in the foreground (a child of this run: it inherits the run's tag,
``FABRIC_LAB_RUN``, so ``emulator clean`` finds it after a crash), with every
path of its own given on the command line, all under the run's state
directory ``<state>/frr/<switch>/``:

    -f <daemon>.conf   -i <daemon>.pid   -z zserv.api   --vty_socket <dir>
    -P 0 (no vty TCP port)   bfdd: --bfdctl bfdd.sock

and its log in ``<daemon>.log`` (``log file`` in its configuration, with
microsecond timestamps; what it says before reading it goes to ``<daemon>.out``),

so nothing of a run lands in /etc/frr or /var/run/frr (no ``-N``: with
every path given a pathspace would only add an empty /var/run/frr/<name>).
The daemons drop to FRR's user ``frr`` (its vty group ``frrvty`` is
compiled in; root is not a member), so each router's directory belongs to
it.  libfrr keeps a crash-log directory per process, /var/tmp/frr/<daemon>.<pid>;
a daemon that exits removes its own, a killed one cannot: ``remove_tmpdirs``.

zebra first (the others connect to its ``zserv.api``), then bfdd and bgpd.
A daemon that does not come up stops the run with the tail of its log.
"""

import os
import pwd
import shutil
import signal
import time

from emulator.dataplane.system import proc
from emulator.errors import EnvironmentProblem, RunFailed

FRR_DIR = "/usr/lib/frr"
DAEMONS = ("zebra", "bfdd", "bgpd")
FRR_USER = "frr"
TMPDIR = "/var/tmp/frr"
START_TIMEOUT_S = 20.0


def check_installed():
    """EnvironmentProblem (exit 2) naming the package when FRR is missing."""
    missing = [d for d in DAEMONS if not os.access(os.path.join(FRR_DIR, d), os.X_OK)]
    if missing or shutil.which("vtysh") is None:
        raise EnvironmentProblem(
            f"--control bgp needs FRR ({', '.join(missing) or 'vtysh'} missing): run sudo "
            "./setup.sh, which installs the Debian package frr (apt-get install frr)")
    try:
        pwd.getpwnam(FRR_USER)
    except KeyError:
        raise EnvironmentProblem("FRR's user 'frr' does not exist: reinstall the package "
                                 "frr (apt-get install --reinstall frr)")


def version():
    """FRR's version ("8.4.4"), or None."""
    try:
        out = proc.run([os.path.join(FRR_DIR, "zebra"), "--version"], timeout=10)
    except RunFailed:
        return None
    first = out.splitlines()[0] if out else ""
    return first.split()[-1] if first else None


def tail(path, lines=8):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).strip()
    except OSError:
        return ""


def remove_tmpdirs(pids_by_name):
    """Remove libfrr's crash-log directories of killed daemons ({pid: daemon name})."""
    for pid, name in pids_by_name.items():
        shutil.rmtree(os.path.join(TMPDIR, f"{name}.{pid}"), ignore_errors=True)


def daemon_name(pid):
    """The FRR daemon process ``pid`` runs ("bgpd"), or None if it is not one."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    return os.path.basename(exe) if os.path.dirname(exe) == FRR_DIR else None


class Router:
    """The FRR daemons of one switch (a Mininet node ``node``)."""

    def __init__(self, name, node, base, configs):
        self.name, self.node = name, node
        self.dir = os.path.join(base, name)
        self.configs = configs            # {daemon: text}
        self.children = {}                # daemon -> proc.Child
        self.started_at = {}              # daemon -> time.time() at its start

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self):
        os.makedirs(self.dir, exist_ok=True)
        user = pwd.getpwnam(FRR_USER)
        os.chown(self.dir, user.pw_uid, user.pw_gid)
        for daemon, text in self.configs.items():
            conf = self.path(f"{daemon}.conf")
            with open(conf, "w") as f:
                # the configured log file keeps microseconds (``log timestamp precision``);
                # what a daemon says before it reads its configuration goes to <daemon>.out
                f.write(f"log file {self.path(daemon + '.log')} debugging\n" + text)
            os.chown(conf, user.pw_uid, user.pw_gid)

    def argv(self, daemon):
        argv = [os.path.join(FRR_DIR, daemon), "-f", self.path(f"{daemon}.conf"),
                "-i", self.path(f"{daemon}.pid"), "-z", self.path("zserv.api"),
                "--vty_socket", self.dir, "-P", "0"]
        if daemon == "bfdd":
            argv += ["--bfdctl", self.path("bfdd.sock")]
        return argv

    def start(self, daemon):
        """Start ``daemon`` (not waiting for it: ``wait``)."""
        out = open(self.path(f"{daemon}.out"), "ab")
        try:
            popen = self.node.popen(self.argv(daemon), stdin=proc.DEVNULL, stdout=out,
                                    stderr=proc.STDOUT)
        finally:
            out.close()
        self.children[daemon] = proc.Child(popen, f"{daemon} of {self.name}",
                                           log=self.path(f"{daemon}.log"))
        self.started_at[daemon] = time.time()

    def ready(self, daemon):
        sock = self.path("zserv.api" if daemon == "zebra" else f"{daemon}.vty")
        return os.path.exists(sock) and os.path.exists(self.path(f"{daemon}.vty"))

    def wait(self, daemon, timeout=START_TIMEOUT_S):
        child = self.children[daemon]
        try:
            child.wait_ready(lambda: self.ready(daemon), timeout,
                             f"{daemon} of {self.name} to open its sockets")
        except RunFailed as e:
            detail = tail(self.path(f"{daemon}.log")) or tail(self.path(f"{daemon}.out"))
            raise RunFailed(f"{e}; the end of {self.path(daemon + '.log')}:\n{detail}") \
                from None

    def pids(self):
        return {c.pid: d for d, c in self.children.items() if c.alive()}

    def signal_all(self, sig, daemons=DAEMONS):
        for d in daemons:
            c = self.children.get(d)
            if c is not None and c.alive():
                c.send_signal(sig)

    def reap(self, daemons=DAEMONS, timeout=5.0):
        """Wait for ``daemons`` to exit (SIGKILL past ``timeout``); their exit statuses."""
        out = {}
        for d in daemons:
            c = self.children.get(d)
            if c is None:
                continue
            pid = c.pid
            try:
                out[d] = c.wait(timeout)
            except RunFailed:
                out[d] = c.kill()
            remove_tmpdirs({pid: d})     # a clean exit removed it already
        return out

    def kill(self, daemons=DAEMONS):
        """SIGKILL ``daemons`` (a crash): no goodbye to the peers, routes left in the
        kernel as they were."""
        self.signal_all(signal.SIGKILL, daemons)
        return self.reap(daemons)

    def vtysh(self, *commands, timeout=15):
        """vtysh's output for ``commands`` (``show bgp summary json``), run in the router."""
        argv = ["vtysh", "--vty_socket", self.dir]
        for c in commands:
            argv += ["-c", c]
        return proc.run(["mnexec", "-a", str(self.node.pid), *argv], timeout=timeout)


class Frr:
    """Every router's daemons (``routers``: {switch: Router})."""

    def __init__(self, routers):
        self.routers = routers

    def start(self, progress=None):
        """zebra everywhere, then bfdd and bgpd everywhere, each waited for."""
        say = progress or (lambda m: None)
        say(f"starting FRR (zebra, bfdd, bgpd) on {len(self.routers)} routers")
        for r in self.routers.values():
            r.write()
        for r in self.routers.values():
            r.start("zebra")
        for r in self.routers.values():
            r.wait("zebra")
        for d in ("bfdd", "bgpd"):
            for r in self.routers.values():
                r.start(d)
        for d in ("bfdd", "bgpd"):
            for r in self.routers.values():
                r.wait(d)

    def stop(self, timeout=5.0):
        """SIGTERM to every daemon (bgpd first: it says goodbye), then each reaped
        (SIGKILL past ``timeout``); [problems]."""
        for d in ("bgpd", "bfdd", "zebra"):
            for r in self.routers.values():
                r.signal_all(signal.SIGTERM, (d,))
        errors = []
        for r in self.routers.values():
            try:
                r.reap(timeout=timeout)
            except RunFailed as e:
                errors.append(str(e))
        return errors
