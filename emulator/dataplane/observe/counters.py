"""The counters that tell the network's drops from the emulator's.

A frame lost in a fabric run was dropped in one of these places:

- a link's egress queue overflowed (the TBF shaper of an interface):
  **the network's** behaviour, attributed to that link;
- an OVS port's packet socket overflowed (ovs-vswitchd, one thread for
  every port, did not read in time) -- ``ss`` shows each socket's drops;
- OVS failed to send (its one send socket full): the interface's
  ``tx_dropped`` in the OVS database;
- the kernel's per-CPU backlog of frames handed over a veth overflowed
  (``/proc/net/softnet_stat``, second column);
- the traffic engine did not read its own sockets in time, or fell behind
  its schedule (it reports those itself).

All but the first are **emulation** drops: the machine, not the emulated
network.  ``snapshot`` reads them all at once; ``delta`` subtracts two
snapshots; the CPU use of ovs-vswitchd and of the machine over the same
window comes with them.  Reading is cheap (one ``ss``, one ``ovs-vsctl``,
one netlink qdisc dump per namespace) and changes nothing.
"""

import json
import os
import re
import socket
import threading
import time

from emulator.dataplane.links.shaping import QdiscReader
from emulator.dataplane.ovs.instances import SYSTEM
from emulator.dataplane.system import proc
from traffic.nic.netns import entered

_SS_PORT = re.compile(r"\*:(\S+)\s")
_SS_DROPS = re.compile(r"skmem:\([^)]*\bd(\d+)\)")
CLK_TCK = os.sysconf("SC_CLK_TCK")
# A window this busy had no CPU to spare (19 of 20 ticks of 2 CPUs in 100 ms).
SATURATED = 0.95


def ovs_socket_drops(tag, ovses=None):
    """{interface: drops} of ovs-vswitchd's packet sockets on this run's ports, in
    the namespace of each Open vSwitch of ``ovses`` (default: this one)."""
    out = {}
    for ovs in ovses or [SYSTEM]:
        _socket_drops(proc.run(ovs.in_netns(["ss", "-0", "-m", "-e", "-n", "-p"]),
                               timeout=15), tag, out)
    return out


def _socket_drops(text, tag, out):
    port = None
    for line in text.splitlines():
        m = _SS_PORT.search(line)
        if m and "ovs-vswitchd" in line:
            port = m.group(1)
            continue
        m = _SS_DROPS.search(line)
        if m and port is not None:
            if tag in port:
                out[port] = out.get(port, 0) + int(m.group(1))
            port = None
    return out


def ovs_interface_drops(tag, ovses=None):
    """{interface: (rx_dropped, tx_dropped)} from the OVS databases (of ``ovses``,
    default the machine's), this run's ports."""
    out = {}
    for ovs in ovses or [SYSTEM]:
        _interface_drops(ovs.vsctl("--format=json", "--columns=name,statistics", "list",
                                   "interface", timeout=20), tag, out)
    return out


def _interface_drops(text, tag, out):
    for name, stats in json.loads(text)["data"]:
        if tag not in name:
            continue
        values = dict(stats[1]) if isinstance(stats, list) and stats[0] == "map" else {}
        out[name] = (values.get("rx_dropped", 0), values.get("tx_dropped", 0))
    return out


def softnet_drops(path="/proc/net/softnet_stat"):
    """Frames dropped because a CPU's input backlog was full, all CPUs."""
    with open(path) as f:
        return sum(int(line.split()[1], 16) for line in f if line.strip())


def process_cpu_s(pid):
    """User + system CPU seconds of process ``pid`` (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_cpu(path="/proc/stat"):
    """(busy, total, steal) jiffies of all CPUs since boot.

    Steal is the time the hypervisor ran something else while this virtual
    machine had work: it counts as busy, and it stalls whatever was running,
    the emulator's forwarding included.
    """
    with open(path) as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    steal = values[7] if len(values) > 7 else 0
    return sum(values) - idle, sum(values), steal


def ovs_cpu_s(net):
    """CPU seconds of every ovs-vswitchd carrying ``net``'s switches, or None."""
    total, seen = 0.0, False
    for ovs in net.ovses():
        pid = ovs.vswitchd_pid()
        if pid:
            try:
                total += process_cpu_s(pid)
                seen = True
            except OSError:          # an instance that just died: the run ends
                pass
    return total if seen else None


class QueueCounters:
    """Root-TBF counters of every interface of a fabric: switch ports and host ports.

    One netlink socket per namespace, opened once inside it (a socket keeps
    its namespace), so each read is one dump per namespace.
    """

    def __init__(self, net):
        self.readers = [(None, QdiscReader(), _index_names())]
        for inst in net.instances:
            with entered(inst.netns):
                self.readers.append((None, QdiscReader(), _index_names()))
        for name, host in net.hosts.items():
            with entered(f"/proc/{host.pid}/ns/net"):
                self.readers.append((name, QdiscReader(), _index_names()))

    def read(self):
        """{interface (host ports as 'h1:eth0'): (backlog_bytes, drops, sent_bytes)}."""
        out = {}
        for host, reader, names in self.readers:
            for index, values in reader.read().items():
                intf = names.get(index)
                if intf is not None:
                    out[intf if host is None else f"{host}:{intf}"] = values
        return out

    def close(self):
        for _, reader, _ in self.readers:
            reader.close()


def _index_names():
    return {i: n for i, n in socket.if_nameindex()}


def snapshot(net, queues=None):
    """Every drop counter of the run of ``net`` (a FabricNet), and the CPU clocks;
    a fabric on several servers merges its servers' (``ClusterNet.snapshot``)."""
    if hasattr(net, "snapshot"):
        return net.snapshot()
    tag = net.state.tag
    if queues is None:
        queues = QueueCounters(net)
        try:
            return snapshot(net, queues)
        finally:
            queues.close()
    pfc_drops, pfc_late = (net.pfc.drop_counts() if getattr(net, "pfc", None) is not None
                           else ({}, {}))
    return {
        "t": time.monotonic(),
        "ovs_socket": ovs_socket_drops(tag, net.ovses()),
        "ovs_interface": ovs_interface_drops(tag, net.ovses()),
        "softnet": softnet_drops(),
        "queues": queues.read(),
        "pfc_drops": pfc_drops,
        "pfc_late": pfc_late,
        "ovs_cpu_s": ovs_cpu_s(net),
        "machine": machine_cpu(),
    }


def delta(before, after, topo, active_s=None):
    """What happened between two snapshots, named by link; the input of a verdict.

    ``active_s``: how long traffic flowed within the window (the CPU shares
    are over that time, not over the quiet tail before the second snapshot).
    """
    seconds = max(active_s or (after["t"] - before["t"]), 1e-9)
    link_of = link_names(topo)
    network = {}
    for intf, (_, drops, sent) in after["queues"].items():
        b = before["queues"].get(intf, (0, 0, 0))
        if drops - b[1] > 0:
            name = link_of.get(intf, intf)
            network[name] = network.get(name, 0) + drops - b[1]
    for intf, drops in after.get("pfc_drops", {}).items():   # lossless: at ingress
        n = drops - before.get("pfc_drops", {}).get(intf, 0)
        if n > 0:
            name = link_of.get(intf, intf)
            network[name] = network.get(name, 0) + n
    late = {link_of.get(i, i): n - before.get("pfc_late", {}).get(i, 0)
            for i, n in after.get("pfc_late", {}).items()}
    sock = {i: n - before["ovs_socket"].get(i, 0) for i, n in after["ovs_socket"].items()}
    txd = {i: v[1] - before["ovs_interface"].get(i, (0, 0))[1]
           for i, v in after["ovs_interface"].items()}
    ncpu = os.cpu_count() or 1
    busy = after["machine"][0] - before["machine"][0]
    total = max(after["machine"][1] - before["machine"][1], 1)
    if active_s:
        total = max(min(total, active_s * ncpu * CLK_TCK), 1)
    ovs_cpu = None
    if after["ovs_cpu_s"] is not None and before["ovs_cpu_s"] is not None:
        ovs_cpu = (after["ovs_cpu_s"] - before["ovs_cpu_s"]) / seconds
    return {
        "window_s": round(seconds, 3),
        "network_drops": network,
        "ovs_socket_drops": {link_of.get(i, i): n for i, n in sock.items() if n > 0},
        "ovs_tx_drops": {link_of.get(i, i): n for i, n in txd.items() if n > 0},
        "softnet_drops": after["softnet"] - before["softnet"],
        "pause_late_drops": {k: n for k, n in late.items() if n > 0},
        "ovs_cpu": round(ovs_cpu, 3) if ovs_cpu is not None else None,
        "machine_busy": round(min(busy / total, 1.0), 3),
        "machine_steal": round(min(steal_share(before["machine"], after["machine"]), 1.0), 3),
        "cpus": ncpu,
    }


def busy_share(before, after):
    """Share of all CPU time that was busy between two ``machine_cpu`` readings."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


def steal_share(before, after):
    """Share of all CPU time the hypervisor took between two ``machine_cpu`` readings."""
    if len(before) < 3 or len(after) < 3:
        return 0.0
    total = after[1] - before[1]
    return (after[2] - before[2]) / total if total > 0 else 0.0


class CpuWindows:
    """The machine's CPU in short windows during a measurement (a daemon thread).

    A run's average hides a transient: in a DCQCN incast the machine was
    70-100 % busy in the first 100 ms and the first CNPs took up to 9 ms to
    reach their senders, while the run's average stayed under the 95 % that
    makes a timing emulator-bound.  ``stop()`` returns the summary
    ``delta`` carries: how many windows were saturated, the longest stretch,
    the busiest window and the most stolen one.
    """

    def __init__(self, window_s=0.1, read=machine_cpu, clock=time.monotonic):
        self.window_s, self.read, self.clock = window_s, read, clock
        self.shares = []                     # (busy, steal) of each window
        self.ends = []                       # when each window ended (clock)
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-windows")
        self._thread.start()
        return self

    def _run(self):
        prev = self.read()
        while not self._stop.wait(self.window_s):
            cur = self.read()
            total = cur[1] - prev[1]
            if total > 0:
                self.shares.append((busy_share(prev, cur), steal_share(prev, cur)))
                self.ends.append(self.clock())
            prev = cur

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        return self.summary()

    def summary(self, within=None):
        """``windows_summary`` of every window, or of those overlapping ``within``
        ((start, end) on the clock: the calls a collective reports, not its ranks'
        start-up)."""
        shares = self.shares
        if within is not None:
            start, end = within
            shares = [sh for sh, t in zip(self.shares, self.ends)
                      if t > start and t - self.window_s < end]
        return windows_summary(shares, self.window_s)


def windows_summary(shares, window_s, saturated=SATURATED):
    """{windows, saturated (how many were at least ``saturated`` busy), the longest
    stretch of those, max_busy, max_steal} of (busy, steal) shares per window;
    None without windows."""
    if not shares:
        return None
    run = longest = n = 0
    for busy, _ in shares:
        if busy >= saturated:
            n += 1
            run += 1
            longest = max(longest, run)
        else:
            run = 0
    return {"window_ms": round(window_s * 1e3), "windows": len(shares),
            "saturated_at": saturated, "saturated": n,
            "longest_saturated_ms": round(longest * window_s * 1e3),
            "max_busy": round(max(b for b, _ in shares), 3),
            "max_steal": round(max(s for _, s in shares), 3)}


def link_names(topo):
    """{interface: 'a->b'}: the link direction whose egress queue an interface holds."""
    out = {}
    for sw in topo["switches"]:
        for p in sw["ports"]:
            out[p["intf"]] = f"{sw['name']}->{p['peer']}"
    for h in topo["hosts"]:
        for p in h["ports"]:
            out[f"{h['name']}:{p['port']}"] = f"{h['name']}->{p['switch']}"
    return out


def _window_increases(readings, link_of):
    """Per window between consecutive ``readings`` ({interface: count}), {link: how
    much its count grew} (pure)."""
    out = []
    for a, b in zip(readings, readings[1:]):
        w = {}
        for intf, n in b.items():
            grew = n - a.get(intf, 0)
            if grew > 0:
                name = link_of.get(intf, intf)
                w[name] = w.get(name, 0) + grew
        out.append(w)
    return out


def _second(reading):
    """{interface: its second counter} of a reading of tuples (drops, tx_dropped)."""
    return {intf: v[1] for intf, v in reading.items()}


def window_drops(readings, link_of):
    """Per fault window, {link: queue drops}: ``readings`` are QueueCounters.read()
    results at each fault's start and one at the end (pure)."""
    return _window_increases([_second(r) for r in readings], link_of)


# Open vSwitch writes its interfaces' statistics (tx_dropped) into its database
# every 5 s (other_config:stats-update-interval): a drop shows up to that late.
OVSDB_STATS_S = 5.0


def fault_window_ovs_drops(readings, faulted, link_of, late=None):
    """Of Open vSwitch's drops per port, those within the windows whose fault took
    that link down (pure).  ``readings``: (ovs_socket_drops, ovs_interface_drops)
    at each fault's start and one at the end; ``faulted``: per fault, the link
    names it took down; ``late``: per window, the links whose database counter
    (tx) may still show a fault's drops there (``late_faulted``; default
    ``faulted``: the sockets' counters are read live).  Returns
    {"ovs_socket_drops": {link: n}, "ovs_tx_drops": {link: n}}, the keys of
    ``delta``."""
    late = faulted if late is None else late
    out = {}
    for key, counts, owned in (("ovs_socket_drops", [r[0] for r in readings], faulted),
                               ("ovs_tx_drops", [_second(r[1]) for r in readings], late)):
        out[key] = {}
        for window, links in zip(_window_increases(counts, link_of), owned):
            for name, n in window.items():
                if name in links:
                    out[key][name] = out[key].get(name, 0) + n
    return out


def late_faulted(starts, repairs, faulted, lag_s=OVSDB_STATS_S):
    """Per window (from each fault's start), the links a fault took down that
    ended less than ``lag_s`` before the window began, its own fault's included
    (pure; ``starts`` and ``repairs`` in seconds)."""
    return [set().union(*(faulted[i] for i in range(j + 1)
                          if starts[j] < starts[i] + repairs[i] + lag_s))
            for j in range(min(len(starts), len(faulted)))]


class FaultWindows:
    """A soak's drop counters read at each fault's start and at its end: the
    links' queues (``QueueCounters``) and, on one machine, Open vSwitch's per
    port (on several servers only the queues: the whole run's Open vSwitch
    drops on a faulted link stay its faults')."""

    def __init__(self, net):
        self.net, self.queues = net, QueueCounters(net)
        self.queue_readings, self.ovs_readings, self.times = [], [], []

    def mark(self):
        self.times.append(time.monotonic())
        self.queue_readings.append(self.queues.read())
        if not hasattr(self.net, "snapshot"):
            tag, ovses = self.net.state.tag, self.net.ovses()
            self.ovs_readings.append((ovs_socket_drops(tag, ovses),
                                      ovs_interface_drops(tag, ovses)))

    def queue_drops(self, link_of):
        return window_drops(self.queue_readings, link_of)

    def fault_drops(self, faulted, repairs, link_of, lag_s=OVSDB_STATS_S):
        """``fault_window_ovs_drops`` of the readings (``repairs``: each fault's
        length in seconds; ``lag_s``: how long after its repair a fault still owns
        its links' database counts); None without them."""
        if len(self.ovs_readings) < 2:
            return None
        late = late_faulted(self.times[:-1], repairs, faulted, lag_s)
        return fault_window_ovs_drops(self.ovs_readings, faulted, link_of, late)

    def close(self):
        self.queues.close()
