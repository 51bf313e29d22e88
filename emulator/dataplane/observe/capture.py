"""Packet capture of a running fabric: one pcap per interface, bounded in size.

Model.  ``--capture NODE[:PORT][,...]`` names interfaces by the fabric's own
names: a host and its port (``h1``, ``h1:eth0``) or a switch and its port
(``leaf1``, ``leaf1:eth3``, the name ``show`` prints); a node without a port
means all its ports.  Each interface gets one ``tcpdump`` (a switch port's
veth in the root namespace, a host's port inside the host's namespace),
started once the fabric is reachable and stopped (SIGINT, so the file is
complete) before teardown.  Every process carries the run's tag, so
``clean`` finds one left behind.  Files are ``capture-<node>-<port>.pcap``
in the results directory, each at most ``max_mb`` MB: tcpdump stops after
that many full-size frames.  RoCEv2 frames decode in tshark/Wireshark as
InfiniBand (BTH, ICRC).
"""

import os
import signal
import time

from emulator.dataplane.system.proc import DEVNULL, PIPE, Child, TimedOut
from emulator.errors import ConfigError, RunFailed

DEFAULT_MAX_MB = 20


def parse(text, topo):
    """``NODE[:PORT][,...]`` -> [(node, port name)] in the plan's terms."""
    if not text:
        return []
    hosts = {h["name"]: [p["port"] for p in h["ports"]] for h in topo["hosts"]}
    switches = {s["name"]: [p["name"] for p in s["ports"]] for s in topo["switches"]}
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        node, _, port = item.partition(":")
        ports = hosts.get(node, switches.get(node))
        if ports is None:
            raise ConfigError("--capture", f"unknown node {node!r}: use a host or switch "
                                           "name, e.g. h1 or leaf1:eth3")
        if port and port not in ports:
            raise ConfigError("--capture", f"{node} has no port {port!r}; its ports: "
                                           + ", ".join(ports))
        for p in ([port] if port else ports):
            if (node, p) not in out:
                out.append((node, p))
    return out


def interface(topo, net, node, port):
    """(argv prefix that enters the node's namespace, interface name)."""
    for h in topo["hosts"]:
        if h["name"] == node:
            return ["mnexec", "-a", str(net.hosts[node].pid)], port
    sw = next(s for s in topo["switches"] if s["name"] == node)
    return net.ovs(node).in_netns([]), next(p["intf"] for p in sw["ports"]
                                           if p["name"] == port)


class Capture:
    """tcpdump on each chosen interface of a Session's fabric."""

    def __init__(self, session, specs, max_mb=DEFAULT_MAX_MB, frame_len=4224):
        self.s = session
        self.specs = specs
        self.count = max(100, int(max_mb * 1e6 // (frame_len + 16)))
        self.procs = []
        self.files = []

    def start(self, timeout=10.0):
        for node, port in self.specs:
            enter, intf = interface(self.s.topo, self.s.net, node, port)
            path = os.path.join(self.s.dir, f"capture-{node}-{port}.pcap")
            # --immediate-mode: a frame is written when it arrives, not when a ring
            # block retires (up to 1 s later; a stop in between would lose it)
            p = Child.start(enter + ["tcpdump", "-i", intf, "-w", path, "-U", "-Z", "root",
                                     "--immediate-mode",
                                     "-c", str(self.count), "-n"], f"tcpdump on {node}:{port}",
                            stdout=DEVNULL, stderr=PIPE, text=True, env=self.s.child_env())
            self.procs.append((p, path))
            # tcpdump says "listening on" once its socket is open: wait for it
            deadline = time.monotonic() + timeout
            line = ""
            while "listening on" not in line:
                line = p.stderr.readline()
                if not line and p.poll() is not None:
                    raise RunFailed(f"tcpdump on {node}:{port} exited {p.returncode}")
                if time.monotonic() > deadline:
                    raise RunFailed(f"tcpdump on {node}:{port} did not start in {timeout}s")
            self.files.append(path)
        return self

    def stop(self, timeout=10.0):
        """SIGINT every tcpdump (it completes its file); returns {file: packets}."""
        out = {}
        for p, path in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p, path in self.procs:
            try:
                _, err = p.communicate(timeout=timeout)
            except TimedOut:
                p.kill()
                _, err = p.communicate(timeout=5)
            captured = [ln for ln in (err or "").splitlines() if "packets captured" in ln]
            out[os.path.basename(path)] = int(captured[0].split()[0]) if captured else None
        self.procs = []
        return out
