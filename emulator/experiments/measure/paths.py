"""Traced paths: which links a flow crosses, which it may be hashed onto, which a fault cuts.

A path is ``["h1:eth0", "leaf1:eth3", "spine2:eth1", "leaf2:eth1", "h2"]``: the
source host and the port it sends by, every switch with the port the flow
leaves it by, and the host it reaches (missing if the trace ends in a drop).
``trace_path`` asks Open vSwitch (``ofproto/trace``) hop by hop; the rest is
pure: ``ecmp_width`` and ``ecmp_span`` (the equal-cost paths between two
points), ``choose`` (one flow per distinct path), ``link_ends``, ``crosses``
and ``fault_ports`` (what a fault schedule touches), ``path_links`` (the
queues a path meets, as the counters name them), ``unexpected_downs``.
"""

import re

from emulator.dataplane.faults import parse_link
from emulator.dataplane.ovs.instances import SYSTEM
from emulator.experiments.spec import scenario
from emulator.fabric.lossless import paused_hop
from traffic.ranks.config import qpn
from traffic.roce.frames import udp_sport


def hop(node, port):
    """A path entry: ``node:port`` (the port a packet leaves ``node`` by)."""
    return f"{node}:{port}"


def trace_path(topo, src_name, hp, dp, sport, net=None, first=None):
    """The path of one RoCEv2 flow (``hp`` -> ``dp`` host ports, UDP source port
    ``sport``) by ``ofproto/trace`` hop by hop (see ``flow_paths``), each asked of
    the Open vSwitch carrying that switch in ``net`` (default: the machine's);
    ``first``: the port it leaves its first switch by, if that switch's data
    plane chose it (adaptive routing), traced on from there."""
    if net is not None and getattr(net, "paths", None) is not None:
        return net.paths.path(src_name, hp, dp, sport)     # routers: their kernels' choice
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
    out = {}
    for src, dst, first, qpns in pairs:
        hp, dp = src["ports"][0], dst["ports"][0]
        for q, qpn in enumerate(qpns):
            out[f"{hp['ip']}#{first + q}"] = trace_path(
                s.topo, src["name"], hp, dp, udp_sport(qpn, qpn), s.net)
    return out


def ring_draw(s, topo, hops, qps, job_seed):
    """The traced paths of a ring's cross-leaf connections ``hops`` ([(src, dst)] host
    indices of ``topo``), ``qps`` QPs each with the QP numbers a job of ``job_seed``
    gives them (``traffic.ranks.config.qpn``): the draw ECMP's hash made."""
    hosts = topo["hosts"]
    out = []
    for i, j in hops:
        hp, dp = hosts[i]["ports"][0], hosts[j]["ports"][0]
        for q in range(qps):
            n = qpn(i, j, q, job_seed)
            out.append(trace_path(topo, hosts[i]["name"], hp, dp, udp_sport(n, n), s.net))
    return out


def link_ends(target, topo):
    """{(node, port name)}: both ends of the link a fault names (``faults.parse_link``)."""
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
            if paused_hop(ev.target, topo) in hops:
                return True
        elif ev.action in ("crash", "recover") + scenario.ROUTED_ONLY:
            if ev.target.partition(":")[0] in nodes:
                return True
        elif ev.action != scenario.CONTROLLER:
            if hops & link_ends(ev.target, topo):
                return True
    return False


def fault_ports(events, topo):
    """{(dpid, port)} of the switch ports a schedule's faults may take down: both ends of
    a faulted link, every port of a crashed switch and the ports facing it."""
    dpid = {sw["name"]: sw["dpid"] for sw in topo["switches"]}
    out = set()
    for ev in events:
        if ev.action in ("pfc_storm", "pfc_storm_stop", "deadlock", "deadlock_stop") + \
                scenario.ROUTED_ONLY:
            continue                            # pauses, routes, daemons: no port goes down
        if ev.action in ("crash", "recover"):
            for sw in topo["switches"]:
                for p in sw["ports"]:
                    if ev.target in (sw["name"], p["peer"]):
                        out.add((sw["dpid"], p["port"]))
        elif ev.action != scenario.CONTROLLER:
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


def ecmp_width(topo, a, b):
    """Shortest paths between switches ``a`` and ``b`` over inter-switch links."""
    import networkx as nx
    g = nx.Graph()
    for sw in topo["switches"]:
        for p in sw["ports"]:
            if p["peer_kind"] != "host":
                g.add_edge(sw["name"], p["peer"])
    if a == b:
        return 1
    try:
        return sum(1 for _ in nx.all_shortest_paths(g, a, b))
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        return 0


def choose(traced):
    """{candidate qpn: path} of one pair -> {qpn: path}, one per distinct complete
    path (a path that reaches a host), the lowest qpn of each."""
    out, seen = {}, set()
    for qpn in sorted(traced):
        path = tuple(traced[qpn])
        if path and ":" not in path[-1] and path not in seen:
            seen.add(path)
            out[qpn] = list(path)
    return out
