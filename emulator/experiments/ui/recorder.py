"""A run's live series: cheap counters sampled every ``period_s`` (500 ms).

Model.  One daemon thread reads, per sample,

* every interface's root shaper (backlog, drops, bytes sent): one netlink
  qdisc dump per namespace (``observe.counters.QueueCounters``, the
  Prometheus exporter's source);
* the operational state of every switch end of every link from sysfs (a
  file read each: a cut takes the carrier of both veth ends);
* on a lossless fabric the PFC agent's eBPF map (``Pfc.live``): a port
  whose paused time grew since the last sample is marked paused;
* the kernel's input-backlog drops (``/proc/net/softnet_stat``);
* new lines of the run's ``faults.jsonl`` (the fault injector's log): the
  fault and repair markers.

Never ``ovs-ofctl``: every such call is served by Open vSwitch's forwarding
thread, and a page updating at 2 Hz would make the run emulator-bound.  A
sample is ``{t (s since the recorder started), util: {link: [a->b, b->a]}
(share of the link rate), queue: {link: [bytes, bytes]}, down: [links],
paused: [ports], drops: {queue, pfc, softnet} and link_drops: {link: [a->b,
b->a]} (since the start),
rx_mbps: {host: Mbit/s received}}``; times are CLOCK_MONOTONIC, the clock
of the fault log and the traffic engine, so ``t0_ns`` maps one to the other.
"""

import json
import os
import threading
import time

from emulator.dataplane.observe.counters import QueueCounters, softnet_drops

PERIOD_S = 0.5
MAX_SAMPLES = 7200                  # an hour at 2 Hz, then the oldest go


class Recorder:
    """Samples ``session``'s fabric into ``self.samples``; ``listeners`` get each."""

    def __init__(self, session, model, period_s=PERIOD_S, clock=time.monotonic_ns):
        self.s, self.model, self.period_s, self.clock = session, model, period_s, clock
        self.samples, self.events = [], []
        self.cpu_s = 0.0                    # this thread's CPU time spent sampling
        self.listeners = []
        self.lock = threading.Lock()
        self.t0_ns = clock()
        self._stop = threading.Event()
        self._thread = None
        self._queues = None
        self._prev = None
        self._base = None
        self._fault_log = os.path.join(session.dir, "faults.jsonl")
        self._fault_pos = 0
        # a host receives what its switch's end of a host link sends (rails summed)
        self._rx = [(lk["ba"], lk["a"]) for lk in model["links"] if ":" in lk["ab"]]
        self._sysfs = {sw: session.net.sysfs(sw) for lk in model["links"]
                       for sw, _ in lk["watch"]}

    def start(self):
        self._queues = QueueCounters(self.s.net)
        self._thread = threading.Thread(target=self._run, daemon=True, name="ui-recorder")
        self._thread.start()
        return self

    def stop(self):
        """Stop sampling (one last sample first) and close the netlink sockets."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._queues is not None:
            self._queues.close()
            self._queues = None

    def snapshot(self):
        """(samples, events) so far, copies."""
        with self.lock:
            return list(self.samples), list(self.events)

    def _run(self):
        while True:
            stopping = self._stop.wait(self.period_s)
            cpu = time.thread_time()
            try:
                sample = self.sample()
            except (OSError, ValueError):        # the fabric is going: the run ends
                return
            events = self._new_events()
            self.cpu_s += time.thread_time() - cpu
            with self.lock:
                if sample is not None:
                    self.samples.append(sample)
                    del self.samples[:-MAX_SAMPLES]
                self.events += events
            for notify in list(self.listeners):
                notify(sample, events)
            if stopping:
                return

    def sample(self):
        """One reading; None for the first (it is the baseline of the rates)."""
        now = self.clock()
        q = self._queues.read()
        pfc = self.s.pfc.live() if getattr(self.s, "pfc", None) is not None else []
        soft = softnet_drops()
        cur = {"t": now, "q": q, "pfc": {r[0]: r for r in pfc}, "soft": soft}
        prev, self._prev = self._prev, cur
        if prev is None:
            self._base = cur
            return None
        dt = max((now - prev["t"]) / 1e9, 1e-6)
        util, queue, down, ldrops = {}, {}, [], {}
        for lk in self.model["links"]:
            rate = lk["rate_bps"] or 1
            pair_u, pair_q = [], []
            for intf in (lk["ab"], lk["ba"]):
                a, b = q.get(intf), prev["q"].get(intf)
                pair_u.append(round(max(a[2] - b[2], 0) * 8 / dt / rate, 4) if a and b else 0)
                pair_q.append(a[0] if a else 0)
            util[lk["name"]], queue[lk["name"]] = pair_u, pair_q
            pair_d = [q[i][1] - self._base["q"][i][1] if i in q and i in self._base["q"]
                      else 0 for i in (lk["ab"], lk["ba"])]
            if any(pair_d):
                ldrops[lk["name"]] = pair_d
            if not all(self._up(sw, intf) for sw, intf in lk["watch"]):
                down.append(lk["name"])
        rx = {}
        for intf, host in self._rx:
            a, b = q.get(intf), prev["q"].get(intf)
            if a and b:
                rx[host] = round(rx.get(host, 0) + max(a[2] - b[2], 0) * 8 / dt / 1e6, 3)
        paused = [name for name, r in cur["pfc"].items()
                  if r[3] > prev["pfc"].get(name, r)[3]]
        base = self._base
        drops = {"queue": sum(v[1] - base["q"].get(i, (0, 0, 0))[1] for i, v in q.items()),
                 "pfc": sum(r[4] + r[5] - base["pfc"].get(n, (0,) * 6)[4]
                            - base["pfc"].get(n, (0,) * 6)[5] for n, r in cur["pfc"].items()),
                 "softnet": soft - base["soft"]}
        return {"t": round((now - self.t0_ns) / 1e9, 3), "util": util, "queue": queue,
                "down": down, "paused": paused, "drops": drops, "link_drops": ldrops,
                "rx_mbps": rx}

    def _up(self, sw, intf):
        try:
            with open(f"{self._sysfs[sw]}/class/net/{intf}/operstate") as f:
                return f.read().strip() == "up"
        except OSError:
            return False

    def _new_events(self):
        """Fault-log lines written since the last look, as markers."""
        try:
            with open(self._fault_log, encoding="utf-8") as f:
                f.seek(self._fault_pos)
                text = f.read()
        except FileNotFoundError:
            return []
        end = text.rfind("\n") + 1                # a line being written waits
        self._fault_pos += len(text[:end].encode())
        return [marker(json.loads(line), self.t0_ns) for line in text[:end].splitlines()
                if line.strip()]


def marker(ev, t0_ns):
    """A fault log event as a marker on the page's time axis."""
    return {"t": round((ev["t_ns"] - t0_ns) / 1e9, 3), "t_ns": ev["t_ns"],
            "kind": ev["kind"], "target": ev.get("target")}
