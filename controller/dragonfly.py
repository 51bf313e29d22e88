"""Dragonfly routing: minimal routes of at most one global hop (pure).

No os-ken, no I/O; ``controller.policy`` asks ``grouping`` whether the
topology is a dragonfly and, if so, takes its next hops from here instead
of the plain BFS.

Model.  A topology is a dragonfly when every switch carries a ``pod`` (its
group, from the presets ``dragonfly`` and ``dragonfly-plus``) and some
switch-to-switch link joins two groups: such a link is *global*, the others
*local*.  The plain shortest path is not the dragonfly's minimal route: a
router whose global link lands next to the destination's router reaches it
in two global hops (2 switch hops) where the minimal route takes local,
global, local (3), and those two-global-hop paths load the global links the
fabric's ceilings do not count.  Minimal routing here is the textbook one
(Kim et al., ISCA 2008), hop by hop toward destination switch D in group j:

* at D: the host port;
* in group j: the shortest paths inside the group (a dragonfly's direct
  local link; a dragonfly-plus leaf's spines);
* in another group: the switch's own live global links to group j, if it
  has any; else its shortest local paths toward the switches of its group
  that have one (a router of the group; a dragonfly-plus spine).

Every step either stays in the group moving closer to a gateway or takes
the one global hop, so the routes are loop-free and use at most one global
link.  Where a group has no live global link to group j any more (a cut),
the route falls back to the plain shortest path over the live graph.
"""

from collections import deque

from lab.modes import Routing

from .groups import HASH_FIELDS
from .messages import (
    ETH_TYPE_IPV4,
    OFPP_IN_PORT,
    Bucket,
    FlowMod,
    Group,
    GroupMod,
    Output,
    Selection,
    SetField,
    SwitchState,
    match,
)


def grouping(topo):
    """{dpid: group} when ``topo`` is a dragonfly, else None."""
    pod = {s.dpid: getattr(s, "pod", None) for s in topo.switches}
    if not pod or None in pod.values():
        return None
    if not any(pod[lk.a_dpid] != pod[lk.b_dpid] for lk in topo.links):
        return None
    return pod


def _bfs(adj, targets, allowed):
    """Hops from every switch in ``allowed`` to the nearest of ``targets``, over ``adj``."""
    dist = {t: 0 for t in targets}
    todo = deque(targets)
    while todo:
        node = todo.popleft()
        for _, peer in adj[node]:
            if peer in allowed and peer not in dist:
                dist[peer] = dist[node] + 1
                todo.append(peer)
    return dist


def minimal_routes(topo, adj, group, fallback):
    """{dpid: {host ip: next-hop ports}}: at most one global hop (the module's rule).

    ``adj``: dpid -> [(port, peer dpid)] over live links (policy.live_adjacency);
    ``fallback``: the plain BFS routes, used where a group has lost every
    global link toward the destination's group.
    """
    members = {}
    for dpid, g in group.items():
        members.setdefault(g, set()).add(dpid)
    gateways = {}                    # (group i, group j) -> switches of i with a live link to j
    for dpid, ports in adj.items():
        for _, peer in ports:
            if group[peer] != group[dpid]:
                gateways.setdefault((group[dpid], group[peer]), set()).add(dpid)
    local = {dpid: [(p, q) for p, q in ports if group[q] == group[dpid]]
             for dpid, ports in adj.items()}
    routes = {s.dpid: {} for s in topo.switches}
    toward = {}                      # (group i, dest dpid) -> hop counts inside group i
    for hp in topo.host_ports:
        d, j = hp.dpid, group[hp.dpid]
        if hp.ip not in fallback[d]:
            continue                 # its port is down: nothing reaches it
        for dpid in adj:
            i = group[dpid]
            if dpid == d:
                routes[dpid][hp.ip] = fallback[dpid].get(hp.ip, ())
                continue
            if i == j:
                targets = (d,)
            else:
                mine = tuple(p for p, q in adj[dpid] if group[q] == j)
                if mine:
                    routes[dpid][hp.ip] = mine
                    continue
                targets = tuple(sorted(gateways.get((i, j), ())))
            key = (i, targets)
            if key not in toward:
                toward[key] = _bfs(local, targets, members[i]) if targets else {}
            dist = toward[key]
            if dpid not in dist:
                if hp.ip in fallback[dpid]:
                    routes[dpid][hp.ip] = fallback[dpid][hp.ip]
                continue
            routes[dpid][hp.ip] = tuple(p for p, q in local[dpid]
                                        if dist.get(q) == dist[dpid] - 1)
    return routes


def global_hops(topo, routes, group, src, ip, limit=16):
    """Global links crossed from switch ``src`` to host ``ip`` following the first
    next hop at each switch (a unit-test helper); None if the walk does not arrive."""
    sw, n = src, 0
    dest = next(hp for hp in topo.host_ports if hp.ip == ip)
    for _ in range(limit):
        if sw == dest.dpid:
            return n
        ports = routes[sw].get(ip)
        if not ports:
            return None
        peer, _ = topo.peer_of(sw, ports[0])
        n += group[peer] != group[sw]
        sw = peer
    return None


# ---- Valiant routing ---------------------------------------------------------------
#
# A frame from a host is sent, per flow(let), through an intermediate group k
# drawn from all g groups: a select group at the source switch (one per
# destination switch) with one bucket per group, hashing ip_src, ip_dst,
# udp_src, udp_dst like every ECMP group (the NIC's flowlet entropy changes
# udp_src per flowlet, so each flowlet draws anew).  Drawing the source's or
# the destination's own group is the minimal route (the bucket runs the
# switch's minimal route action).  Any other bucket stamps the frame's
# Ethernet source address with the intermediate group and the phase
# (``marker``: 02:df:00:00:<k>:01) and sends it toward group k.  Every switch
# outside group k forwards a phase-1 frame of group k toward k; a switch of
# group k rewrites the stamp to phase 2 (02:df:00:00:<k>:02) and routes the
# frame minimally by its IPv4 destination.  The Ethernet header is outside
# the RoCEv2 ICRC, L3 switches rewrite the source address anyway, and no
# receiver reads it (peers are known by IP); the IPv4 DSCP, TTL, UDP source
# port and BTH stay untouched.
#
# Priorities: above the routes (1000) and the fast-failover repair flows
# (1050/1100), whose ``in_port, eth_dst`` matches must not catch a phase-1
# frame passing through.

PRIO_TRANSIT = 1200          # eth_src=phase-1 stamp of group k -> toward group k
PRIO_SOURCE = 1210           # in_port=<host port>, ipv4_dst -> the Valiant select group
PRIO_PHASE = 1220            # in group k: eth_src=stamp k, ipv4_dst -> phase 2, minimal route
PRIO_UTURN = 1230            # ... and in_port=<global link to the destination's group>
VALIANT_GROUP_BASE = 1 << 28  # below FF_GROUP_BASE (1 << 30), above the route groups' slots


def check_mode(mode):
    """The Routing member named ``mode``; ValueError naming the choices otherwise."""
    return Routing.parse(mode, "routing mode")


def marker(k, phase):
    """The Ethernet source address carrying intermediate group ``k`` and the phase."""
    if not 0 <= k < 1 << 16 or phase not in (1, 2):
        raise ValueError(f"group {k} / phase {phase}: no stamp")
    return f"02:df:00:{k >> 8 & 0xff:02x}:{k & 0xff:02x}:{phase:02x}"


def stamp_of(mac):
    """(group, phase) of a stamped address, else None (a host's own address)."""
    parts = mac.lower().split(":")
    if parts[:3] != ["02", "df", "00"]:
        return None
    return int(parts[3], 16) << 8 | int(parts[4], 16), int(parts[5], 16)


def toward_group(topo, adj, group, dpid, gk):
    """The port of ``dpid`` toward group ``gk`` (its own global link, else the local
    path to the nearest switch of its group with one), or None."""
    mine = [p for p, q in adj[dpid] if group[q] == gk]
    if mine:
        return mine[0]
    gi = group[dpid]
    members = {d for d, g in group.items() if g == gi}
    local = {d: [(p, q) for p, q in adj[d] if group[q] == gi] for d in members}
    gates = tuple(sorted(d for d in members if any(group[q] == gk for _, q in adj[d])))
    if not gates:
        return None
    dist = _bfs(local, gates, members)
    if dpid not in dist:
        return None
    return next((p for p, q in local[dpid] if dist.get(q) == dist[dpid] - 1), None)


def valiant(topo, live, desired, adj=None, sources=True):
    """``desired`` ({dpid: SwitchState}, the minimal routes) plus Valiant routing;
    ``sources=False`` (UGAL): without the source switches' select groups, the
    data plane stamping the frames it sends non-minimally itself."""
    group = grouping(topo)
    if group is None:
        return desired
    if adj is None:
        adj = {s.dpid: [] for s in topo.switches}
        for lk in topo.links:
            if (lk.a_dpid, lk.a_port) in live and (lk.b_dpid, lk.b_port) in live:
                adj[lk.a_dpid].append((lk.a_port, lk.b_dpid))
                adj[lk.b_dpid].append((lk.b_port, lk.a_dpid))
        for ports in adj.values():
            ports.sort()
    groups = sorted(set(group.values()))
    dests = sorted({hp.dpid for hp in topo.host_ports})
    out = {}
    for sw in topo.switches:
        state = desired[sw.dpid]
        route = {dict(f.match).get("ipv4_dst"): f.actions for f in state.flows
                 if f.priority == 1000 and dict(f.match).get("ipv4_dst")}
        flows, gmods = set(), set()
        gi = group[sw.dpid]
        toward = {gk: toward_group(topo, adj, group, sw.dpid, gk) for gk in groups if gk != gi}
        for gk, port in toward.items():
            if port is not None:
                flows.add(FlowMod(0, PRIO_TRANSIT, match(eth_type=ETH_TYPE_IPV4,
                                                         eth_src=marker(gk, 1)),
                                  (Output(port),)))
        back = {p: group[q] for p, q in adj[sw.dpid] if group[q] != gi}
        for hp in topo.host_ports:
            acts = route.get(hp.ip)
            if acts:
                flows.add(FlowMod(0, PRIO_PHASE, match(eth_type=ETH_TYPE_IPV4,
                                                       eth_src=marker(gi, 1), ipv4_dst=hp.ip),
                                  (SetField("eth_src", marker(gi, 2)),) + tuple(acts)))
            for p, gp in back.items():
                # a frame for the group it came from goes back over its own global link
                # (Valiant of a flow inside one group): a U-turn, which OVS takes only
                # as an output to IN_PORT
                if gp == group[hp.dpid]:
                    flows.add(FlowMod(0, PRIO_UTURN, match(
                        in_port=p, eth_type=ETH_TYPE_IPV4, eth_src=marker(gi, 1),
                        ipv4_dst=hp.ip), (SetField("eth_src", marker(gi, 2)),
                                          Output(OFPP_IN_PORT))))
        hosts = [p for p in sw.ports if p.to_host and (sw.dpid, p.port) in live]
        for d in dests if sources else ():
            if d == sw.dpid or not hosts:
                continue
            ips = [hp.ip for hp in topo.host_ports if hp.dpid == d and route.get(hp.ip)]
            if not ips:
                continue
            buckets = []
            for gk in groups:
                if gk in (gi, group[d]):
                    buckets.append(Bucket(tuple(route[ips[0]])))
                elif toward.get(gk) is not None:
                    buckets.append(Bucket((SetField("eth_src", marker(gk, 1)),
                                           Output(toward[gk]))))
            gid = VALIANT_GROUP_BASE + dests.index(d)
            gmods.add(GroupMod(gid, "select", tuple(buckets),
                               Selection(HASH_FIELDS, sw.hash_seed)))
            for ip in ips:
                for p in hosts:
                    flows.add(FlowMod(0, PRIO_SOURCE, match(in_port=p.port,
                                                            eth_type=ETH_TYPE_IPV4,
                                                            ipv4_dst=ip), (Group(gid),)))
        out[sw.dpid] = SwitchState(state.flows | frozenset(flows),
                                   state.groups | frozenset(gmods))
    return out


def augment(topo, live, desired, mode):
    """``desired`` with the routing ``mode``'s additions (minimal: none; UGAL: the
    Valiant flows past the source, whose choice the data plane makes and stamps)."""
    if check_mode(mode).adaptive:
        return valiant(topo, live, desired, sources=False)
    return valiant(topo, live, desired) if mode == Routing.VALIANT else desired
