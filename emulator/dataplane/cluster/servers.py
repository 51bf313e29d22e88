"""Reaching the servers of a multi-server run: ssh, preflight, workers, TLS, clean.

Each server is reached as Mininet's cluster edition reaches its nodes
(``mininet.examples.cluster.RemoteMixin``): one persistent ssh shell per
server running ``mnexec``, and processes started through it with
``popen``.  ``ServerShell`` composes that mix-in with a root-namespace
``Node``, and changes two things: the ssh command takes the run's options
(an ssh config file, batch mode, a connect timeout, one multiplexed
connection per server), and a root login needs no ``sudo`` (a machine
without sudo is common in containers and CI).

Before anything is built, ``preflight`` checks every server over plain ssh
and names the first problem: unreachable, no key login, no root or
passwordless sudo, the project missing, Open vSwitch or Mininet missing,
versions that differ from this machine's, or an underlay MTU too small for
the tunnels.  The run's process starts one ``dataplane.cluster.worker`` per server
(``RemoteWorker``), which builds and removes that server's share.
"""

import ctypes
import json
import os
import select
import shutil
import signal
import sys
import threading

from mininet.examples.cluster import ClusterCleanup, RemoteMixin
from mininet.node import Node

from emulator.dataplane.cluster.worker import REPO, versions
from emulator.dataplane.ovs.datapath import MIN_SEND_BUFFER
from emulator.dataplane.system import netlink, proc
from emulator.errors import EnvironmentProblem, RunFailed
from emulator.fabric import cluster

SSH_TIMEOUT = 20          # seconds for one preflight command


def in_parallel(fn, items):
    """``fn(item)`` for every item at once; {item: result}; the first error raises."""
    results, errors = {}, []

    def one(item):
        try:
            results[item] = fn(item)
        except BaseException as e:          # re-raised below, in the caller's thread
            errors.append(e)
    threads = [threading.Thread(target=one, args=(i,)) for i in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def ssh_base(ssh_config=None, control_dir=None):
    """ssh's options for every connection of a run."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
    if ssh_config:
        argv += ["-F", ssh_config]
    if control_dir:
        argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={control_dir}/ssh-%C",
                 "-o", "ControlPersist=no"]
    return argv


def remote_argv(server, argv):
    """``argv`` as root on ``server``: directly for root, else through sudo -n."""
    return list(argv) if server.user == "root" else ["sudo", "-n", "-E", *argv]


def worker_argv(server, *args, tag=None):
    env = ["env", f"PYTHONPATH={REPO}"]
    if tag:
        env.append(f"FABRIC_LAB_RUN={tag}")
    return remote_argv(server, [*env, sys.executable, "-m", "emulator.dataplane.cluster.worker",
                                "--server", server.name, *args])


class ServerShell(RemoteMixin, Node):
    """The root namespace of one server, as a cluster-edition remote node."""

    def __init__(self, server, ssh, env=None):
        self.ssh = list(ssh)
        self.fabric_server = server
        self._env = env
        super().__init__(server.name, server=server.address, serverIP=server.address,
                         user=server.user, inNamespace=False)
        # The cluster edition registers every server for a cleanup that would run
        # `ssh SERVER sudo mn -c` (every Mininet of that server) if anything called
        # mininet.clean.cleanup(); this run's servers are cleaned by their workers.
        ClusterCleanup.serveruser.pop(server.address, None)

    def startShell(self, *args, **kwargs):
        # the run's ssh options, and no local sudo: the run is root already
        self.sshcmd = self.ssh + ["-tt", self.dest]
        super().startShell(*args, **kwargs)

    @staticmethod
    def _ignoreSignal():
        """The cluster edition's own (a process group of its own, so Ctrl-C does not
        reach ssh), and: ssh dies with the run's process (SIGKILL included), so
        the server's worker sees its session end and removes what it built."""
        os.setpgrp()
        _die_with_parent()

    def _popen(self, cmd, sudo=True, tt=True, **params):
        if self._env is not None:
            params.setdefault("env", self._env)
        return super()._popen(cmd, sudo=sudo and self.user != "root", tt=tt, **params)


def _die_with_parent():
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _ssh_run(ssh, server, argv, timeout=SSH_TIMEOUT):
    """``argv`` on ``server`` over ssh: its ``Completed`` (255: no answer in time)."""
    try:
        return proc.attempt([*ssh, "-n", server.dest, *argv], timeout=timeout)
    except proc.TimedOut:
        return proc.Completed(255, "", f"no answer in {timeout} s")


def _check_one(ssh, server, toward):
    """(probe document or None, problem or None) for one server."""
    r = _ssh_run(ssh, server, ["true"])
    if r.returncode != 0:
        err = (r.stderr or "").strip().splitlines()
        why = err[-1] if err else f"ssh exited {r.returncode}"
        if "Permission denied" in why or "publickey" in why:
            return None, (f"server {server.name} ({server.dest}): no key login ({why}): "
                          f"install this machine's key in {server.user}'s authorized_keys "
                          "there (ssh-copy-id), or name the key in --ssh-config")
        return None, (f"server {server.name} ({server.dest}) is unreachable over ssh: "
                      f"{why}")
    if server.user != "root":
        r = _ssh_run(ssh, server, ["sudo", "-n", "true"])
        if r.returncode != 0:
            return None, (f"server {server.name}: {server.user} has no passwordless sudo "
                          "there: log in as root, or allow NOPASSWD sudo for that user")
    r = _ssh_run(ssh, server, ["test", "-x", sys.executable])
    if r.returncode != 0:
        return None, (f"server {server.name}: the project is not at {REPO} there "
                      f"({sys.executable} is missing): put the same checkout at the same "
                      "path on every server and run sudo ./setup.sh in it")
    r = _ssh_run(ssh, server, worker_argv(server, "--probe", toward), timeout=60)
    try:
        doc = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, (f"server {server.name}: the project's probe failed there: "
                      f"{(r.stderr or r.stdout).strip()[-300:]}")
    return doc, None


def preflight(servers, ssh, roce_mtu, toward_of):
    """Check every server (in parallel); raise one EnvironmentProblem naming the first
    problem.  ``toward_of``: {server name: this machine's address toward it}.
    Returns ({server name: its probe document}, this machine's ``worker.versions``)."""
    docs, problems = {}, {}

    def one(s):
        docs[s.name], problems[s.name] = _check_one(ssh, s, toward_of[s.name])
    threads = [threading.Thread(target=one, args=(s,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in servers:
        if problems[s.name]:
            raise EnvironmentProblem(problems[s.name])
    here = versions()
    judge(servers, docs, here, toward_of, roce_mtu)
    return docs, here


def judge(servers, docs, here, toward_of, roce_mtu):
    """Raise one EnvironmentProblem (or ConfigError, for the MTU) for the first server
    whose probe document (``worker.probe``) falls short of ``here``, this machine's."""
    for s in servers:
        d = docs[s.name]
        if not d["root"]:
            raise EnvironmentProblem(f"server {s.name}: the worker does not run as root")
        if d["missing"] or not d["ovs"] or not d["mininet"]:
            lacks = d["missing"] + (["Open vSwitch"] if not d["ovs"] else []) \
                + (["Mininet"] if not d["mininet"] else [])
            raise EnvironmentProblem(f"server {s.name} lacks {', '.join(lacks)}: run sudo "
                                     f"./setup.sh in {REPO} there")
        for key, what in (("project", "the project's code"), ("ovs", "Open vSwitch"),
                          ("mininet", "Mininet"), ("python", "Python")):
            if d[key] != here[key]:
                raise EnvironmentProblem(
                    f"server {s.name} runs {what} {d[key]}, this machine {here[key]}: "
                    "every server needs the same versions (same checkout, same setup.sh)")
        if "vxlan" not in d.get("tunnels", ()):
            raise EnvironmentProblem(
                f"server {s.name}: its kernel cannot make VXLAN devices (it has: "
                f"{', '.join(d.get('tunnels') or ['no Ethernet tunnel'])}); links between "
                "servers are VXLAN tunnels: load the vxlan module there")
        if d["ovs_netdev"]:
            raise EnvironmentProblem(
                f"server {s.name}: its own Open vSwitch has userspace bridges (ovs-netdev "
                "exists), which would clash with the run's: remove them there")
        if (d.get("wmem_default") or 0) < MIN_SEND_BUFFER:
            raise EnvironmentProblem(
                f"server {s.name}: net.core.wmem_default is {d.get('wmem_default')}: frames "
                "queued in switch-port shapers would be dropped silently; run sudo "
                "./setup.sh there")
        if d["underlay_mtu"] is None:
            raise EnvironmentProblem(f"server {s.name}: no route back to "
                                     f"{toward_of[s.name]} (the controller's address)")
        cluster.check_mtu(d["underlay_mtu"], roce_mtu, s.name)


def local_address(toward):
    """This machine's source address toward ``toward`` (where its controller listens)."""
    try:
        return netlink.route_get(toward)[0]["prefsrc"]
    except (RunFailed, ValueError, KeyError, IndexError):
        raise EnvironmentProblem(f"this machine has no route to server {toward}")


class RemoteWorker:
    """One server's worker process, started through its cluster-edition shell."""

    def __init__(self, server, ssh, tag, env):
        self.server = server
        self.shell = ServerShell(server, ssh, env=env)
        # attached to the server shell's namespaces, not detached (mnexec -d forks, and
        # the ssh session would end with its parent)
        self.proc = proc.Child(self.shell.popen(
            worker_argv(server, tag=tag), stdin=proc.PIPE, stdout=proc.PIPE, stderr=proc.PIPE,
            mncmd=["mnexec", "-a", str(self.shell.pid)]), f"server {server.name}'s worker")
        self.lock = threading.Lock()
        self.broken = None       # why the worker is given up, once it is
        self.err = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.err.append(line.decode(errors="replace"))
            del self.err[:-40]

    def call(self, op, wait=300, **req):
        """Send one request, return its reply; a worker that does not answer in
        ``wait`` s is given up (its late reply would answer the next request)."""
        with self.lock:
            if self.broken:
                raise RunFailed(f"server {self.server.name}: its worker stopped answering "
                                f"({self.broken})")
            try:
                self.proc.stdin.write((json.dumps({"op": op, **req}) + "\n").encode())
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise self._died(op)
            ready, _, _ = select.select([self.proc.stdout], [], [], wait)
            if not ready:
                self.broken = f"no answer to {op} in {wait} s"
                self._hang_up()
                raise RunFailed(f"server {self.server.name}: {self.broken}")
            line = self.proc.stdout.readline()
        if not line:
            raise self._died(op)
        try:
            reply = json.loads(line)
        except ValueError:
            self.broken = f"a reply that is not JSON: {line[:200]!r}"
            raise RunFailed(f"server {self.server.name}: {op}: {self.broken}")
        if not reply.pop("ok"):
            raise RunFailed(f"server {self.server.name}: {op}: {reply['error']}")
        return reply

    def _died(self, op):
        self.proc.poll()
        tail = "".join(self.err[-8:]).strip()
        return RunFailed(f"server {self.server.name}: its worker ended during {op} "
                         f"(exit {self.proc.returncode}): {tail[-600:]}")

    def _hang_up(self):
        """End the request channel: the worker tears down on its end of input (at once,
        even during a long request: ``worker.serve``)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def close(self, timeout=60):
        """Ask for teardown, then end the ssh session; returns (errors, the ERR lines
        its Open vSwitch wrote about the run's devices).  While another thread's
        request is in flight (Ctrl-C during a build or a collective), or once the
        worker stopped answering, the channel is closed instead: the worker then
        tears down by itself, and this waits for it to exit."""
        errors, problems = [], []
        if self.proc.poll() is None:
            if not self.broken and self.lock.acquire(timeout=0.5):
                self.lock.release()
                try:
                    reply = self.call("teardown", wait=timeout)
                    errors += reply.get("errors", [])
                    problems += reply.get("ovs_problems", [])
                except RunFailed as e:
                    errors.append(str(e))
            self._hang_up()
            try:
                self.proc.wait(timeout=timeout)
            except proc.TimedOut:
                try:
                    self.proc.kill()
                except proc.TimedOut:
                    pass            # stuck: the error below says what is left
                errors.append(f"server {self.server.name}: its worker did not end within "
                              f"{timeout} s (clean --servers removes what it left)")
        try:
            self.shell.stop()
        except OSError:
            pass
        return errors, problems


def make_tls(directory, address):
    """A CA, the controller's key and certificate (for ``address``) and the switches'
    key and certificate, all made for this run; returns {name: path}."""
    if shutil.which("openssl") is None:
        raise EnvironmentProblem("openssl is missing: run sudo ./setup.sh")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    p = {k: os.path.join(directory, f"{k}.pem") for k in
         ("ca-key", "ca", "ctl-key", "ctl", "sw-key", "sw")}
    proc.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
              "-subj", "/CN=fabric-lab run CA", "-keyout", p["ca-key"], "-out", p["ca"]],
             timeout=60)
    for who, cn in (("ctl", f"fabric-lab controller {address}"), ("sw", "fabric-lab switch")):
        csr = os.path.join(directory, f"{who}.csr")
        proc.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
                  "-keyout", p[f"{who}-key"], "-out", csr], timeout=60)
        proc.run(["openssl", "x509", "-req", "-in", csr, "-CA", p["ca"], "-CAkey",
                  p["ca-key"], "-CAcreateserial", "-days", "2", "-out", p[who]], timeout=60)
    return p


def clean_servers(servers, ssh, force=False, log=print):
    """``emulator clean`` on every server: leftovers of dead runs of this project
    only, the server's own state included; returns {server name: its output}."""
    out = {}
    for s in servers:
        r = _ssh_run(ssh, s, remote_argv(s, [
            "env", f"PYTHONPATH={REPO}", sys.executable, "-m", "emulator", "clean",
            *(["--force"] if force else [])]), timeout=300)
        if r.returncode != 0:
            raise EnvironmentProblem(f"clean on server {s.name} failed (exit {r.returncode}): "
                                     f"{(r.stderr or r.stdout).strip()[-300:]}")
        out[s.name] = r.stdout.strip()
        for line in out[s.name].splitlines():
            log(f"{s.name}: {line}")
    return out
