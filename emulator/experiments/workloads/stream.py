"""A competing stream during a collective (``compare --stream SRC:DST``).

The stream is best-effort traffic (RoCEv2 frames in DSCP 0, not the class the
switches balance, so neither the controller nor the data plane moves it),
sent by ``traffic send`` from SRC to DST at the full rate of SRC's leaf's
uplinks.  ECMP's hash pins it to one uplink (under ``controller-dlb`` the controller
places it, as any RoCEv2 flow); whatever of the collective shares that uplink
must get out of its way.  It starts ``start_s`` after the
collective's first frames leave SRC's leaf (the collective has started: the
uplinks' counters grew) and lasts ``duration_s``.

While it runs, the egress queue (the TBF's backlog) of every uplink of SRC's
leaf is sampled every ``SAMPLE_S`` with one netlink dump; the report gives the
uplink the stream takes (``ofproto/trace`` of its frame, once, ``TRACE_AFTER_S``
after it started: a placed flow's entry is in by then) and that uplink's
queue percentiles.
"""

import socket
import sys
import threading
import time

from emulator.dataplane.links.shaping import QdiscReader
from emulator.dataplane.system.proc import DEVNULL, TimedOut
from emulator.errors import ConfigError
from emulator.experiments.measure.paths import trace_path
from emulator.experiments.measure.stats import percentile
from emulator.experiments.workloads.collective import REPO
from emulator.fabric.routing.addresses import next_hop_mac
from traffic.nic.netns import entered
from traffic.roce.frames import udp_sport

SAMPLE_S = 0.005
TRACE_AFTER_S = 0.2          # its uplink, traced once a controller has placed it
STREAM_QPN = 0x3F00          # its one QP (and so its UDP source port)
START_BYTES = 1 << 16        # the collective has started: this much left the leaf
                             # (the ranks' start barrier crosses it too, in small frames)


def parse(text, topo):
    """'h3:h6' -> (src host, dst host); ConfigError naming the problem."""
    hosts = {h["name"]: h for h in topo["hosts"]}
    parts = text.split(":")
    if len(parts) != 2 or not all(parts):
        raise ConfigError("--stream", f"{text!r} is not SRC:DST (two hosts)")
    for h in parts:
        if h not in hosts:
            raise ConfigError("--stream", f"unknown host {h!r}")
    src, dst = (hosts[h] for h in parts)
    if src["ports"][0]["switch"] == dst["ports"][0]["switch"]:
        raise ConfigError("--stream", f"{parts[0]} and {parts[1]} share a leaf: the stream "
                                      "must cross the spines")
    return parts[0], parts[1]


def uplinks(topo, leaf):
    """[(port number, interface, rate)] of ``leaf``'s ports to other switches."""
    sw = next(s for s in topo["switches"] if s["name"] == leaf)
    return [(p["port"], p["intf"], p["rate_bps"]) for p in sw["ports"]
            if p["peer_kind"] != "host"]


class Stream:
    """Runs the stream on ``session`` around the collective (a ``with`` block)."""

    def __init__(self, session, src, dst, start_s, duration_s, frame_len):
        hosts = {h["name"]: h for h in session.topo["hosts"]}
        self.s, self.src, self.dst = session, hosts[src], hosts[dst]
        self.leaf = self.src["ports"][0]["switch"]
        self.ups = uplinks(session.topo, self.leaf)
        self.rate = min(r for _, _, r in self.ups)
        self.start_s, self.duration_s, self.frame_len = start_s, duration_s, frame_len
        self.halt = threading.Event()
        self.samples = []                # (t, {port: backlog bytes})
        self.t_on = self.t_off = None
        self.proc = None
        self.error = None
        self.port = None

    def _counters(self):
        c = self.s.net.intf_counters()
        return sum((c.get(intf) or (0,))[0] for _, intf, _ in self.ups)

    def _trace(self):
        path = trace_path(self.s.topo, self.src["name"], self.src["ports"][0],
                          self.dst["ports"][0], udp_sport(STREAM_QPN, STREAM_QPN), self.s.net)
        hop = path[1] if len(path) > 1 else ""
        names = {f"{self.leaf}:eth{p}": p for p, _, _ in self.ups}
        return names.get(hop)

    def _run(self):
        try:
            base = self._counters()
            deadline = time.monotonic() + 120
            while self._counters() - base < START_BYTES:      # the collective began
                if self.halt.wait(0.002) or time.monotonic() > deadline:
                    return
            t_go = time.monotonic() + self.start_s
            hp = self.src["ports"][0]
            argv = [sys.executable, "-m", "traffic", "send", "--intf", hp["port"],
                    "--src-ip", hp["ip"], "--dst-ip", self.dst["ports"][0]["ip"],
                    "--dst-mac", next_hop_mac(hp, self.dst["ports"][0]),
                    "--rate", str(int(self.rate)), "--duration", f"{self.duration_s:.3f}",
                    "--frame-len", str(self.frame_len), "--dscp", "0",
                    "--first-qpn", hex(STREAM_QPN)]
            if self.halt.wait(max(0.0, t_go - time.monotonic())):
                return
            with entered(self.s.net.switch_netns(self.leaf)):   # the leaf's ports' namespace
                idx = self._indexes()
                reader = QdiscReader()
            try:
                self.proc = self.s.net.popen_in(self.src["name"], argv, cwd=REPO,
                                                stdout=DEVNULL,
                                                stderr=DEVNULL)
                self.t_on = time.monotonic()
                while not self.halt.is_set() and self.proc.poll() is None:
                    if self.port is None and time.monotonic() > self.t_on + TRACE_AFTER_S:
                        self.port = self._trace()
                    q = reader.read()
                    self.samples.append((time.monotonic(), {p: q.get(i, (0,))[0]
                                                            for p, i in idx.items()}))
                    self.halt.wait(SAMPLE_S)
            finally:
                reader.close()
            self.t_off = time.monotonic()
        except Exception as e:          # noqa: BLE001 - reported with the run
            self.error = f"{type(e).__name__}: {e}"

    def _indexes(self):
        return {p: socket.if_nametoindex(intf) for p, intf, _ in self.ups}

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True, name="stream")
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.halt.set()
        self._thread.join(timeout=10)
        if self.proc is not None:
            try:
                rc = self.proc.wait(timeout=self.duration_s + 10)
                if rc != 0 and self.error is None:
                    self.error = f"traffic send exited with status {rc}"
            except TimedOut:
                self.proc.kill()
                self.proc.wait(timeout=5)
                self.error = self.error or "traffic send overran its duration"
        return False

    def faulted(self):
        """No link fails under a stream."""
        return set()

    def result(self):
        """The stream as it ran: when, where, and its uplink's queue."""
        q = [sample.get(self.port, 0) for _, sample in self.samples] if self.port else []
        byte_ms = self.rate / 8 / 1e3
        out = {"src": self.src["name"], "dst": self.dst["name"], "rate_bps": self.rate,
               "uplink": f"{self.leaf}:{self.port}" if self.port else None,
               "started": self.t_on is not None, "error": self.error,
               "duration_s": round(self.t_off - self.t_on, 3) if self.t_off else None,
               "samples": len(q)}
        worst = max((percentile([s.get(p, 0) for _, s in self.samples], 99)
                     for p, _, _ in self.ups), default=None) if self.samples else None
        if worst is not None:
            out["worst_queue_p99_ms"] = round(worst / byte_ms, 2)   # any uplink of the leaf
        if q:
            out["queue_p99_bytes"] = round(percentile(q, 99))
            out["queue_p99_ms"] = round(percentile(q, 99) / byte_ms, 2)
            out["queue_p50_ms"] = round(percentile(q, 50) / byte_ms, 2)
        return out
