"""Pure routing policy: topology + port liveness -> desired OpenFlow state.

No os-ken and no I/O. Like Faucet's Valve, functions *return* abstract
messages (controller.messages) in a deterministic order.

The pipeline is one table (0), highest priority first:

  1000  eth_type=ipv4, ipv4_dst=<host port IP>  -> output / ECMP select group
   300  in_port=<fabric port>, arp              -> drop (ARP never crosses the fabric)
   300  in_port=<host port>, arp, arp_tpa=<its own IP> -> drop (no reply to DAD/gratuitous ARP)
   200  arp, arp_op=1, arp_tpa=<host port IP>   -> in-switch ARP reply out IN_PORT
   100  arp                                     -> drop
     0  (table miss)                            -> drop (no packet-in, no flood)

The ARP responder flows go on switches with host ports only, so a host's
ARP request is answered by its own leaf and ARP works with the controller dead.

Routing: shortest paths by hop count over the *live* switch graph (a link is
live when both its ends are in ``live``), computed per destination switch with
a BFS, so any number of tiers works. A switch whose set of next-hop ports
toward a destination has several ports outputs to a select group, hashing
ipv4_src, ipv4_dst, udp_src, udp_dst with the switch's hash_seed as basis.
Buckets watch their output port so OVS skips dead buckets.  A switch has one
group per destination switch and purpose, its id fixed by the topology
(controller.groups): a failure modifies groups in place and leaves the
flows pointing at them alone.

Failover modes (``failover=``, see docs/failover.md):

* ``controller`` (the default here): the above; the controller recomputes on
  port status. Select buckets watch their port, so a leaf already re-hashes
  the flows of a dead uplink over the survivors on its own (rendezvous
  hashing: only the dead bucket's flows move).
* ``fast-failover``: ``controller`` plus local repair where a route has ONE
  next hop toward a switch (a spine toward a leaf in a 2-tier Clos): the flow
  outputs to a fast-failover group [primary, bounce ports...]. A bounce port
  leads to a neighbour Y that can reach the destination without coming back
  (valley routing: spine -> other leaf -> other spine -> leaf). Y gets a
  repair flow, priority 1100, ``in_port=<port facing us>, eth_dst=<dest MAC>``
  -> dec_ttl, then Y's own next hops minus the one back to us. In normal
  operation no packet ever matches it (nothing arrives from an uplink for a
  remote host); dec_ttl bounds any loop a double failure could create.
  Where a port's repair flows mostly share their next hops, one flow at 1050,
  ``in_port=<port>, ip``, repairs them all and only the others keep a flow at
  1100 (``fold_repairs``: a 64-leaf leaf has 8 + 32 instead of 2,016).
  Multi-next-hop routes stay select groups: a select bucket that watches its
  port is already a fast-failover over the other buckets.
* ``none``: no watch ports, no FF groups (and the controller ignores port
  status): nothing repairs, for comparison.
"""

import functools
from collections import Counter, deque

from lab.modes import Failover

from . import dragonfly
from .groups import FF_GROUP_BASE, Slots, SwitchGroups  # noqa: F401 (FF_GROUP_BASE re-exported)
from .messages import (
    ARP_REPLY,
    ARP_REQUEST,
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    OFPP_IN_PORT,
    CopyField,
    DecNwTtl,
    FlowMod,
    Output,
    SetField,
    SwitchState,
    match,
)
from .topology import NIC

DEFAULT_MODE = Failover.default()
PRIO_REPAIR = 1100
PRIO_REPAIR_ANY = 1050       # a port's folded repair flow: below its exceptions, above routes
FOLD_SAVES = 16              # fold a port's repair flows when that saves this many
PRIO_IPV4 = 1000
PRIO_ARP_GUARD = 300
PRIO_ARP_REPLY = 200
PRIO_ARP_DROP = 100
PRIO_MISS = 0
STANDBY = "standby"


def arp_responder_actions(ip, mac):
    """Turn an ARP request for ``ip`` into the reply from ``mac``, back out IN_PORT."""
    return (
        CopyField("eth_src", "eth_dst", 48),     # reply goes to the asker
        SetField("eth_src", mac),
        SetField("arp_op", ARP_REPLY),
        CopyField("arp_sha", "arp_tha", 48),      # order matters: copy the asker's
        CopyField("arp_spa", "arp_tpa", 32),      # addresses before overwriting them
        SetField("arp_sha", mac),
        SetField("arp_spa", ip),
        Output(OFPP_IN_PORT),
    )


def live_adjacency(topo, live, active_only=False):
    """dpid -> [(port, peer dpid)] over links with both ends live, sorted.

    ``active_only``: without standby links (a standby role on either end).
    """
    adj = {s.dpid: [] for s in topo.switches}
    role = {(s.dpid, p.port): p.role for s in topo.switches for p in s.ports} if active_only else {}
    for lk in topo.links:
        if (lk.a_dpid, lk.a_port) in live and (lk.b_dpid, lk.b_port) in live:
            if active_only and STANDBY in (role[(lk.a_dpid, lk.a_port)],
                                           role[(lk.b_dpid, lk.b_port)]):
                continue
            adj[lk.a_dpid].append((lk.a_port, lk.b_dpid))
            adj[lk.b_dpid].append((lk.b_port, lk.a_dpid))
    for ports in adj.values():
        ports.sort()
    return adj


def hop_distances(adj, dst, edge=frozenset()):
    """Hop count from every switch that can reach ``dst`` (BFS).

    Switches in ``edge`` (bonded hosts' NICs) are never transit nodes: a path
    may start or end at one, not pass through it.
    """
    dist, todo = {dst: 0}, deque([dst])
    while todo:
        node = todo.popleft()
        if node in edge and node != dst:
            continue
        for _, peer in adj[node]:
            if peer not in dist:
                dist[peer] = dist[node] + 1
                todo.append(peer)
    return dist


def edge_switches(topo):
    return frozenset(s.dpid for s in topo.switches if s.kind == NIC)


def next_hops(topo, live, active_only=False):
    """{dpid: {host ip: tuple of next-hop ports}} toward every reachable live host port
    (a dragonfly's: at most one global hop, controller.dragonfly)."""
    adj = live_adjacency(topo, live, active_only)
    routes = bfs_next_hops(topo, adj, live)
    group = dragonfly.grouping(topo)
    return routes if group is None else dragonfly.minimal_routes(topo, adj, group, routes)


def bfs_next_hops(topo, adj, live):
    """{dpid: {host ip: next-hop ports}}: every shortest path over ``adj`` to live host ports."""
    edge = edge_switches(topo)
    routes = {s.dpid: {} for s in topo.switches}
    dist_cache = {}
    for hp in topo.host_ports:
        if (hp.dpid, hp.switch_port) not in live:
            continue
        if hp.dpid not in dist_cache:
            dist_cache[hp.dpid] = hop_distances(adj, hp.dpid, edge)
        dist = dist_cache[hp.dpid]
        for dpid, d in dist.items():
            if dpid == hp.dpid:
                routes[dpid][hp.ip] = (hp.switch_port,)
            else:
                routes[dpid][hp.ip] = tuple(
                    port for port, peer in adj[dpid] if dist.get(peer) == d - 1
                    and (peer not in edge or peer == hp.dpid))
    return routes


def repair_plan(topo, live, routes, used=None):
    """Fast-failover backups and the repair flows they need, from all switches' routes.

    Returns (backups, repairs): backups[dpid][ip] = bounce ports (sorted) of a
    single-next-hop route; repairs[dpid][(in_port, ip)] = ports to use for a
    packet bounced in through ``in_port``.  ``used``: the routes installed, if
    they differ from ``routes`` (standby links); a route is backed up only
    where the installed one is the same.
    """
    backups = {s.dpid: {} for s in topo.switches}
    repairs = {s.dpid: {} for s in topo.switches}
    edge = edge_switches(topo)
    for sw in topo.switches:
        for ip, ports in routes[sw.dpid].items():
            if len(ports) != 1 or topo.peer_of(sw.dpid, ports[0]) is None:
                continue
            if used is not None and used[sw.dpid].get(ip) != ports:
                continue          # the switch sends it elsewhere: nothing to back up              # ECMP (select skips dead buckets) or a host port
            bounce = []
            for p in sw.ports:
                if p.to_host or p.port == ports[0] or (sw.dpid, p.port) not in live:
                    continue
                y, back = topo.peer_of(sw.dpid, p.port)
                if (y, back) not in live or y in edge:
                    continue          # a bonded host's NIC forwards nobody's traffic
                y_ports = routes[y].get(ip, ())
                alt = tuple(q for q in y_ports if q != back)
                if not alt:
                    continue          # Y could only send it back to us
                bounce.append(p.port)
                if back in y_ports:   # else Y's normal flow already avoids us
                    repairs[y][(back, ip)] = alt
            if bounce:
                backups[sw.dpid][ip] = tuple(bounce)
    return backups, repairs


def standby_split(topo, every_hop, active):
    """Routes that use standby links only when no active path is left; the standby ports.

    A link with ``role: standby`` (dual-link or dual-ToR active/standby)
    carries traffic only when the destination cannot be reached over active
    links: a switch with an active path (``active``, from the BFS without
    standby links) uses it, any other its shortest live path (``every_hop``).
    Where the active route has ONE port and the shortest paths have other
    ports (toward standby links), those become its fast-failover backups
    (group [primary, standby...], local repair in modes other than none).
    Returns (routes, {dpid: {ip: standby ports}}).
    """
    out, standby = {}, {}
    for sw in topo.switches:
        out[sw.dpid], standby[sw.dpid] = {}, {}
        for ip, ports in every_hop[sw.dpid].items():
            act = active[sw.dpid].get(ip)
            out[sw.dpid][ip] = act or ports
            spare = tuple(p for p in ports if p not in (act or ()))
            if act and spare and len(act) == 1:
                standby[sw.dpid][ip] = spare
    return out, standby


def standby_landing(topo, every_hop, routes, repairs):
    """Repair flows where a bounce lands next to a standby link (dual-ToR active/standby).

    A ToR whose only shortest path to a host is its standby link normally
    sends that host's traffic up, toward the active ToR.  A packet bounced to
    it from above (the active link just died) must go down the standby link
    instead: ``in_port=<uplink>, eth_dst=<host>`` -> the standby port.  In
    normal operation nothing for that host arrives from above.
    """
    for sw in topo.switches:
        role = {p.port: p.role for p in sw.ports}
        for ip, ports in every_hop[sw.dpid].items():
            if routes[sw.dpid].get(ip) == ports or not all(role.get(p) == STANDBY for p in ports):
                continue
            for p in sw.ports:
                if p.to_host or p.port in ports:
                    continue
                peer = topo.by_name.get(p.peer)
                if peer is not None and peer.tier > sw.tier:
                    repairs[sw.dpid][(p.port, ip)] = ports


def merge_standby(backups, standby):
    """Backups with standby ports first, then any bounce ports (``repair_plan``)."""
    out = {dpid: dict(b) for dpid, b in backups.items()}
    for dpid, per_ip in standby.items():
        for ip, spare in per_ip.items():
            rest = tuple(p for p in out.get(dpid, {}).get(ip, ()) if p not in spare)
            out.setdefault(dpid, {})[ip] = spare + rest
    return out


def fold_repairs(repairs, ips, plain=None, folds=None):
    """One switch's repairs {(in_port, ip): ports}, per in_port: {in_port: (ports, rules)}.

    Folded: every IPv4 packet in through in_port is repaired through
    ``ports`` but for the ips in ``rules``: {ip: its own repair ports, or None:
    its route}; ``ips``: every host IP (None: fold nothing).  An ip whose route
    (``plain``: {ip: ports} of routes to a port or select group) is ``ports``
    needs no rule: only bounced packets arrive so; one more dec_ttl bounds them.
    Folded where that saves FOLD_SAVES flows (on a small fabric a cut would
    flip ports between the forms), or, given ``folds``, the in_ports in it;
    unfolded, ``ports`` is None, ``rules`` its repairs.
    """
    plain, by_port, out = plain or {}, {}, {}
    for (q, ip), ports in repairs.items():
        by_port.setdefault(q, {})[ip] = ports
    for q, mine in by_port.items():
        counts = Counter(mine.values())
        common = min(counts, key=lambda ports: (-counts[ports], ports))
        rules = {ip: mine.get(ip) for ip in ips or ()
                 if mine.get(ip, plain.get(ip)) != common}
        fold = ips is not None and (counts[common] - len(rules) - 1 >= FOLD_SAVES
                                    if folds is None else q in folds)
        out[q] = (common, rules) if fold else (None, mine)
    return out


def _switch_state(topo, sw, routes, failover=DEFAULT_MODE, backups=None, repairs=None,
                  arp=(), slots=None, folds=None):
    flows = [FlowMod(0, PRIO_MISS, ()),
             FlowMod(0, PRIO_ARP_DROP, match(eth_type=ETH_TYPE_ARP))]
    own = {(hp.dpid, hp.switch_port): hp for hp in topo.host_ports}
    if any(p.to_host for p in sw.ports):
        for p in sw.ports:
            hp = own.get((sw.dpid, p.port))
            if hp is None:
                flows.append(FlowMod(0, PRIO_ARP_GUARD, match(in_port=p.port, eth_type=ETH_TYPE_ARP)))
            else:
                flows.append(FlowMod(0, PRIO_ARP_GUARD, match(
                    in_port=p.port, eth_type=ETH_TYPE_ARP, arp_tpa=hp.ip)))
        flows += arp or arp_responders(topo)

    backups = backups or {}
    repairs = repairs or {}
    # Without watch ports a select group keeps hashing onto a dead port: mode none.
    groups = SwitchGroups(slots or Slots(topo), sw, watch=failover != Failover.NONE)
    route_acts = {}
    for ip, ports in routes.items():
        if not ports:
            continue                     # no live path: table miss drops it
        act = groups.route(ip, ports, backups.get(ip, ()))
        route_acts[ip] = (act,)
        flows.append(FlowMod(0, PRIO_IPV4, match(eth_type=ETH_TYPE_IPV4, ipv4_dst=ip), (act,)))
    mac_of = {hp.ip: hp.mac for hp in topo.host_ports}
    unique = len(set(mac_of.values())) == len(mac_of)
    plain = {ip: ports for ip, ports in routes.items() if ports and ip not in backups}
    for in_port, (common, rules) in fold_repairs(repairs, mac_of if unique else None,
                                                 plain, folds).items():
        if common is not None:
            flows.append(FlowMod(0, PRIO_REPAIR_ANY, match(in_port=in_port, eth_type=ETH_TYPE_IPV4),
                                 (DecNwTtl(), groups.fold(in_port, common))))
        for ip, ports in rules.items():
            # eth_dst, not ipv4_dst: host MACs are unique too (never rewritten here)
            flows.append(FlowMod(0, PRIO_REPAIR, match(in_port=in_port, eth_type=ETH_TYPE_IPV4,
                                                       eth_dst=mac_of[ip]),
                                 (DecNwTtl(), groups.repair(in_port, ip, ports)) if ports
                                 else route_acts.get(ip, ())))
    return SwitchState(frozenset(flows), groups.entries())


def arp_responders(topo):
    """The ARP responder flows, the same on every switch with host ports."""
    return [FlowMod(0, PRIO_ARP_REPLY, match(eth_type=ETH_TYPE_ARP, arp_op=ARP_REQUEST,
                                             arp_tpa=hp.ip), arp_responder_actions(hp.ip, hp.mac))
            for hp in topo.host_ports]


def check_mode(failover):
    """The Failover member named ``failover``; ValueError naming the choices otherwise."""
    return Failover.parse(failover, "failover mode")


def _plan(topo, live, failover):
    """(routes, backups, repairs) of every switch."""
    every_hop = next_hops(topo, live)
    routes, standby = standby_split(topo, every_hop, next_hops(topo, live, active_only=True))
    backups = repairs = {}
    if failover == Failover.FAST_FAILOVER:
        # bounces may use standby links: they are repair paths too
        backups, repairs = repair_plan(topo, live, every_hop, used=routes)
        standby_landing(topo, every_hop, routes, repairs)
    if failover != Failover.NONE:
        backups = merge_standby(backups, standby)
    return routes, backups, repairs


@functools.lru_cache(maxsize=8)
def healthy_folds(topo, failover, fold_saves):
    """{dpid: in_ports whose repair flows fold with every port live}
    (``fold_saves``: FOLD_SAVES, in the cache key).

    The fold is decided once per topology, not per liveness: a cut elsewhere
    makes a remote leaf's hosts exceptions on every other leaf, and deciding
    again would unfold (and on the restore refold) a whole fabric's repair
    flows for it.  A fold is only a shorter table for the same forwarding
    (tests/unit/test_repair_fold.py), whichever ports are live.
    """
    routes, backups, repairs = _plan(topo, topo.all_ports(), failover)
    mac_of = {hp.ip: hp.mac for hp in topo.host_ports}
    out = {}
    for sw in topo.switches:
        plain = {ip: ports for ip, ports in routes[sw.dpid].items()
                 if ports and ip not in backups.get(sw.dpid, {})}
        out[sw.dpid] = frozenset(q for q, (common, _) in fold_repairs(
            repairs.get(sw.dpid, {}), mac_of, plain).items() if common is not None)
    return out


def desired_state(topo, live, failover=DEFAULT_MODE):
    """{dpid: SwitchState} for every switch, given the set of live (dpid, port)."""
    check_mode(failover)
    live = frozenset(live)
    routes, backups, repairs = _plan(topo, live, failover)
    folds = healthy_folds(topo, failover, FOLD_SAVES) if repairs else {}
    arp, slots = arp_responders(topo), Slots(topo)
    return {sw.dpid: _switch_state(topo, sw, routes[sw.dpid], failover,
                                   backups.get(sw.dpid), repairs.get(sw.dpid), arp, slots,
                                   folds.get(sw.dpid))
            for sw in topo.switches}


def _sort_key(msg):
    """Added and modified flows by priority, highest first; deleted ones lowest
    first: a flow's higher-priority exceptions are in before it and go after it."""
    prio = getattr(msg, "priority", 0)
    return (prio if msg.command == "delete" else -prio, repr(msg.key))


def diff(old, new):
    """Messages turning SwitchState ``old`` into ``new``, in a safe order.

    Groups are added before flows that use them and deleted only after the
    flows pointing at them are gone (deleting a group deletes its flows).
    New flows go in before groups are modified: a destination that stops
    following a folded repair flow gets its own repair flow before the
    folded flow's group changes (every other flow keeps its group, whose id
    keeps its destination).  Flows go highest priority first (deletions
    lowest first): a folded repair flow's exceptions are in before it and
    stay until it is gone.  Entries present in both unchanged produce
    nothing, so counters survive.
    """
    old_f = {f.key: f for f in old.flows}
    new_f = {f.key: f for f in new.flows}
    old_g = {g.key: g for g in old.groups}
    new_g = {g.key: g for g in new.groups}
    g_add = [g for k, g in new_g.items() if k not in old_g]
    g_mod = [g.as_command("modify") for k, g in new_g.items()
             if k in old_g and old_g[k] != g]
    g_del = [g.as_command("delete") for k, g in old_g.items() if k not in new_g]
    # A flow with another cookie is not ours: ADD replaces it whole (cookie
    # included), whereas MODIFY would keep the foreign cookie.
    f_add = [f for k, f in new_f.items() if k not in old_f or old_f[k].cookie != f.cookie]
    f_mod = [f.as_command("modify") for k, f in new_f.items()
             if k in old_f and old_f[k] != f and old_f[k].cookie == f.cookie]
    f_del = [f.as_command("delete") for k, f in old_f.items() if k not in new_f]
    out = []
    for batch in (g_add, f_add, g_mod, f_mod, f_del, g_del):
        out.extend(sorted(batch, key=_sort_key))
    return out


def install(state):
    """Messages installing ``state`` on an empty switch."""
    return diff(SwitchState(), state)


def changes(topo, old_live, new_live, failover=DEFAULT_MODE):
    """{dpid: [messages]} for switches whose state differs between two liveness sets."""
    old = desired_state(topo, old_live, failover)
    new = desired_state(topo, new_live, failover)
    out = {}
    for dpid in sorted(new):
        msgs = diff(old[dpid], new[dpid])
        if msgs:
            out[dpid] = msgs
    return out
