"""Live telemetry of a running fabric: a Prometheus endpoint on 127.0.0.1.

Model.  ``run --telemetry PORT`` (with ``--cli`` or any run) serves
``http://127.0.0.1:PORT/metrics`` while the fabric is up, through the
``prometheus_client`` library.  Every scrape reads the kernel and Open
vSwitch afresh (nothing is sampled in between):

* per link direction (``link="leaf1->spine1"``, the egress queue of that
  end): ``fabric_link_tx_bytes_total`` and ``fabric_link_drops_total``
  (the link's shaper), ``fabric_link_backlog_bytes`` (its queue now),
  ``fabric_link_tx_packets_total`` (switch ends, the interface's counter);
* per switch: ``fabric_switch_flows`` and ``fabric_switch_groups`` (what the
  controller installed), and ``fabric_group_bucket_packets_total`` per group
  and bucket: in a fast-failover group, packets on a bucket other than the
  first are switchovers to a backup;
* with ``--ecn``: ``fabric_link_ecn_marked_packets_total`` per switch end,
  the frames its queue marked CE (``dataplane.lossless.ecn``);
* with ``--trim``: ``fabric_link_trimmed_packets_total`` per switch end, the
  UET frames its queue trimmed (``dataplane.lossless.trim``);
* on a lossless fabric, per interface end (``port="leaf1:eth1"``):
  ``fabric_pfc_buffer_bytes`` (its ingress buffer now),
  ``fabric_pfc_pauses_sent_total``, ``fabric_pfc_paused_seconds_total`` (its
  own queue's), ``fabric_pfc_ingress_drops_total`` and
  ``fabric_pfc_watchdog_drops_total`` (dataplane.lossless.pfc);
* ``fabric_fidelity_faithful``: 1 faithful, 0 emulator-bound, -1 not yet
  measured (the run's traffic or collective verdict);
* ``fabric_run_info{run, fabric}``.

Look at it with ``curl -s 127.0.0.1:PORT/metrics | grep fabric_link``, or
point a Prometheus server at it.
"""

import re

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from emulator.dataplane.observe.counters import QueueCounters, link_names
from emulator.errors import RunFailed


def parse_group_stats(text):
    """``ovs-ofctl dump-group-stats`` -> [(group id, bucket index, packets)]."""
    out = []
    for line in text.splitlines():
        m = re.search(r"group_id=(\d+)", line)
        if not m:
            continue
        for i, b in enumerate(re.findall(r"bucket(\d+):packet_count=(\d+)", line)):
            out.append((int(m.group(1)), int(b[0]), int(b[1])))
    return out


def count_flows(text):
    """Flow entries in a ``dump-flows`` reply (each has its actions)."""
    return sum(1 for line in text.splitlines() if "actions=" in line)


def pfc_metrics(rows):
    """The lossless fabric's families from ``Pfc.live()`` rows."""
    fams = [GaugeMetricFamily("fabric_pfc_buffer_bytes", "lossless bytes in the switch that "
                              "entered by this port", labels=["port"]),
            CounterMetricFamily("fabric_pfc_pauses_sent", "pauses this port asked of its peer",
                                labels=["port"]),
            CounterMetricFamily("fabric_pfc_paused_seconds", "time this port's lossless queue "
                                "was paused", labels=["port"]),
            CounterMetricFamily("fabric_pfc_ingress_drops", "lossless frames dropped past "
                                "xoff + headroom", labels=["port"]),
            CounterMetricFamily("fabric_pfc_watchdog_drops", "frames of this port's queue the "
                                "PFC watchdog dropped", labels=["port"])]
    for row in rows:
        for fam, value in zip(fams, row[1:]):
            fam.add_metric([row[0]], value)
    return fams


def adaptive_metrics(entries, backlog):
    """The switches' adaptive routing from ``AdaptiveStage.entries()`` and
    ``backlog()`` (per port "switch:port")."""
    fams = {k: CounterMetricFamily(f"fabric_adaptive_{k}", text, labels=["switch", "port"])
            for k, text in (("frames", "frames the switch's data plane sent by this port"),
                            ("flowlets", "flowlets started on this port"),
                            ("moved_in", "flowlets moved to this port from another"),
                            ("moved_out", "flowlets moved off this port"))}
    queue = GaugeMetricFamily("fabric_adaptive_queue_bytes", "bytes queued at this port as "
                              "the data plane counts them", labels=["switch", "port"])
    for name, e in sorted(entries.items()):
        labels = name.split(":")
        for k, fam in fams.items():
            fam.add_metric(labels, e[k])
        queue.add_metric(labels, backlog.get(name, 0))
    return [*fams.values(), queue]


class FabricCollector:
    """Reads a Session's fabric on every scrape."""

    def __init__(self, session):
        self.s = session
        self.queues = QueueCounters(session.net)
        self.links = link_names(session.topo)

    def collect(self):
        s = self.s
        info = GaugeMetricFamily("fabric_run_info", "the running fabric",
                                 labels=["run", "fabric"])
        info.add_metric([s.topo["run"], s.topo["fabric"]], 1)
        yield info
        tx = CounterMetricFamily("fabric_link_tx_bytes", "bytes sent by the link's shaper",
                                 labels=["link"])
        drops = CounterMetricFamily("fabric_link_drops", "frames dropped by the link's queue",
                                    labels=["link"])
        backlog = GaugeMetricFamily("fabric_link_backlog_bytes", "bytes queued on the link now",
                                    labels=["link"])
        for intf, (queued, dropped, sent) in sorted(self.queues.read().items()):
            link = self.links.get(intf)
            if link is None:
                continue
            tx.add_metric([link], sent)
            drops.add_metric([link], dropped)
            backlog.add_metric([link], queued)
        yield tx
        yield drops
        yield backlog
        pkts = CounterMetricFamily("fabric_link_tx_packets", "packets sent (switch ends)",
                                   labels=["link"])
        for sw in s.topo["switches"]:
            for p in sw["ports"]:
                try:
                    with open(f"{s.net.sysfs(sw['name'])}/class/net/{p['intf']}"
                              "/statistics/tx_packets") as f:
                        pkts.add_metric([self.links[p["intf"]]], int(f.read()))
                except OSError:
                    continue
        yield pkts
        if s.marker is not None and s.ecn is not None:   # --ecn: CE marks per switch port
            yield self._per_link("fabric_link_ecn_marked_packets",
                                 "ECN-capable frames this link's queue marked CE",
                                 s.marker.marks())
        if s.marker is not None and getattr(s, "trim", None) is not None:   # --trim
            yield self._per_link("fabric_link_trimmed_packets",
                                 "UET data frames this link's queue trimmed", s.marker.trims())
        if s.pfc is not None:
            yield from pfc_metrics(s.pfc.live())
        if getattr(s, "adaptive", None) is not None:     # --lb dlb|packet
            yield from adaptive_metrics(s.adaptive.entries(), s.adaptive.backlog())
        flows = GaugeMetricFamily("fabric_switch_flows", "flow entries", labels=["switch"])
        groups = GaugeMetricFamily("fabric_switch_groups", "groups", labels=["switch"])
        buckets = CounterMetricFamily("fabric_group_bucket_packets",
                                      "packets per group bucket (FF: bucket > 0 = backup)",
                                      labels=["switch", "group", "bucket"])
        for sw in s.topo["switches"]:
            try:
                ovs = s.net.ovs(sw["name"])
                fl = ovs.ofctl("dump-flows", sw["bridge"], "--no-stats", timeout=10)
                gs = ovs.ofctl("dump-group-stats", sw["bridge"], timeout=10)
            except RunFailed:
                continue
            flows.add_metric([sw["name"]], count_flows(fl))
            stats = parse_group_stats(gs)
            groups.add_metric([sw["name"]], len({g for g, _, _ in stats}))
            for g, b, n in stats:
                buckets.add_metric([sw["name"], str(g), str(b)], n)
        yield flows
        yield groups
        yield buckets
        fid = GaugeMetricFamily("fabric_fidelity_faithful",
                                "1 faithful, 0 emulator-bound, -1 not measured yet")
        doc = (s.results.get("traffic") or s.results.get("collective") or {}).get("fidelity")
        fid.add_metric([], -1 if doc is None else int(doc["verdict"] == "faithful"))
        yield fid

    def _per_link(self, name, doc, counts):
        """A counter family of ``counts`` ({switch port: n}) labelled by link direction."""
        family = CounterMetricFamily(name, doc, labels=["link"])
        for intf, n in sorted(counts.items()):
            if intf in self.links:
                family.add_metric([self.links[intf]], n)
        return family


class Telemetry:
    """The endpoint: ``start()`` serves it, ``stop()`` closes the socket and sockets."""

    def __init__(self, session, port):
        self.s = session
        self.port = port
        self.server = self.collector = None

    def start(self):
        self.collector = FabricCollector(self.s)
        registry = CollectorRegistry()
        registry.register(self.collector)
        try:
            self.server, _ = start_http_server(self.port, addr="127.0.0.1", registry=registry)
        except OSError as e:
            self.collector.queues.close()
            raise RunFailed(f"telemetry: cannot listen on 127.0.0.1:{self.port}: {e}")
        return self

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/metrics"

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self.collector is not None:
            self.collector.queues.close()
            self.collector = None
