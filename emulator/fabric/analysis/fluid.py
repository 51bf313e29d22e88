"""Fair shares of a dragonfly's fixed-split routing modes (pure: no I/O, no clock).

An estimate, not a bound: the upper bounds are emulator.fabric.analysis.bounds
(linear programs over each mode's paths).

Model.  Every flow (source host -> destination host) injects at most its
host link's rate; links are directed, with their rates.  A *routing mode*
gives each flow fixed shares over switch paths:

* ``minimal``: the dragonfly's minimal routes (controller.dragonfly's rule:
  at most one global hop; inside a group the shortest paths; where a switch
  has no global link to the destination's group, the local paths to the
  nearest switches of its group that have one), split evenly hop by hop as
  ECMP does;
* ``valiant``: an intermediate group drawn uniformly from all ``g`` groups:
  minimal to that group (the switch where its global link lands), then
  minimal to the destination; drawing the source's or the destination's own
  group is the minimal route.

``max_min(flows)`` is the max-min fair allocation of those fixed shares
(progressive filling: all unfrozen flows grow together until a link fills;
the flows crossing it freeze), each flow at most 1 (its injection rate).
``fair_shares`` gives per mode the *mean* of the max-min fair rates and the
*lowest* of them.  UGAL has no fixed split, hence no fair share here.
Everything works on the ``Fabric`` model; a switch's group is its ``pod``.
"""

import random
from collections import deque

from lab.modes import Routing

EPS = 1e-9


class Graph:
    """Directed links of a fabric with rates normalised to ``unit`` (the host rate)."""

    def __init__(self, fabric, unit=None):
        self.fabric = fabric
        self.group = {n.name: n.pod for n in fabric.switches}
        hosts = [lk for lk in fabric.links if fabric.node(lk.a.node).is_host
                 or fabric.node(lk.b.node).is_host]
        unit = unit or min(lk.rate_bps for lk in hosts)
        self.cap, self.adj, self.home = {}, {}, {}
        for lk in fabric.links:
            a, b = lk.a.node, lk.b.node
            self.cap[(a, b)] = self.cap[(b, a)] = lk.rate_bps / unit
            self.adj.setdefault(a, []).append(b)
            self.adj.setdefault(b, []).append(a)
            for h, sw in ((a, b), (b, a)):
                if fabric.node(h).is_host:
                    self.home[h] = sw
        self._local = {}

    def is_global(self, a, b):
        ga, gb = self.group.get(a), self.group.get(b)
        return ga is not None and gb is not None and ga != gb

    def _local_dist(self, targets):
        """Hops inside the targets' group to the nearest target (BFS)."""
        key = tuple(sorted(targets))
        if key not in self._local:
            g = self.group[key[0]]
            dist, todo = {t: 0 for t in key}, deque(key)
            while todo:
                n = todo.popleft()
                for m in self.adj[n]:
                    if self.group.get(m) == g and m not in dist:
                        dist[m] = dist[n] + 1
                        todo.append(m)
            self._local[key] = dist
        return self._local[key]

    def gateways(self, gi, gj):
        return sorted(a for a in self.adj if self.group.get(a) == gi
                      and any(self.group.get(b) == gj for b in self.adj[a]))

    def to_group(self, s, gj):
        """{(a, b): share} of minimal routing from switch ``s`` into group ``gj``
        (ending on the switch where the global link lands); the landing
        switches with their shares."""
        load, land = {}, {}
        frontier = {s: 1.0}
        while frontier:
            nxt = {}
            for n, share in frontier.items():
                if self.group[n] == gj:
                    land[n] = land.get(n, 0) + share
                    continue
                mine = [m for m in self.adj[n] if self.group.get(m) == gj]
                if not mine:
                    dist = self._local_dist(self.gateways(self.group[n], gj))
                    mine = [m for m in self.adj[n] if self.group.get(m) == self.group[n]
                            and dist.get(m) == dist[n] - 1]
                for m in mine:
                    load[(n, m)] = load.get((n, m), 0) + share / len(mine)
                    nxt[m] = nxt.get(m, 0) + share / len(mine)
            frontier = nxt
        return load, land

    def to_switch(self, s, d):
        """{(a, b): share} of minimal routing from switch ``s`` to switch ``d``."""
        load = {}
        if self.group[s] != self.group[d]:
            load, land = self.to_group(s, self.group[d])
            starts = land
        else:
            starts = {s: 1.0}
        dist = self._local_dist((d,))
        frontier = dict(starts)
        while frontier:
            nxt = {}
            for n, share in frontier.items():
                if n == d:
                    continue
                mine = [m for m in self.adj[n] if self.group.get(m) == self.group[d]
                        and dist.get(m) == dist[n] - 1]
                for m in mine:
                    load[(n, m)] = load.get((n, m), 0) + share / len(mine)
                    nxt[m] = nxt.get(m, 0) + share / len(mine)
            frontier = nxt
        return load

    def minimal(self, src, dst):
        """{(a, b): share} of flow src -> dst (hosts) under minimal routing."""
        s, d = self.home[src], self.home[dst]
        load = self.to_switch(s, d)
        return _add(load, {(src, s): 1.0, (d, dst): 1.0})

    def via(self, src, dst, gk):
        """{(a, b): share} of src -> dst through intermediate group ``gk`` (Valiant)."""
        s, d = self.home[src], self.home[dst]
        if gk in (self.group[s], self.group[d]):
            return self.minimal(src, dst)
        first, land = self.to_group(s, gk)
        load = dict(first)
        for r, share in land.items():
            load = _add(load, {k: v * share for k, v in self.to_switch(r, d).items()})
        return _add(load, {(src, s): 1.0, (d, dst): 1.0})

    def groups(self):
        return sorted(set(self.group.values()))

    def valiant(self, src, dst):
        gs = self.groups()
        out = {}
        for gk in gs:
            out = _add(out, {k: v / len(gs) for k, v in self.via(src, dst, gk).items()})
        return out


def _add(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def max_min(cap, shares):
    """Max-min fair rates (each <= 1) of flows with fixed link ``shares`` (list of dicts)."""
    rate = [0.0] * len(shares)
    used = {k: 0.0 for k in cap}
    active = set(range(len(shares)))
    while active:
        demand = {}
        for f in active:
            for k, v in shares[f].items():
                demand[k] = demand.get(k, 0) + v
        step = min([1 - rate[f] for f in active]
                   + [(cap[k] - used[k]) / v for k, v in demand.items() if v > EPS])
        step = max(step, 0.0)
        for f in active:
            rate[f] += step
        for k, v in demand.items():
            used[k] += step * v
        full = {k for k, v in demand.items() if v > EPS and cap[k] - used[k] <= 1e-7}
        active = {f for f in active if rate[f] < 1 - 1e-7
                  and not any(k in full for k in shares[f])}
    return rate


def fair_shares(fabric, pairs, modes=(Routing.MINIMAL, Routing.VALIANT)):
    """{mode: {"mean": mean of the max-min fair rates, "lowest": the lowest of them}} of
    ``pairs`` [(src host, dst host)] under each fixed-split mode, as fractions of
    injection."""
    g = Graph(fabric)
    out = {}
    for mode in modes:
        rates = max_min(g.cap, [getattr(g, mode)(s, d) for s, d in pairs])
        out[mode] = {"mean": round(_mean(rates), 4), "lowest": round(min(rates), 4)}
    return out


def link_split(fabric, loads):
    """(local, global) mean utilisation of the switch links from {(a, b): load}."""
    g = Graph(fabric)
    sums = {"local": [], "global": []}
    for (a, b), c in g.cap.items():
        if a in g.group and b in g.group:
            sums["global" if g.is_global(a, b) else "local"].append(loads.get((a, b), 0) / c)
    return tuple(_mean(v) for v in (sums["local"], sums["global"]))


def _mean(values):
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def adversarial(fabric):
    """[(src, dst)]: host k of group i -> host k of group i+1 (groups in order, cyclic)."""
    by_group = {}
    for h in fabric.hosts:
        by_group.setdefault(h.pod, []).append(h.name)
    groups = sorted(by_group)
    if len(groups) < 2 or None in groups:
        raise ValueError("the adversarial pattern needs hosts in two or more groups (a dragonfly)")
    out = []
    for i, gname in enumerate(groups):
        nxt = by_group[groups[(i + 1) % len(groups)]]
        out += [(h, nxt[k % len(nxt)]) for k, h in enumerate(by_group[gname])]
    return out


def permutation(fabric, seed):
    """[(src, dst)]: a random permutation of the hosts drawn from ``seed``, no host to
    itself (a uniformly drawn derangement: redrawn until it has no fixed point)."""
    hosts = [h.name for h in fabric.hosts]
    rng = random.Random(seed)
    while True:
        dst = hosts[:]
        rng.shuffle(dst)
        if all(a != b for a, b in zip(hosts, dst)):
            return list(zip(hosts, dst))


__all__ = ["Graph", "max_min", "fair_shares", "link_split", "adversarial", "permutation"]
