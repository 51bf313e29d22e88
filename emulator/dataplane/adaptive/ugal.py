"""UGAL on a dragonfly, the model (pure): the source router's per-flowlet choice
between the minimal route and a Valiant candidate, which queues it compares,
and the tables the program (``dataplane/bpf/ugal.bpf.c``) reads.

The rule (BookSim's ``ugal_dragonflynew``).  At the router a host's frame
enters, for a destination in another group, each new flowlet draws an
intermediate group k at random among the groups that are neither end, and
goes non-minimally (through k) when

    q_min > 2 * q_nonmin + bias

(the factor 2: a Valiant path crosses about twice the hops); else minimally.
A destination in the source's own group always goes minimally.  The flowlet
keeps its choice until it idles for the flowlet timer (or its candidate's port
dies).  BookSim draws the intermediate among all nodes and goes minimally when
it lands in the source's group; here the source's and the destination's groups
are never drawn, so every non-minimal choice really takes a third group.

Which queues.  ``ugal`` (UGAL-G): the group's global channels, readable from
every router of the group because every switch's map lives in one kernel (as an
ASIC group's shared state would be): q_min is the queue of the global link
the minimal route crosses (often on another router of the group), q_nonmin
that of the first global link towards k.  ``ugal-l`` (UGAL-L, BookSim's):
the router's own output ports: the minimal route's next hop and the port
towards k (a local link when another router of the group holds the global
one).  A queue is the adaptive stage's: bytes in at its tc egress minus bytes
out at the link's far end, plus bytes decided towards it not yet arrived.

How the choice travels.  A non-minimal frame's Ethernet source address is
stamped with the Valiant carrier of group k, phase 1 (02:df:00:<k>:01), which
the controller's Valiant flows (controller/dragonfly.py) carry to group k and
then minimally on; a minimal frame is left alone to the minimal flows.
"""

import struct

from emulator.dataplane.adaptive import model
from emulator.errors import ConfigError
from lab.modes import Routing

MODES = (Routing.UGAL, Routing.UGAL_L)     # --routing values decided here
QUEUES = {Routing.UGAL: "global", Routing.UGAL_L: "local"}
MIN_CAND = 4                              # ugal.bpf.c's MIN_CAND
UGAL_CAND = 16                            # ugal.bpf.c's UGAL_CAND
BIAS_FRAMES = 1                           # the bias, in full frames
ROUTE = struct.Struct(f"<II{MIN_CAND}I{UGAL_CAND}I{UGAL_CAND}I")   # struct ugal_route
COUNT_FIELDS = [("min_frames", "Q"), ("min_bytes", "Q"), ("min_flowlets", "Q"),
                ("non_frames", "Q"), ("non_bytes", "Q"), ("non_flowlets", "Q")]
COUNT_NAMES = [n for n, _ in COUNT_FIELDS]
CONFIG_FIELDS = [("sw", "Q"), ("up_key", "q"), ("decide", "Q"), ("flowlet_ns", "Q"),
                 ("pend_ns", "Q"), ("key", "q"), ("bias", "q")]


def nonminimal(q_min, q_nonmin, bias):
    """BookSim's rule: whether a flowlet goes through the intermediate group."""
    return q_min > 2 * q_nonmin + bias


def check_mode(mode):
    if mode not in MODES:
        raise ConfigError("--routing", f"{mode!r} is not a UGAL mode (one of "
                                       f"{', '.join(MODES)})")
    return mode


def _groups(topo):
    group = {s["name"]: s.get("pod") for s in topo["switches"]}
    if None in group.values() or len(set(group.values())) < 2:
        raise ConfigError("--routing", "UGAL is a dragonfly's routing: run it on "
                                       "-p dragonfly or -p dragonfly-plus")
    return group


class _Group:
    """The ports of a dragonfly's routers as the controller's minimal and Valiant
    routes use them (controller/dragonfly.py), every link up."""

    def __init__(self, topo):
        self.group = _groups(topo)
        self.adj = {sw: sorted(ports) for sw, ports in model.adjacency(topo).items()}

    def own(self, sw, gk):
        """``sw``'s own global ports to group ``gk``."""
        return [p for p, q in self.adj[sw] if self.group[q] == gk]

    def gates(self, sw, gk):
        """[(local port of ``sw``, gateway)]: its neighbours in its group with a global
        link to ``gk`` (every router of a group is one hop from every other, a
        dragonfly-plus leaf from every spine)."""
        gi = self.group[sw]
        return [(p, q) for p, q in self.adj[sw] if self.group[q] == gi and self.own(q, gk)]

    def minimal(self, sw, gj, queues):
        """The minimal route's queue entries from ``sw`` towards group ``gj``."""
        mine = self.own(sw, gj)
        if mine:
            return [(sw, p) for p in mine]
        gates = self.gates(sw, gj)
        if queues == "local":
            return [(sw, p) for p, _ in gates]
        return [(q, g) for _, q in gates for g in self.own(q, gj)]

    def toward(self, sw, gk, queues):
        """The queue entry of the first hop (local) or the first global hop (global)
        of ``sw``'s Valiant route towards group ``gk`` (the controller's
        ``toward_group``: its own link, else the first local port to a gateway)."""
        mine = self.own(sw, gk)
        if mine:
            return (sw, mine[0])
        gates = self.gates(sw, gk)
        if not gates:
            return None
        port, gate = gates[0]
        return (sw, port) if queues == "local" else (gate, self.own(gate, gk)[0])


def plan(topo, mode=Routing.UGAL):
    """What the stage installs: ``tracked`` [(switch, port)] (the queues read),
    ``deciders`` [(switch, port)] (host-facing ports), and ``routes``
    {(switch, host ip): (minimal entries, [(entry, intermediate group)])} for
    every host in another group than the router's."""
    queues = QUEUES[check_mode(mode)]
    g = _Group(topo)
    hosts = [(hp["switch"], hp["ip"]) for h in topo["hosts"] for hp in h["ports"]]
    deciders = sorted((s["name"], p["port"]) for s in topo["switches"] for p in s["ports"]
                      if p["peer_kind"] == "host")
    routers = sorted({sw for sw, _ in deciders})
    groups = sorted(set(g.group.values()))
    routes = {}
    for sw in routers:
        gi = g.group[sw]
        for dsw, ip in hosts:
            gj = g.group[dsw]
            if gj == gi:
                continue
            mins = g.minimal(sw, gj, queues)[:MIN_CAND]
            if not mins:
                continue
            cands = [(g.toward(sw, gk, queues), gk) for gk in groups if gk not in (gi, gj)]
            routes[(sw, ip)] = (mins, [c for c in cands if c[0] is not None][:UGAL_CAND])
    tracked = sorted({e for mins, cands in routes.values()
                      for e in mins + [c for c, _ in cands]})
    return {"mode": mode, "queues": queues, "tracked": tracked, "deciders": deciders,
            "routes": routes}


def route_value(mins, cands, keys):
    """``struct ugal_route`` of a route, its entries numbered by ``keys``."""
    m = [keys[e] for e in mins]
    c = [keys[e] for e, _ in cands]
    k = [gk for _, gk in cands]
    pad = lambda xs, n: xs + [0] * (n - len(xs))   # noqa: E731
    return ROUTE.pack(len(m), len(c), *pad(m, MIN_CAND), *pad(c, UGAL_CAND),
                      *pad(k, UGAL_CAND))


def reading(counts, topo_names):
    """results.json ``ugal`` counts from {switch index: dict of COUNT fields}:
    decisions per router and the share of bytes sent non-minimally."""
    routers, tot = {}, dict.fromkeys(COUNT_NAMES, 0)
    for i, c in sorted(counts.items()):
        if not any(c.values()):
            continue
        routers[topo_names[i]] = {
            "minimal": {"frames": c["min_frames"], "bytes": c["min_bytes"],
                        "flowlets": c["min_flowlets"]},
            "nonminimal": {"frames": c["non_frames"], "bytes": c["non_bytes"],
                           "flowlets": c["non_flowlets"]}}
        for k in COUNT_NAMES:
            tot[k] += c[k]
    every = tot["min_bytes"] + tot["non_bytes"]
    flowlets = tot["min_flowlets"] + tot["non_flowlets"]
    return {"flowlets": flowlets, "nonminimal_flowlets": tot["non_flowlets"],
            "frames": tot["min_frames"] + tot["non_frames"],
            "nonminimal_frames": tot["non_frames"],
            "nonminimal_share": round(tot["non_bytes"] / every, 4) if every else None,
            "routers": routers}
