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
