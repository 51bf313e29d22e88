"""Queues while traffic runs: every measured port's shaper sampled, and Open vSwitch's drops.

``QueueSampler`` reads the TBF shaper of each port (backlog, drops, bytes sent)
in one netlink dump per namespace every ``interval``, on a thread of its own;
``ovs_drops`` reads the drop and error counters Open vSwitch keeps per
interface (frames lost outside the emulated queues: the platform's).
"""

import json
import socket
import threading
import time

from emulator.dataplane.links.shaping import QdiscReader
from traffic.nic.netns import entered


class QueueSampler(threading.Thread):
    """Reads every measured port's shaper (backlog, drops, bytes sent) every ``interval``."""

    def __init__(self, ports, interval, netns_of=None):
        """``netns_of``: {intf: namespace path} of ports outside this namespace (a
        datapath instance's); one qdisc dump per namespace per sample."""
        super().__init__(daemon=True)
        self.ports, self.interval = ports, interval
        netns_of = netns_of or {}
        self.readers = {}              # namespace -> (reader, [(port position, ifindex)])
        for i, p in enumerate(ports):
            ns = netns_of.get(p["intf"])
            with entered(ns):
                if ns not in self.readers:
                    self.readers[ns] = (QdiscReader(), [])
                self.readers[ns][1].append((i, socket.if_nametoindex(p["intf"])))
        self.times = []
        self.backlog = [[] for _ in ports]
        self.sent = [[] for _ in ports]
        self.drops = [[] for _ in ports]
        self.halt = threading.Event()
        self.error = None
        self.read_s = 0.0

    def sample(self):
        t0 = time.monotonic()
        row = [(0, 0, 0)] * len(self.ports)
        for reader, where in self.readers.values():
            stats = reader.read()
            for i, ix in where:
                row[i] = stats.get(ix, (0, 0, 0))
        self.read_s += time.monotonic() - t0
        self.times.append(t0)
        for i, (b, d, s) in enumerate(row):
            self.backlog[i].append(b)
            self.drops[i].append(d)
            self.sent[i].append(s)

    def run(self):
        try:
            while not self.halt.is_set():
                self.sample()
                self.halt.wait(self.interval)
        except Exception as e:      # reported by stop(), never swallowed
            self.error = e

    def stop(self):
        self.halt.set()
        self.join(timeout=10)
        try:
            if self.error is not None:
                raise self.error
            self.sample()
        finally:
            for reader, _ in self.readers.values():
                reader.close()


def ovs_drops(intfs, net):
    """{intf: {counter: n}} of the nonzero drop/error counters OVS keeps for ``intfs``
    (in every Open vSwitch carrying ``net``)."""
    data = []
    for ovs in net.ovses():
        data += json.loads(ovs.vsctl("--format=json", "--columns=name,statistics", "list",
                                     "interface", timeout=20))["data"]
    want, out = set(intfs), {}
    for name, stats in data:
        if name in want:
            bad = {k: v for k, v in stats[1] if ("drop" in k or "error" in k) and v}
            if bad:
                out[name] = bad
    return out
