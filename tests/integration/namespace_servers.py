"""Servers for multi-server runs, made on this machine: each a network namespace
with its own sshd, an underlay address on a bridge this harness creates, root
key login with a key made for the test, and its own /run/fabric-lab (a private
directory mounted over it for the sshd and everything it starts: a server's
runs keep their state apart from the other servers' and this machine's).  Traffic goes only to addresses
inside those namespaces.  Everything is named ``tsrv<id>...`` and removed by
``close``.

Run by hand: ``python tests/integration/namespace_servers.py 2`` prints the
``--servers`` and ``--ssh-config`` options to use and waits for Enter.
"""

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

SSHD = "/usr/sbin/sshd"
STATE = "/run/fabric-lab"


def _run(argv, timeout=30):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def _free_subnet():
    """A third octet of 10.254.X.0/24 that no address of this machine is in."""
    used = _run(["ip", "-o", "-4", "addr"])
    for x in range(200, 250):
        if f" 10.254.{x}." not in used:
            return x
    raise RuntimeError("no free 10.254.X.0/24 for test servers")


class NamespaceServers:
    def __init__(self, n, mtu=9000, subnet=None):
        self.id = secrets.token_hex(2)
        self.n = n
        self.mtu = mtu
        x = subnet if subnet is not None else _free_subnet()
        self.prefix = f"10.254.{x}"
        self.bridge = f"tsrv{self.id}br"
        self.dir = tempfile.mkdtemp(prefix=f"tsrv{self.id}-")
        self.names = [f"tsrv{self.id}n{i}" for i in range(n)]
        self.addresses = [f"{self.prefix}.{10 + i}" for i in range(n)]
        self.sshd = []
        self.local = f"{self.prefix}.1"

    @property
    def servers_arg(self):
        return ",".join(f"root@{a}" for a in self.addresses)

    @property
    def ssh_config(self):
        return os.path.join(self.dir, "ssh_config")

    def start(self):
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self):
        if not os.path.exists(SSHD):
            raise RuntimeError("sshd is missing: sudo ./setup.sh installs openssh-server")
        d = self.dir
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{d}/id"])
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{d}/host_key"])
        shutil.copy(f"{d}/id.pub", f"{d}/authorized_keys")
        with open(f"{d}/host_key.pub") as f:
            hostkey = f.read().split()
        with open(f"{d}/known_hosts", "w") as f:
            for a in self.addresses:
                f.write(f"{a} {hostkey[0]} {hostkey[1]}\n")
        with open(self.ssh_config, "w") as f:
            f.write(f"Host {self.prefix}.*\n  IdentityFile {d}/id\n  IdentitiesOnly yes\n"
                    f"  UserKnownHostsFile {d}/known_hosts\n  StrictHostKeyChecking yes\n"
                    "  LogLevel ERROR\n")
        os.makedirs("/run/sshd", exist_ok=True)
        _run(["ip", "link", "add", self.bridge, "mtu", str(self.mtu), "type", "bridge"])
        _run(["ip", "addr", "add", f"{self.local}/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        for i, (ns, addr) in enumerate(zip(self.names, self.addresses)):
            _run(["ip", "netns", "add", ns])
            outer = f"tsrv{self.id}v{i}"
            _run(["ip", "link", "add", outer, "mtu", str(self.mtu), "type", "veth", "peer",
                  "name", "eth0", "mtu", str(self.mtu), "netns", ns])
            _run(["ip", "link", "set", outer, "master", self.bridge, "up"])
            for argv in (["ip", "addr", "add", f"{addr}/24", "dev", "eth0"],
                         ["ip", "link", "set", "eth0", "up"], ["ip", "link", "set", "lo", "up"]):
                _run(["ip", "netns", "exec", ns, *argv])
            cfg = f"{d}/sshd_config{i}"
            with open(cfg, "w") as f:
                f.write(f"ListenAddress {addr}\nHostKey {d}/host_key\n"
                        f"AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin "
                        "prohibit-password\nPasswordAuthentication no\nUsePAM no\n"
                        f"PidFile {d}/sshd{i}.pid\nStrictModes no\nUseDNS no\n"
                        "MaxSessions 200\nMaxStartups 200\nAcceptEnv none\n")
            log = open(f"{d}/sshd{i}.log", "w")
            run = self.run_dir(i)
            os.makedirs(run)
            os.makedirs(STATE, exist_ok=True)
            # ip netns exec gives the command a mount namespace of its own (a slave of
            # this one): the bind mount stays in it
            self.sshd.append(subprocess.Popen(
                ["ip", "netns", "exec", ns, "sh", "-c",
                 f"mount --bind {run} {STATE} && exec {SSHD} -D -e -f {cfg}"],
                stdout=log, stderr=log))
        deadline = time.monotonic() + 20
        for addr in self.addresses:
            while True:
                r = subprocess.run(["ssh", "-F", self.ssh_config, "-o", "BatchMode=yes",
                                    "-o", "ConnectTimeout=2", f"root@{addr}", "true"],
                                   capture_output=True, timeout=10)
                if r.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd at {addr} did not answer: {r.stderr}")
                time.sleep(0.1)

    def run_dir(self, i):
        """Server ``i``'s own /run/fabric-lab, as this machine sees it."""
        return os.path.join(self.dir, f"run{i}")

    def kill_sshd(self, i):
        """Stop server ``i``'s sshd (an unreachable server)."""
        p = self.sshd[i]
        if p.poll() is None:
            p.terminate()
            p.wait(timeout=10)

    def close(self):
        for p in self.sshd:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        for ns in self.names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)

    def leftovers(self):
        """What of a run is left in the servers' namespaces: interfaces other than lo
        and eth0, processes in them other than sshd, and state directories."""
        out = []
        for i, ns in enumerate(self.names):
            for root, dirs, files in os.walk(self.run_dir(i)):
                if files or root != self.run_dir(i):     # an empty on-<server> too
                    out.append(f"{ns}: {root} {sorted(files)}")
        for ns in self.names:
            links = _run(["ip", "netns", "exec", ns, "ip", "-o", "link"]).splitlines()
            out += [f"{ns}: {line.split(':')[1].strip()}" for line in links
                    if line.split(":")[1].strip().split("@")[0] not in ("lo", "eth0")]
            pids = _run(["ip", "netns", "pids", ns]).split()
            sshd = {str(p.pid) for p in self.sshd}
            for pid in pids:
                if pid in sshd:
                    continue
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if "sshd" not in cmd:
                    out.append(f"{ns}: pid {pid} {cmd.strip()}")
        return out


if __name__ == "__main__":
    s = NamespaceServers(int(sys.argv[1]) if len(sys.argv) > 1 else 2).start()
    try:
        print(f"--servers {s.servers_arg} --ssh-config {s.ssh_config}", flush=True)
        sys.stdin.readline()
    finally:
        s.close()
