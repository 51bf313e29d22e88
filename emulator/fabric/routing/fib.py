"""The switches' FIBs replayed from their netlink events: who still routes through a
dead link, and when the last one stopped (pure).

Each router's kernel FIB is kept from a dump at the start and the route,
next-hop and link events of its namespace (``dataplane.system.fibwatch``),
each stamped with CLOCK_MONOTONIC as it was read.  Events are plain dicts:

    {"kind": "nexthop", "op": "new"|"del", "id", "dev", "group": [ids], "blackhole"}
    {"kind": "route", "op": "new"|"del", "dst", "nhid", "devs", "type"}
    {"kind": "link", "dev", "up"}

One thing the kernel does without telling anybody: when an interface loses
its carrier or is set down, no route through it is deleted or changed by a
message.  The routers run with ``ignore_routes_with_linkdown=1`` and zebra
installs its routes with their next hops inline (``no zebra nexthop kernel
enable``, ``frrconf``): a next hop set down is marked dead, one whose carrier
is gone is marked linkdown, and the kernel's multipath selection skips both
at once (net/ipv4/fib_semantics.c, ``fib_sync_down_dev`` and
``fib_rebalance``), before any daemon reacts; a route left with no next hop
is flushed.  Were next-hop objects installed (the kernel has them since
5.3), the kernel would flush those through the interface and drop them from
their groups, as silently (net/ipv4/nexthop.c, ``nexthop_flush_dev``).
``FibState.link_down`` replays either.

A switch *routes through the dead part* for a destination (a leaf's subnet)
when a path its FIB and the FIBs downstream give toward that leaf uses a
dead interface (an end of a cut link), enters a dead switch (crashed, or its
forwarding blackholed), or reaches a switch with no route: the traffic it
sends there is lost.  A switch with no route of its own sends nothing there
(its hosts cannot reach the leaf at all).  ``convergence`` gives, for each
switch, the last time it went from routing through the dead part to not,
and the last switch of all: BGP's convergence for the fault.
"""

UNICAST = "unicast"


class FibState:
    """One switch's FIB: next-hop objects and the routes toward the destinations."""

    def __init__(self):
        self.nexthops = {}   # id -> {"dev", "group", "blackhole"}
        self.routes = {}     # dst -> {"nhid", "devs", "type"}

    def copy(self):
        out = FibState()
        out.nexthops = {k: dict(v) for k, v in self.nexthops.items()}
        out.routes = {k: dict(v) for k, v in self.routes.items()}
        return out

    def apply(self, ev):
        kind = ev["kind"]
        if kind == "nexthop":
            if ev["op"] == "del":
                self._drop_nexthops({ev["id"]})
            else:
                self.nexthops[ev["id"]] = {"dev": ev.get("dev"),
                                           "group": list(ev.get("group") or []),
                                           "blackhole": bool(ev.get("blackhole"))}
        elif kind == "route":
            if ev["op"] == "del":
                self.routes.pop(ev["dst"], None)
            else:
                self.routes[ev["dst"]] = {"nhid": ev.get("nhid"), "devs": list(ev.get("devs")
                                                                                or []),
                                          "type": ev.get("type", UNICAST)}
        elif kind == "link" and not ev["up"]:
            self.link_down(ev["dev"])

    def link_down(self, dev):
        """The kernel's flush of next hops through ``dev`` (see the module docstring)."""
        self._drop_nexthops({i for i, nh in self.nexthops.items() if nh["dev"] == dev})
        for dst, r in list(self.routes.items()):
            if r["nhid"] is None and dev in r["devs"]:
                r["devs"] = [d for d in r["devs"] if d != dev]
                if not r["devs"]:
                    del self.routes[dst]

    def _drop_nexthops(self, ids):
        while ids:
            for i in ids:
                self.nexthops.pop(i, None)
            emptied = set()
            for gid, nh in self.nexthops.items():
                if nh["group"]:
                    nh["group"] = [m for m in nh["group"] if m not in ids]
                    if not nh["group"]:
                        emptied.add(gid)
            for dst, r in list(self.routes.items()):
                if r["nhid"] in ids:
                    del self.routes[dst]
            ids = emptied

    def devs(self, dst):
        """The interfaces ``dst``'s route leaves by ([] none; None: no route or a
        blackhole)."""
        r = self.routes.get(dst)
        if r is None or r["type"] != UNICAST:
            return None
        if r["nhid"] is None:
            return list(r["devs"])
        nh = self.nexthops.get(r["nhid"])
        if nh is None or nh["blackhole"]:
            return None
        members = [self.nexthops.get(m) for m in nh["group"]] if nh["group"] else [nh]
        return [m["dev"] for m in members if m is not None and m["dev"] is not None]


def routes_through(states, owners, neighbour, dead_ends=(), dead_switches=()):
    """{switch: [destinations it routes through the dead part for]} (see the module
    docstring).  ``states``: {switch: FibState}; ``owners``: {destination: the leaf that
    delivers it}; ``neighbour``: {(switch, dev): the switch at its other end, or None
    for a host}; ``dead_ends``: {(switch, dev)}; ``dead_switches``: {switch}."""
    dead_ends, dead_switches = set(dead_ends), set(dead_switches)
    memo = {}

    def bad(sw, dst, seen):
        key = (sw, dst)
        if key in memo:
            return memo[key]
        if sw in dead_switches:
            return True
        if owners[dst] == sw:
            return False
        if sw in seen:
            return True                           # a forwarding loop
        devs = states[sw].devs(dst) if sw in states else None
        if not devs:
            return True                           # upstream sent it here: lost
        result = False
        for dev in devs:
            if (sw, dev) in dead_ends:
                result = True
                break
            nxt = neighbour.get((sw, dev))
            if nxt is not None and bad(nxt, dst, seen | {sw}):
                result = True
                break
        memo[key] = result
        return result

    out = {}
    for sw, state in states.items():
        if sw in dead_switches:
            continue
        worse = [dst for dst in owners if owners[dst] != sw and state.devs(dst)
                 and bad(sw, dst, frozenset())]
        if worse:
            out[sw] = sorted(worse)
    return out


def convergence(initial, events, owners, neighbour, t_fault_ns, t_end_ns=None,
                dead_ends=(), dead_switches=()):
    """Replay ``events`` (dicts with ``t_ns`` and ``switch``, in time order) over the
    ``initial`` {switch: FibState} from the fault at ``t_fault_ns`` to ``t_end_ns``:

    {"converged_ms": from the fault until no switch routes through the dead part (None:
    it never stopped before ``t_end_ns``), "last_switch", "per_switch": {switch: ms of its
    last change from routing through it to not}, "still": {switch: destinations} at the
    end, "fib_changes": {switch: events replayed}}."""
    states = {sw: st.copy() for sw, st in initial.items()}
    changes = {sw: 0 for sw in states}

    def bad_now():
        return routes_through(states, owners, neighbour, dead_ends, dead_switches)

    for ev in events:                         # what happened before the fault
        if ev["t_ns"] >= t_fault_ns:
            break
        states[ev["switch"]].apply(ev)
    # the fault's own local effect: dead interfaces lose their next hops at once
    for sw, dev in dead_ends:
        if sw in states:
            states[sw].link_down(dev)
    bad = bad_now()
    last = {}
    for sw in bad:
        last[sw] = None
    for ev in events:
        t = ev["t_ns"]
        if t < t_fault_ns or (t_end_ns is not None and t >= t_end_ns):
            continue
        states[ev["switch"]].apply(ev)
        changes[ev["switch"]] += 1
        now = bad_now()
        for sw in set(bad) - set(now):
            last[sw] = t
        for sw in set(now) - set(bad):
            last.setdefault(sw, None)
        bad = now
    per = {sw: (None if t is None or sw in bad else round((t - t_fault_ns) / 1e6, 3))
           for sw, t in last.items()}
    converged = None if bad else max((ms for ms in per.values() if ms is not None),
                                     default=0.0)
    last_switch = None
    if converged is not None and per:
        last_switch = max((ms, sw) for sw, ms in per.items() if ms is not None)[1] \
            if any(ms is not None for ms in per.values()) else None
    return {"converged_ms": converged, "last_switch": last_switch, "per_switch": per,
            "still": bad, "fib_changes": changes}


def expected_routes(topo):
    """{switch: {leaf subnet: sorted interfaces}} of a converged fabric: toward each
    leaf's /24 (but its own), every port whose neighbour is one hop nearer that leaf
    (shortest paths: what eBGP with multipath-relax installs in a Clos under RFC 7938's
    ASNs); standby ports only where no other port leads there."""
    owner = {sw["bgp"]["subnet"]: sw["name"] for sw in topo["switches"]
             if sw.get("bgp", {}).get("subnet")}
    ports = {sw["name"]: [p for p in sw["ports"] if p["peer_kind"] != "host"]
             for sw in topo["switches"]}
    out = {name: {} for name in ports}
    for dst, leaf in owner.items():
        dist, frontier = {leaf: 0}, [leaf]
        while frontier:
            nxt = []
            for sw in frontier:
                for p in ports[sw]:
                    if p["peer"] in ports and p["peer"] not in dist:
                        dist[p["peer"]] = dist[sw] + 1
                        nxt.append(p["peer"])
            frontier = nxt
        for sw, d in dist.items():
            if sw == leaf:
                continue
            near = [p for p in ports[sw] if dist.get(p["peer"]) == d - 1]
            active = [p for p in near if p.get("role") != "standby"] or near
            out[sw][dst] = sorted(p["intf"] for p in active)
    return out


def missing_routes(expected, actual):
    """["switch dst: want -> has"] where ``actual`` ({switch: {dst: sorted
    interfaces}}) differs from ``expected`` for the destinations expected."""
    return [f"{sw} {dst}: {want} -> {actual.get(sw, {}).get(dst)}"
            for sw, routes in sorted(expected.items()) for dst, want in sorted(routes.items())
            if actual.get(sw, {}).get(dst) != want]
