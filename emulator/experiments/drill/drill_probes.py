"""The drill's probes: which flows, at which rate, on which paths (no traffic here).

``--probes paths`` (the default): the first host of every leaf probes the
host at its position on the next leaf, one flow per equal-cost path between
the two leaves; each flow's UDP source port (from its QPN) is chosen by
tracing candidates through the installed flows (``ofproto/trace``, hop by
hop), so every leaf uplink and every spine downlink on those paths carries
one probe flow.  ``--probes hosts``: every host, ``--qps`` hashed flows.
The rate is one packet per ``--resolution``, lowered (and said so) when the
probes would offer more than half of the calibrated budget: a drill at the
edge of the budget measures the machine (a stalled Open vSwitch main thread
delays BFD past its detection time and takes healthy links down).
Paths are lists ``["h1:eth0", "leaf1:eth3", "spine2:eth1", "leaf2:eth1", "h2"]``:
the port each node is left by, then the host reached.
"""

import re

from emulator.dataplane.ovs.instances import SYSTEM
from emulator.errors import ConfigError, RunFailed

def parse_rails(text):
    """``all`` or a comma list of rail numbers (from 1) -> None or a set."""
    if text in (None, "all"):
        return None
    try:
        rails = {int(x) for x in text.split(",") if x.strip()}
    except ValueError:
        rails = set()
    if not rails or min(rails) < 1:
        raise ConfigError("--rails", f"{text!r}: all, or rail numbers from 1 (e.g. 2 or 1,2)")
    return rails


PROBE_SETS = ("paths", "hosts")
HALF_BUDGET = 0.5           # the probes' default load: at most this share of the budget
PATH_QPN_BASE = 0x4000      # --probes paths: candidate QPNs per pair from here
PATH_CANDIDATES = 32


def probe_pairs(topo, qps, rails=None, per_leaf=False):
    """[(src host view, dst host view, first flow id, qpns)] across leaves, per rail.

    The pairs are ``workload.rail_pairs``: on every rail (``rails``, numbers
    from 1, restricts them), each host to the host at its position on the
    next leaf of that rail; the views carry the rail's port.  ``per_leaf``:
    only the first host of every leaf (per rail).  ``qpns``: ``qps``
    consecutive QP numbers, one flow (UDP source port) each.
    """
    from emulator.experiments.workloads.workload import rail_pairs
    n_rails = max(len(h["ports"]) for h in topo["hosts"])
    if rails is not None and max(rails) > n_rails:
        raise ConfigError("--rails", f"rail {max(rails)}: the hosts have {n_rails} port(s)")
    pairs = rail_pairs(topo, rails)
    if per_leaf:
        seen, first = set(), []
        for src, dst in pairs:
            key = (src["ports"][0]["switch"], src["ports"][0]["port"])
            if key not in seen:
                seen.add(key)
                first.append((src, dst))
        pairs = first
    return [(s, d, i * qps, tuple(range(0x100 + i * qps, 0x100 + (i + 1) * qps)))
            for i, (s, d) in enumerate(pairs)]


def planned_flows(topo, probes, qps, rails=None):
    """[(src, dst, flows)] the drill will probe, before anything is built: with
    ``paths``, one flow per equal-cost path of each pair (at most ``qps``)."""
    from emulator.experiments.probe.prober import ecmp_width
    if probes == "hosts":
        return [(s, d, len(q)) for s, d, _, q in probe_pairs(topo, qps or 4, rails)]
    out = []
    for s, d, _, _ in probe_pairs(topo, 1, rails, per_leaf=True):
        width = max(ecmp_width(topo, s["ports"][0]["switch"], d["ports"][0]["switch"]), 1)
        out.append((s, d, min(width, qps) if qps else width))
    return out


def probe_rate(topo, planned, frame_len, resolution_ms, budget_doc, pps=None):
    """(pps per flow, note or None): one packet per ``resolution_ms``, lowered so the
    probes offer at most half of ``budget_doc``'s switch-hop packets/s; ``pps`` as given."""
    from emulator.experiments import budget
    if pps is not None:
        return pps, None
    want = 1e3 / resolution_ms
    if budget_doc is None:
        return want, None
    hop_flows = sum(n * budget.path_hops(topo, s, d) for s, d, n in planned)
    cap = HALF_BUDGET * budget_doc["hop_pps"] / max(hop_flows, 1)
    if want <= cap:
        return want, None
    got = max(1.0, float(int(cap)))
    return got, (f"probe rate lowered to {got:g} pps per flow ({1e3 / got:.2f} ms "
                 f"resolution, asked {resolution_ms:g} ms): {hop_flows} flow-hops at "
                 f"{want:g} pps would take more than half of this machine's budget "
                 f"({budget_doc['hop_pps'] / 1e3:.1f}k switch-hop packets/s); --pps sets "
                 "the rate anyway")


def path_pairs(s, planned):
    """Pairs (as ``probe_pairs``) whose QPNs take distinct paths, and {flow key: path}:
    candidate QPNs are traced (``ofproto/trace``, hop by hop) until each pair has its
    planned number of distinct complete paths (or the candidates run out)."""
    from emulator.experiments.probe.prober import choose
    from traffic.roce.frames import udp_sport
    pairs, paths, flow = [], {}, 0
    for i, (src, dst, want) in enumerate(planned):
        hp, dp = src["ports"][0], dst["ports"][0]
        traced = {}
        for c in range(PATH_CANDIDATES):
            qpn = PATH_QPN_BASE + i * PATH_CANDIDATES + c
            traced[qpn] = trace_path(s.topo, src["name"], hp, dp, udp_sport(qpn, qpn), s.net)
            if len(choose(traced)) >= want:
                break
        chosen = list(choose(traced).items())[:want]
        if not chosen:
            raise RunFailed(f"no probe from {src['name']} reaches {dst['name']} "
                            "(ofproto/trace): the fabric is not routed")
        pairs.append((src, dst, flow, tuple(q for q, _ in chosen)))
        for k, (_, path) in enumerate(chosen):
            paths[f"{hp['ip']}#{flow + k}"] = path
        flow += len(chosen)
    return pairs, paths


def hop(node, port):
    """A path entry: ``node:port`` (the port a packet leaves ``node`` by)."""
    return f"{node}:{port}"


def trace_path(topo, src_name, hp, dp, sport, net=None, first=None):
    """The path of one RoCEv2 flow (``hp`` -> ``dp`` host ports, UDP source port
    ``sport``) by ``ofproto/trace`` hop by hop (see ``flow_paths``), each asked of
    the Open vSwitch carrying that switch in ``net`` (default: the machine's);
    ``first``: the port it leaves its first switch by, if that switch's data
    plane chose it (adaptive routing), traced on from there."""
    sw = {x["name"]: x for x in topo["switches"]}
    hosts = {h["name"] for h in topo["hosts"]}
    node, in_port, path = hp["switch"], hp["switch_port"], [hop(src_name, hp["port"])]
    while node in sw and len(path) <= len(sw):
        flow = (f"in_port={in_port},udp,dl_src={hp['mac']},dl_dst={dp['mac']},"
                f"nw_src={hp['ip']},nw_dst={dp['ip']},nw_ttl=64,"
                f"udp_src={sport},udp_dst=4791")
        if first is not None and len(path) == 1:
            outs = [first]
        else:
            text = (net.ovs(node) if net else SYSTEM).appctl("ofproto/trace",
                                                             sw[node]["bridge"], flow)
            outs = re.findall(r"\boutput:(\d+)", text)
        if not outs:
            break
        port = next(p for p in sw[node]["ports"] if p["port"] == int(outs[-1]))
        path.append(hop(node, port["name"]))
        node, in_port = port["peer"], port["peer_port"]
    if node in hosts:
        path.append(node)
    return path


def flow_paths(s, pairs, qps=None):
    """{flow key: path} by ofproto/trace hop by hop.

    A path is ``["h1:eth0", "leaf1:eth3", "spine2:eth1", "leaf2:eth1", "h2"]``:
    the source host and the port it sends by, every switch with the port the
    flow leaves it by (a bonded host's NIC switch included), and the host it
    reaches (missing if the trace ends in a drop).
    """
    from traffic.roce.frames import udp_sport
    out = {}
    for src, dst, first, qpns in pairs:
        hp, dp = src["ports"][0], dst["ports"][0]
        for q, qpn in enumerate(qpns):
            out[f"{hp['ip']}#{first + q}"] = trace_path(
                s.topo, src["name"], hp, dp, udp_sport(qpn, qpn), s.net)
    return out


def link_ends(target, topo):
    """{(node, port name)}: both ends of the link a fault names (``faults.parse_link``)."""
    from emulator.dataplane.faults import parse_link
    (a, port), b = parse_link(target, topo) if isinstance(target, str) else target
    peer = port["peer_port"]
    return {(a, port["name"]), (b, peer if port["peer_kind"] == "host" else f"eth{peer}")}


def crosses(path, events, topo):
    """True if ``path`` (``flow_paths``) leaves a node by a link the schedule touches,
    or passes through a switch it crashes."""
    hops = {tuple(h.rsplit(":", 1)) for h in path if ":" in h}
    nodes = {h.rsplit(":", 1)[0] for h in path}
    for ev in events:
        if ev.action in ("deadlock", "deadlock_stop"):
            return True                         # a deadlock may stop any flow
        if ev.action in ("pfc_storm", "pfc_storm_stop"):
            from emulator.fabric.lossless import paused_hop
            if paused_hop(ev.target, topo) in hops:
                return True
        elif ev.action in ("crash", "recover"):
            if ev.target in nodes:
                return True
        elif ev.action != "controller":
            if hops & link_ends(ev.target, topo):
                return True
    return False


def fault_ports(events, topo):
    """{(dpid, port)} of the switch ports a schedule's faults may take down: both ends of
    a faulted link, every port of a crashed switch and the ports facing it."""
    dpid = {sw["name"]: sw["dpid"] for sw in topo["switches"]}
    out = set()
    for ev in events:
        if ev.action in ("pfc_storm", "pfc_storm_stop", "deadlock", "deadlock_stop"):
            continue                            # pauses and routes: no port goes down
        if ev.action in ("crash", "recover"):
            for sw in topo["switches"]:
                for p in sw["ports"]:
                    if ev.target in (sw["name"], p["peer"]):
                        out.add((sw["dpid"], p["port"]))
        elif ev.action != "controller":
            for node, port in link_ends(ev.target, topo):
                if node in dpid:
                    out.add((dpid[node], int(port[len("eth"):])))
    return out


def unexpected_downs(converged, since, expected, topo):
    """Links (``a-b``) with a port that went down after ``since`` (monotonic s) but is
    not in ``expected`` (``fault_ports``)."""
    where = {(sw["dpid"], p["port"]): "-".join(sorted((sw["name"], p["peer"])))
             for sw in topo["switches"] for p in sw["ports"]}
    return {where.get((ev["dpid"], ev["port"]), f"{ev['dpid']:x}:{ev['port']}")
            for ev in converged if ev.get("event") == "port" and ev.get("up") is False
            and ev.get("t_event", 0) >= since and (ev["dpid"], ev["port"]) not in expected}


def path_links(path, topo):
    """The links (``a->b``, as the queue counters name them) a traced path leaves its
    nodes by (``drill_probes.trace_path``)."""
    peer = {(sw["name"], p["name"]): p["peer"] for sw in topo["switches"]
            for p in sw["ports"]}
    peer.update({(h["name"], p["port"]): p["switch"] for h in topo["hosts"]
                 for p in h["ports"]})
    out = []
    for h in path:
        if ":" in h:
            node, port = h.rsplit(":", 1)
            if (node, port) in peer:
                out.append(f"{node}->{peer[node, port]}")
    return out


def ecmp_span(path, topo):
    """Every hop (``node:port``) of every shortest path from a traced path's source
    host to its destination host, and the destination: the paths the flow may be
    hashed onto.  A repair modifies a select group in place and its buckets are
    renumbered (no resilient hashing), so a fault on any of them may move the flow."""
    if len(path) < 2 or ":" in path[-1]:
        return list(path)                   # the trace ended in a drop: what it saw
    src, dst = path[0].rsplit(":", 1)[0], path[-1]
    adj = {}
    for sw in topo["switches"]:
        for p in sw["ports"]:
            adj.setdefault(sw["name"], []).append((p["name"], p["peer"]))
    for h in topo["hosts"]:
        for p in h["ports"]:
            adj.setdefault(h["name"], []).append((p["port"], p["switch"]))

    def dist(start):
        d, todo = {start: 0}, [start]
        for node in todo:
            for _, nxt in adj.get(node, ()):
                if nxt not in d:
                    d[nxt] = d[node] + 1
                    todo.append(nxt)
        return d
    ds, dt = dist(src), dist(dst)
    if dst not in ds:
        return list(path)
    return [hop(u, port) for u, ports in adj.items() for port, v in ports
            if u in ds and v in dt and ds[u] + 1 + dt[v] == ds[dst]] + [dst]
