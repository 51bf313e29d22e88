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
toward a destination has several ports outputs to a select group; one group
per distinct port set on a switch, numbered 1.. in sorted order of the sets,
hashing ipv4_src, ipv4_dst, udp_src, udp_dst with the switch's hash_seed as
basis. Buckets watch their output port so OVS skips dead buckets.
"""

from collections import deque

from .messages import (ARP_REPLY, ARP_REQUEST, COOKIE, ETH_TYPE_ARP, ETH_TYPE_IPV4,
                       OFPP_IN_PORT, Bucket, CopyField, FlowMod, Group, GroupMod,
                       Output, Selection, SetField, SwitchState, match)

PRIO_IPV4 = 1000
PRIO_ARP_GUARD = 300
PRIO_ARP_REPLY = 200
PRIO_ARP_DROP = 100
PRIO_MISS = 0
HASH_FIELDS = ("ipv4_src", "ipv4_dst", "udp_src", "udp_dst")


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


def live_adjacency(topo, live):
    """dpid -> [(port, peer dpid)] over links with both ends live, sorted."""
    adj = {s.dpid: [] for s in topo.switches}
    for lk in topo.links:
        if (lk.a_dpid, lk.a_port) in live and (lk.b_dpid, lk.b_port) in live:
            adj[lk.a_dpid].append((lk.a_port, lk.b_dpid))
            adj[lk.b_dpid].append((lk.b_port, lk.a_dpid))
    for ports in adj.values():
        ports.sort()
    return adj


def hop_distances(adj, dst):
    """Hop count from every switch that can reach ``dst`` (BFS)."""
    dist, todo = {dst: 0}, deque([dst])
    while todo:
        node = todo.popleft()
        for _, peer in adj[node]:
            if peer not in dist:
                dist[peer] = dist[node] + 1
                todo.append(peer)
    return dist


def next_hops(topo, live):
    """{dpid: {host ip: tuple of next-hop ports}} toward every reachable live host port."""
    adj = live_adjacency(topo, live)
    routes = {s.dpid: {} for s in topo.switches}
    dist_cache = {}
    for hp in topo.host_ports:
        if (hp.dpid, hp.switch_port) not in live:
            continue
        if hp.dpid not in dist_cache:
            dist_cache[hp.dpid] = hop_distances(adj, hp.dpid)
        dist = dist_cache[hp.dpid]
        for dpid, d in dist.items():
            if dpid == hp.dpid:
                routes[dpid][hp.ip] = (hp.switch_port,)
            else:
                routes[dpid][hp.ip] = tuple(
                    port for port, peer in adj[dpid] if dist.get(peer) == d - 1)
    return routes


def _switch_state(topo, sw, routes):
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
        for hp in topo.host_ports:
            flows.append(FlowMod(0, PRIO_ARP_REPLY, match(
                eth_type=ETH_TYPE_ARP, arp_op=ARP_REQUEST, arp_tpa=hp.ip),
                arp_responder_actions(hp.ip, hp.mac)))

    port_sets = sorted({ports for ports in routes.values() if len(ports) > 1})
    group_of = {ports: gid for gid, ports in enumerate(port_sets, start=1)}
    groups = [GroupMod(gid, "select",
                       tuple(Bucket((Output(p),), 1, p) for p in ports),
                       Selection(HASH_FIELDS, sw.hash_seed))
              for ports, gid in group_of.items()]
    for ip, ports in routes.items():
        if not ports:
            continue                     # no live path: table miss drops it
        action = Output(ports[0]) if len(ports) == 1 else Group(group_of[ports])
        flows.append(FlowMod(0, PRIO_IPV4, match(eth_type=ETH_TYPE_IPV4, ipv4_dst=ip), (action,)))
    return SwitchState(frozenset(flows), frozenset(groups))


def desired_state(topo, live):
    """{dpid: SwitchState} for every switch, given the set of live (dpid, port)."""
    live = frozenset(live)
    routes = next_hops(topo, live)
    return {sw.dpid: _switch_state(topo, sw, routes[sw.dpid]) for sw in topo.switches}


def _sort_key(msg):
    return repr(msg.key)


def diff(old, new):
    """Messages turning SwitchState ``old`` into ``new``, in a safe order.

    Groups are added before flows that use them and deleted only after the
    flows pointing at them are gone (deleting a group deletes its flows).
    Entries present in both unchanged produce nothing, so counters survive.
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
    for batch in (g_add, g_mod, f_add, f_mod, f_del, g_del):
        out.extend(sorted(batch, key=_sort_key))
    return out


def install(state):
    """Messages installing ``state`` on an empty switch."""
    return diff(SwitchState(), state)


def changes(topo, old_live, new_live):
    """{dpid: [messages]} for switches whose state differs between two liveness sets."""
    old = desired_state(topo, old_live)
    new = desired_state(topo, new_live)
    out = {}
    for dpid in sorted(new):
        msgs = diff(old[dpid], new[dpid])
        if msgs:
            out[dpid] = msgs
    return out
