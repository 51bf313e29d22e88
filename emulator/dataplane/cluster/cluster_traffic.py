"""Traffic on a fabric spread over servers: one traffic engine per server, one result.

``RemoteEngines`` drives the engines of one plan (``experiments.workloads.mix``'s,
the drill's probes) as one: each server's worker runs the streams and
receivers of its own hosts.  ``merge_results`` makes one engine document of
theirs: receivers' arrival times moved onto the run's clock
(``shift_times``, from ``ClusterNet.measure_clocks``), counts summed, and
one-way latency merged from the raw histograms where every server reads
one clock (``merge_latency``), else reported as not measured.
"""

from array import array

from emulator.dataplane.cluster.servers import in_parallel
from traffic.engine import LAT_BIN_NS, LAT_BINS, percentiles


class RemoteEngines:
    """The traffic engines of one plan, one per server, driven as one
    (``engine_proc.EngineProcess``'s start, go, result, kill)."""

    def __init__(self, net, plan, name):
        self.net = net
        self.name = name
        self.duration = plan["duration"]
        self.parts = {}
        for key in ("streams", "receivers"):
            for e in plan[key]:
                server = net.where[e["netns"][len("host:"):]]
                part = self.parts.setdefault(server, dict(plan, streams=[], receivers=[]))
                part[key].append(e)
        if plan.get("expect_flows"):
            # each engine waits for the flows its own receivers get
            host_of = {p["ip"]: h["name"] for h in net.topo["hosts"] for p in h["ports"]}
            for part in self.parts.values():
                part["expect_flows"] = None
            for e in plan["streams"]:
                part = self.parts[net.where[host_of[e["dst_ip"]]]]
                part["expect_flows"] = (part["expect_flows"] or 0) + e.get("qps", 1)
        self.started = []

    def start(self, timeout=60):
        if not self.net.shared_clock:      # clocks drift: align them again for this run
            self.net.measure_clocks()

        def one(server):
            self.net.workers[server].call("engine_start", wait=timeout,
                                          plan=self.parts[server], name=self.name)
            self.started.append(server)
        in_parallel(one, list(self.parts))

    def go(self):
        in_parallel(lambda s: self.net.workers[s].call("engine_go"), self.started)

    def wait_line(self, word, timeout):
        """Every engine that expects flows says ``word`` (``flowing``)."""
        waiting = [s for s in self.started if self.parts[s].get("expect_flows")]
        in_parallel(lambda s: self.net.workers[s].call(
            "engine_wait_line", wait=timeout + 10, word=word, timeout=timeout), waiting)

    def result(self, timeout=None):
        timeout = timeout or self.duration + 60
        try:
            docs = in_parallel(lambda s: self.net.workers[s].call(
                "engine_result", wait=timeout + 30, timeout=timeout)["result"], self.started)
        finally:
            self.started = []
        for server, doc in docs.items():        # receivers' times on this machine's clock
            shift_times(doc["receivers"], self.net.clock_offset_ns.get(server, 0))
        return merge_results(list(docs.values()), self.net.shared_clock)

    def kill(self):
        for s in self.started:
            try:
                self.net.workers[s].call("engine_kill", wait=30)
            except Exception:           # noqa: BLE001 the run is ending anyway
                pass
        self.started = []


TIMES = ("t0_ns", "first_arrival_ns", "last_arrival_ns", "start_ns", "end_ns")


def shift_times(doc, offset_ns):
    """Move every arrival time in a receivers document (``TIMES`` keys, at any depth)
    from a server's CLOCK_MONOTONIC onto this machine's."""
    if isinstance(doc, list):
        for x in doc:
            shift_times(x, offset_ns)
    elif isinstance(doc, dict):
        for k, v in doc.items():
            if k in TIMES and isinstance(v, int):
                doc[k] = v - offset_ns
            elif isinstance(v, (dict, list)):
                shift_times(v, offset_ns)


def merge_results(docs, shared_clock):
    """One engine result from several servers' (``traffic.engine``'s document): the
    streams and receivers of all, summed counts, and one-way latency only where
    every server reads one clock."""
    out = {"window_s": max(d["window_s"] for d in docs), "frame_len": docs[0]["frame_len"],
           "streams": [s for d in docs for s in d["streams"]],
           "receivers": [r for d in docs for r in d["receivers"]]}
    engine = {}
    for d in docs:
        for k, v in d["engine"].items():
            if isinstance(v, (int, float)) and k != "cpu_us_per_packet":
                engine[k] = engine.get(k, 0) + v
    engine["cpu_us_per_packet"] = round(engine.get("cpu_s", 0) * 1e6 / max(
        engine.get("sent_packets", 0) + engine.get("received_packets", 0), 1), 3)
    engine["cpu_s"] = max(d["engine"]["cpu_s"] for d in docs)   # the busiest engine's share
    engine["engines"] = len(docs)
    out["engine"] = engine
    if shared_clock:
        out["latency_ms"] = merge_latency([d["latency_hist"] for d in docs],
                                          max(d["latency_ms"]["max"] for d in docs))
    else:
        out["latency_ms"] = {"p50": None, "p99": None, "max": None,
                             "note": "not measured: the servers' clocks are not shared"}
        for r in out["receivers"]:
            r["latency_ms"] = None
            for f in r.get("flows", ()):
                f["latency_us"] = None
    return out


def merge_latency(hists, lat_max_ms):
    """The ``latency_ms`` of several engines' ``latency_hist`` documents together."""
    hist = array("I", bytes(4 * LAT_BINS))
    n = total_ns = 0
    for h in hists:
        for i, c in h["counts"].items():
            hist[int(i)] += c
        n += h["n"]
        total_ns += h["sum_ns"]
    return dict(percentiles(hist, LAT_BIN_NS), mean=round(total_ns / n / 1e6, 3) if n else None,
                max=lat_max_ms)
