"""Upper bounds on what a traffic matrix can get from a fabric, by linear programming
(pure: no I/O, no clock).

Model.  Links are directed, with their rates; rates are normalised to the
slowest host link (``unit``).  Every flow (source host -> destination host)
demands at most its source host's rate, and may split itself freely over a
*path set* (lists of nodes, host to host):

* ``minimal``: on a fabric of groups (every switch carries a ``pod``, two or
  more pods: a dragonfly), every path with exactly one global hop (over any
  global link between the two groups) and shortest local segments before and
  after it; inside one group, the shortest local paths.  Elsewhere (a
  leaf-spine, a Clos) the shortest switch paths.
* ``valiant``: the paths through an intermediate group ``k`` drawn from all
  groups: minimal to group k (landing where a global link from the source's
  group lands), then minimal from there to the destination.  Drawing the
  source's or the destination's own group is the minimal route, so the set
  holds the minimal paths (Valiant over all groups, as the controller draws).
* ``minimal+valiant`` (UGAL's: a flowlet goes minimally or through a third
  group): the union of the two.  On a dragonfly it is ``valiant``'s set; it
  has its own name because it is UGAL's paths, not Valiant's uniform draw.

Two linear programs over the paths' rates ``x_p >= 0``, with every link's
load at most its capacity and every flow at most its demand ``d_f``:

* the maximum concurrent flow: the largest ``lam`` with every flow at least
  ``lam * d_f`` at once.  No routing over the set can give its slowest flow a
  larger fraction of its injection rate: ``bound_min``;
* the maximum total flow, as the mean over flows of ``x_f / d_f``: no routing
  over the set can give the flows a larger mean fraction: ``bound_mean``.

Solved by SciPy's HiGHS (``scipy.optimize.linprog(method="highs")``).  A
routing that splits flows in fixed shares (ECMP, Valiant's uniform draw)
reaches at most these; the fair-share estimate of such a fixed split is
``emulator.fabric.analysis.fluid``.
"""

from collections import deque

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_matrix, vstack

from lab.modes import PathSet

PATH_SETS = PathSet.names()


class Paths:
    """The path sets of a fabric: directed links with capacities, node groups."""

    def __init__(self, fabric, unit=None):
        self.fabric = fabric
        self.hosts = {n.name for n in fabric.hosts}
        sw = fabric.switches
        pods = {n.pod for n in sw}
        self.grouped = len(sw) > 0 and None not in pods and len(pods) > 1
        self.group = {n.name: n.pod for n in sw}
        live = [lk for lk in fabric.links if lk.role is None]
        host_links = [lk for lk in live if lk.a.node in self.hosts or lk.b.node in self.hosts]
        self.unit = unit or min(lk.rate_bps for lk in host_links)
        self.cap, self.adj, self.home = {}, {}, {}
        for lk in live:
            a, b = lk.a.node, lk.b.node
            for x, y in ((a, b), (b, a)):
                self.cap[(x, y)] = self.cap.get((x, y), 0.0) + lk.rate_bps / self.unit
                self.adj.setdefault(x, set()).add(y)
                if x in self.hosts:
                    self.home.setdefault(x, y)
        self._short = {}

    # -- building blocks -----------------------------------------------------------
    def shortest(self, s, d, local=True):
        """Every shortest switch path s .. d (lists of nodes); ``local``: inside s's
        group only (on a fabric of groups)."""
        key = (s, d, local)
        if key in self._short:
            return self._short[key]
        allowed = (lambda n: n not in self.hosts and (
            not (local and self.grouped) or self.group[n] == self.group[s]))
        dist, todo = {d: 0}, deque([d])          # BFS from d: distances to d
        while todo:
            n = todo.popleft()
            for m in self.adj.get(n, ()):
                if allowed(m) and m not in dist:
                    dist[m] = dist[n] + 1
                    todo.append(m)
        out = []
        if s in dist:
            stack = [[s]]
            while stack:
                p = stack.pop()
                if p[-1] == d:
                    out.append(p)
                    continue
                for m in sorted(self.adj[p[-1]]):
                    if dist.get(m) == dist[p[-1]] - 1:
                        stack.append(p + [m])
        self._short[key] = out
        return out

    def global_links(self, gi, gj):
        return sorted((a, b) for (a, b) in self.cap if a in self.group and b in self.group
                      and self.group[a] == gi and self.group[b] == gj)

    def to_group(self, s, gk):
        """Paths from switch ``s`` over one global link into group ``gk`` (ending where
        it lands)."""
        return [p + [b] for a, b in self.global_links(self.group[s], gk)
                for p in self.shortest(s, a)]

    def minimal_sw(self, s, d):
        """Minimal switch paths s .. d."""
        if not self.grouped or self.group[s] == self.group[d]:
            return self.shortest(s, d, local=self.grouped)
        return [p + q[1:] for p in self.to_group(s, self.group[d])
                for q in self.shortest(p[-1], d)]

    def valiant_sw(self, s, d):
        """Switch paths s .. d through every intermediate group (the ends: minimal)."""
        if not self.grouped:
            raise ValueError("Valiant paths need a fabric of groups (a dragonfly)")
        out = list(self.minimal_sw(s, d))
        for gk in sorted(set(self.group.values()) - {self.group[s], self.group[d]}):
            out += [p + q[1:] for p in self.to_group(s, gk) for q in self.minimal_sw(p[-1], d)]
        return out

    def paths(self, src, dst, path_set):
        """Host-to-host paths of one flow in ``path_set`` (distinct node lists)."""
        ps = PathSet.parse(path_set, "path set")
        s, d = self.home[src], self.home[dst]
        found = self.minimal_sw(s, d) if ps == PathSet.MINIMAL else \
            self.valiant_sw(s, d) if ps == PathSet.VALIANT else \
            self.minimal_sw(s, d) + self.valiant_sw(s, d)
        seen, out = set(), []
        for p in found:
            t = tuple(p)
            if t not in seen:
                seen.add(t)
                out.append([src] + p + [dst])
        return out


def solve(cap, flows, demands):
    """(max concurrent fraction, max mean fraction) of ``flows`` (each a list of paths,
    a path a list of directed links) with ``demands`` (each flow's cap), over links
    of capacity ``cap`` {(a, b): c}."""
    links = {k: i for i, k in enumerate(sorted(cap))}
    cols, owner = [], []
    for f, paths in enumerate(flows):
        if not paths:
            raise ValueError(f"flow {f} has no path in this path set")
        for p in paths:
            cols.append([links[e] for e in p])
            owner.append(f)
    n, m, nf = len(cols), len(links), len(flows)
    rows_l = [i for c in cols for i in c]
    cols_l = [j for j, c in enumerate(cols) for _ in c]
    link_a = csr_matrix((np.ones(len(rows_l)), (rows_l, cols_l)), shape=(m, n + 1))
    link_b = np.array([cap[k] for k in sorted(cap)])
    flow_a = csr_matrix((np.ones(n), (owner, range(n))), shape=(nf, n + 1))
    d = np.asarray(demands, dtype=float)
    # maximum concurrent flow: max lam, x_f <= d_f, lam * d_f - x_f <= 0
    lam_a = csr_matrix((np.concatenate([-np.ones(n), d]),
                        (list(owner) + list(range(nf)), list(range(n)) + [n] * nf)),
                       shape=(nf, n + 1))
    a_ub = vstack([link_a, flow_a, lam_a]).tocsr()
    b_ub = np.concatenate([link_b, d, np.zeros(nf)])
    c = np.zeros(n + 1)
    c[n] = -1.0
    conc = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=[(0, None)] * n + [(0, 1)],
                   method="highs")
    # maximum total flow, each flow's rate counted as a fraction of its demand
    c = np.array([-1.0 / d[f] for f in owner] + [0.0])
    tot = linprog(c, A_ub=vstack([link_a, flow_a]).tocsr(),
                  b_ub=np.concatenate([link_b, d]), bounds=[(0, None)] * n + [(0, 0)],
                  method="highs")
    for r in (conc, tot):
        if r.status != 0:
            raise RuntimeError(f"linprog (HiGHS): {r.message}")
    return float(conc.x[n]), float(-tot.fun / nf)


def bounds(fabric, pairs, path_set):
    """{"bound_min", "bound_mean", "path_set", "paths"} of ``pairs`` [(src host, dst
    host)] as fractions of the injection rate (each flow's host rate)."""
    g = Paths(fabric)
    flows, demands, npaths = [], [], 0
    for s, d in pairs:
        ps = g.paths(s, d, path_set)
        npaths += len(ps)
        flows.append([list(zip(p, p[1:])) for p in ps])
        demands.append(g.cap[(s, g.home[s])])
    lo, mean = solve(g.cap, flows, demands)
    return {"bound_min": round(lo, 4), "bound_mean": round(mean, 4),
            "path_set": str(path_set), "paths": npaths}


__all__ = ["PATH_SETS", "Paths", "solve", "bounds"]
