"""Open vSwitch instances: the run's own ``ovsdb-server`` + ``ovs-vswitchd`` pairs.

Model.  ``Ovs`` is how to reach one Open vSwitch: the machine's own (the
``shared`` layout, ``SYSTEM``) or an ``Instance`` of this run.  Every caller
that configures or reads a switch (ovs-vsctl, ovs-ofctl, ovs-appctl) asks the
switch's ``Ovs``, never the default sockets.

An instance lives in its own network namespace (the userspace datapath's
internal ``ovs-netdev`` device has a fixed name: two daemons in one namespace
clash).  The namespace is held by a small process (``mnexec -n``, which also
mounts a sysfs of that namespace, so the daemon sees its own ports in
``/sys/class/net``); its switches' veth ends are created in it.  Everything
else is under the run's state directory, ``/run/fabric-lab/<tag>/<name>/``:
the database (``conf.db``), the database socket (``db.sock``), the daemons'
control sockets and pid files, their logs, and the bridges' management
sockets (``<bridge>.mgmt``, ``OVS_RUNDIR``).  The daemons carry the run's tag
in their environment, and ``clean`` finds them by their pid files.

The controller is reached through a unix socket in the run's state directory
(``controller.sock``, see ``controller.launch``): a file, not an address,
reachable from every namespace and from nothing outside the machine.
"""

import os
import shutil
import signal
import threading
import time

from emulator.dataplane.links.ifaces import write_sysctl
from emulator.dataplane.ovs import datapath
from emulator.dataplane.runstate import processes_of
from emulator.dataplane.system import ovs as tools
from emulator.dataplane.system.proc import DEVNULL, STDOUT, Child, TimedOut, in_netns, wait_until
from emulator.errors import EnvironmentProblem, RunFailed
from traffic.nic.netns import entered

SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"
DAEMONS = ("ovs-vswitchd", "ovsdb-server", "holder")
OVS_RUNDIRS = ("/run/openvswitch", "/var/run/openvswitch")   # the machine's daemon
SYSTEM_LOG = "/var/log/openvswitch/ovs-vswitchd.log"
TOOLS = ("ovsdb-server", "ovs-vswitchd", "ovsdb-tool", "ovs-appctl", "mnexec", "nsenter")


class Ovs:
    """The machine's Open vSwitch: default database and control sockets."""

    name = "system"
    netns = None           # where its switches' ports are (None: this namespace)
    holder_pid = None      # the process holding that namespace
    dir = None

    def vsctl(self, *args, timeout=60):
        return tools.vsctl(*args, timeout=timeout)

    def target(self, bridge):
        """What ovs-ofctl names ``bridge`` by."""
        return bridge

    def rundir(self):
        """The directory of ovs-vswitchd's pid file and bridge sockets."""
        for d in OVS_RUNDIRS:
            if os.path.exists(os.path.join(d, "ovs-vswitchd.pid")):
                return d
        raise RunFailed("ovs-vswitchd's run directory (its pid file) was not found in "
                        + " or ".join(OVS_RUNDIRS))

    def mgmt_path(self, bridge):
        """The unix socket of ``bridge``'s OpenFlow management connection."""
        return os.path.join(self.rundir(), f"{bridge}.mgmt")

    def log_path(self):
        """ovs-vswitchd's log file (ovs-ctl's default), or None if there is none."""
        return SYSTEM_LOG if os.path.exists(SYSTEM_LOG) else None

    def vswitchd_pid(self):
        """ovs-vswitchd's pid from its pid file, or None."""
        for d in OVS_RUNDIRS:
            try:
                with open(os.path.join(d, "ovs-vswitchd.pid")) as f:
                    return int(f.read().strip())
            except (OSError, ValueError):
                continue
        return None

    def ofctl(self, command, bridge, *args, timeout=20, version="OpenFlow15"):
        return tools.ofctl("-O", version, command, self.target(bridge), *args,
                           timeout=timeout)

    def appctl(self, *args, timeout=10):
        return tools.appctl(*args, timeout=timeout)

    def in_netns(self, argv):
        """``argv`` run where this instance's ports are."""
        return in_netns(self.netns, argv)


SYSTEM = Ovs()


class Instance(Ovs):
    """One ``ovsdb-server`` + ``ovs-vswitchd`` of a run, in its own namespace."""

    def __init__(self, name, switches, state_dir, env, own_netns=True):
        """``own_netns``: False runs the daemons in this namespace (a server's whole
        share of a fabric is one instance, whose daemon must reach the controller's
        address: ``dataplane.cluster.servers``)."""
        self.name = name
        self.own_netns = own_netns
        self.switches = list(switches)
        self.dir = os.path.join(state_dir, name)
        self.env = dict(env, OVS_RUNDIR=self.dir, OVS_DBDIR=self.dir, OVS_LOGDIR=self.dir)
        self.procs = {}
        self.netns = None

    # ----- reaching it ----------------------------------------------------

    @property
    def db(self):
        return f"unix:{self.dir}/db.sock"

    def log_path(self):
        return os.path.join(self.dir, "ovs-vswitchd.log")

    @property
    def ctl(self):
        return f"{self.dir}/ovs-vswitchd.ctl"

    def vsctl(self, *args, timeout=60):
        return tools.vsctl(*args, db=self.db, timeout=timeout)

    def mgmt_path(self, bridge):
        return f"{self.dir}/{bridge}.mgmt"

    def target(self, bridge):
        return f"unix:{self.mgmt_path(bridge)}"

    def appctl(self, *args, timeout=10):
        return tools.appctl(*args, target=self.ctl, timeout=timeout)

    def controller_link(self, path):
        """A name for the controller's unix socket ``path`` inside this instance's
        directory: ovs-vswitchd connects to unix sockets under its OVS_RUNDIR only."""
        link = os.path.join(self.dir, "controller.sock")
        if not os.path.islink(link):
            os.symlink(path, link)
        return link

    def vswitchd_pid(self):
        p = self.procs.get("ovs-vswitchd")
        return p.pid if p is not None and p.poll() is None else None

    @property
    def holder_pid(self):
        p = self.procs.get("holder")
        return p.pid if p is not None else None

    def alive(self):
        return bool(self.procs) and all(p.poll() is None for p in self.procs.values())

    def died(self):
        """The daemons of this instance that have exited, with their status."""
        return {name: p.returncode for name, p in self.procs.items() if p.poll() is not None}

    # ----- life -------------------------------------------------------------

    def start(self, sysctls, timeout=30):
        """Namespace, database, daemons; returns once ovs-vswitchd answers.

        ``sysctls``: {key: value} set inside the namespace before the daemon opens
        any socket (its packet sockets' buffers are fixed when opened)."""
        os.makedirs(self.dir, exist_ok=False)
        if self.own_netns:
            self._spawn("holder", ["mnexec", "-cn", "sleep", "infinity"])
            self.netns = f"/proc/{self.holder_pid}/ns/net"
            wait_until(lambda: os.path.exists(self.netns) and _own_netns(self.holder_pid), 5,
                       f"{self.name}'s namespace")
            with entered(self.netns):
                for key, value in sysctls.items():
                    write_sysctl(key, str(value))
        tools.ovsdb_tool("create", f"{self.dir}/conf.db", SCHEMA, timeout=20)
        self._spawn("ovsdb-server", [
            "ovsdb-server", f"{self.dir}/conf.db", f"--remote=punix:{self.dir}/db.sock",
            f"--pidfile={self.dir}/ovsdb-server.pid", f"--unixctl={self.dir}/ovsdb-server.ctl",
            f"--log-file={self.dir}/ovsdb-server.log"])
        wait_until(lambda: self._check() and os.path.exists(f"{self.dir}/db.sock"), timeout,
                   f"{self.name}'s ovsdb-server")
        self.vsctl("--no-wait", "init", timeout=timeout)
        enter = ["mnexec", "-a", str(self.holder_pid)] if self.own_netns else []
        self._spawn("ovs-vswitchd", [
            *enter, "ovs-vswitchd", self.db,
            f"--pidfile={self.dir}/ovs-vswitchd.pid", f"--unixctl={self.ctl}",
            f"--log-file={self.dir}/ovs-vswitchd.log"], datapath.allocator_env())
        # the control socket's file exists from bind(), a moment before listen(): a
        # connect in between is refused, so wait for an answer, not for the file
        wait_until(lambda: self._check() and os.path.exists(self.ctl) and self._answers(),
                   timeout, f"{self.name}'s ovs-vswitchd")
        return self

    def _answers(self):
        try:
            self.appctl("version", timeout=10)
            return True
        except RunFailed:
            return False

    def _spawn(self, name, argv, env=None):
        out = open(os.path.join(self.dir, f"{name}.out"), "ab")
        try:
            self.procs[name] = Child.start(argv, f"{self.name}: {name}", stdin=DEVNULL,
                                           stdout=out, stderr=STDOUT,
                                           env=dict(self.env, **(env or {})),
                                           new_session=True)
        except FileNotFoundError:
            raise EnvironmentProblem(f"{argv[0]}: command not found (datapath instances need "
                                     "Open vSwitch's ovsdb-server, ovs-vswitchd and ovsdb-tool "
                                     "and Mininet's mnexec: run sudo ./setup.sh)")
        finally:
            out.close()
        # ``clean``'s record (the daemons also write their own ``.pid`` once up)
        with open(os.path.join(self.dir, f"{name}.child"), "w") as f:
            f.write(f"{self.procs[name].pid}\n")

    def _check(self):
        dead = self.died()
        if "holder" in dead:
            raise EnvironmentProblem(
                f"datapath instance {self.name}: cannot create a network namespace "
                f"(mnexec -n exited {dead['holder']}; see {self.dir}/holder.out): run as "
                "root where namespaces are allowed, or use --layout shared")
        if dead:
            raise RunFailed(f"datapath instance {self.name}: {', '.join(dead)} exited "
                            f"({', '.join(str(s) for s in dead.values())}) at start; "
                            f"see {self.dir}")
        return True

    def signal_all(self, sig=signal.SIGTERM):
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass

    def reap(self, deadline):
        """Wait for the daemons until ``deadline`` (monotonic), then SIGKILL them."""
        errors = []
        for name, p in self.procs.items():
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except TimedOut:
                try:
                    p.kill()
                except TimedOut:
                    errors.append(f"{self.name}: {name} (pid {p.pid}) did not exit")
        return errors


def _own_netns(pid):
    """True once ``pid`` has left this process's network namespace."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    except OSError:
        return False


def stop_all(instances, grace=5.0):
    """SIGTERM every daemon of every instance at once, then reap (SIGKILL stragglers).
    The namespace goes with its holder, and every veth end in it with the namespace."""
    for inst in instances:
        inst.signal_all()
    deadline = time.monotonic() + grace
    errors = []
    for inst in instances:
        errors += inst.reap(deadline)
    return errors


def pidfile_daemons(state_dir, tag):
    """PIDs named by the pid files of run ``tag``'s instances that are alive and still
    carry the tag in their environment (a recycled pid is never ours)."""
    ours = processes_of(tag)
    pids = []
    try:
        names = sorted(os.listdir(state_dir))
    except FileNotFoundError:
        return []
    for name in names:
        for daemon in DAEMONS:
            try:
                with open(os.path.join(state_dir, name, f"{daemon}.child")) as f:
                    pid = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            if pid in ours:
                pids.append(pid)
    return pids


class Watch:
    """Ends the run when an instance dies: a daemon thread polls the instances and,
    on the first death, records what died (``failure``) and sends the run's process
    SIGHUP, which unwinds it through its ``finally`` (``dataplane.system.signals``); the
    session then reports ``failure`` as its one error."""

    def __init__(self, instances, interval=0.2, interrupt=True):
        """``interrupt``: send the SIGHUP (only where the run turned signals into
        exceptions: elsewhere SIGHUP would kill the process); else only record."""
        self.interrupt = interrupt
        self.instances = instances
        self.interval = interval
        self.failure = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="instance-watch", daemon=True)

    def start(self):
        if self.instances:
            self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.interval):
            for inst in self.instances:
                dead = inst.died()
                if dead and not self._stop.is_set():
                    self.failure = (
                        f"datapath instance {inst.name} died "
                        f"({', '.join(f'{d} exited {s}' for d, s in dead.items())}): "
                        f"its switches {', '.join(inst.switches)} are gone; the run was torn "
                        f"down (its logs: ovs-{inst.name}/ in the results directory)")
                    if self.interrupt:
                        os.kill(os.getpid(), signal.SIGHUP)
                    return

    def stop(self):
        """No SIGHUP after this returns: the thread is waited for, so one that was
        looking at the instances when the run began its teardown (which stops
        them) cannot take their exit for a death."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


def keep_logs(instances, results_dir):
    """Copy each instance's daemon logs to ``results_dir``/ovs-<name>/ (the state
    directory they live in goes with the run)."""
    for inst in instances:
        dest = os.path.join(results_dir, f"ovs-{inst.name}")
        os.makedirs(dest, exist_ok=True)
        for name in ("ovs-vswitchd.log", "ovsdb-server.log", "ovs-vswitchd.out",
                     "ovsdb-server.out"):
            try:
                shutil.copy(os.path.join(inst.dir, name), dest)
            except OSError:
                pass
