"""A collective's uplinks: ring orders, ECMP's expected efficiency, measured load (pure).

``ring_indices`` and ``ring_connections`` give a ring's order and the leaf pairs
its hops cross; ``ecmp_expectation`` is the balls-into-bins expectation of a
ring's efficiency when every QP's hash picks a spine at random (Monte Carlo);
``uplink_series``, ``spread`` and ``load_bound`` turn interface counters into
each uplink's utilisation, its spread (max/mean, Jain's index) and the
efficiency the busiest uplink allows.
"""

import random

from emulator.errors import ConfigError
from emulator.experiments.measure.stats import jain
from emulator.fabric.addressing import home_leaf
from traffic.ranks.collectives import ring_order

SAMPLE_S = 0.1            # the interface counters' sampling period (s)


RINGS = ("naive", "topology", "strided")


def host_leaves(topo):
    """[(host name, leaf name)] in topology order."""
    return [(h["name"], home_leaf(h)) for h in topo["hosts"]]


def ring_indices(topo, ring):
    """The rank order for ``ring``: 'naive'/'topology' pass through; 'strided' is
    the order of a topology-unaware scheduler placing consecutive ranks on
    different leaves (every ring hop crosses the spine layer)."""
    if ring in ("naive", "topology"):
        return ring
    if ring != "strided":
        raise ConfigError("--ring", f"{ring!r}: one of {', '.join(RINGS)}")
    by_leaf = {}
    for i, (_, leaf) in enumerate(host_leaves(topo)):
        by_leaf.setdefault(leaf, []).append(i)
    cols = list(by_leaf.values())
    depth = max(len(c) for c in cols)
    return [c[k] for k in range(depth) for c in cols if k < len(c)]


def ring_hops(topo, ring):
    """[(src rank, dst rank)] (host indices) of the ring's cross-leaf hops."""
    hl = host_leaves(topo)
    n = len(hl)
    if ring in ("naive", "topology"):
        order = list(range(n)) if ring == "naive" else ring_order(
            range(n), {i: leaf for i, (_, leaf) in enumerate(hl)})
    else:
        order = ring
    hops = [(order[i], order[(i + 1) % n]) for i in range(n)]
    return [(i, j) for i, j in hops if hl[i][1] != hl[j][1]]


def ring_connections(topo, ring):
    """[(src leaf, dst leaf)] of the ring's cross-leaf hops."""
    hl = host_leaves(topo)
    return [(hl[i][1], hl[j][1]) for i, j in ring_hops(topo, ring)]


def collisions(paths, qps):
    """{switch hop: QPs} of the links the traced ``paths`` (one per QP) leave switches
    by toward another switch, and whether two connections share one (a link loaded
    above ``qps`` QPs: ``ecmp_expectation``'s collision)."""
    load = {}
    for path in paths:
        for h in path[1:-2]:                 # switch hops but the last, toward the host
            load[h] = load.get(h, 0) + 1
    return load, max(load.values(), default=0) > qps


def ecmp_expectation(connections, paths, qps=1, trials=20000, seed=1):
    """Expected ECMP efficiency and P(no collision) by Monte Carlo.

    Each QP of each connection picks one of ``paths`` spines uniformly (the
    hash); it loads its source leaf's uplink and the spine's downlink to the
    destination leaf.  A connection moves R/qps per QP; a link with m QPs is
    loaded m/qps, so the ring's pace is 1/max(1, max load).
    """
    rng = random.Random(seed)
    total = clean = 0.0
    for _ in range(trials):
        load = {}
        for src, dst in connections:
            for _ in range(qps):
                s = rng.randrange(paths)
                for link in ((src, s, "up"), (s, dst, "down")):
                    load[link] = load.get(link, 0) + 1
        worst = max(load.values(), default=0) / qps
        total += 1 / max(1.0, worst)
        clean += worst <= 1
    return {"efficiency": total / trials, "p_no_collision": clean / trials,
            "connections": len(connections), "paths": paths, "qps": qps}


def uplinks(topo):
    """[(leaf, port, intf, peer, rate_bps)] of every leaf port facing a spine."""
    return [(s["name"], p["port"], p["intf"], p["peer"], p["rate_bps"])
            for s in topo["switches"] if s["kind"] == "leaf"
            for p in s["ports"] if p["peer_kind"] not in ("host", "leaf")]


def uplink_series(topo, samples):
    """Per uplink: utilisation per sample interval, from (t, counters) samples."""
    out = {}
    for leaf, port, intf, peer, rate in uplinks(topo):
        series = []
        for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
            a, b = c0.get(intf), c1.get(intf)
            if a is None or b is None or t1 <= t0:
                series.append(0.0)
                continue
            series.append((b[0] - a[0]) * 8 / (t1 - t0) / rate)
        out[f"{leaf}->{peer}"] = series
    return out


def spread(series):
    """Utilisation per uplink over the active window; max/mean; Jain."""
    if not series:
        return {}
    n = len(next(iter(series.values())))
    totals = [sum(s[i] for s in series.values()) for i in range(n)]
    # the collective's window: samples above 10% of the peak (not the barrier's hellos)
    busy = [i for i in range(n) if totals[i] > 0.1 * max(totals, default=0) > 0]
    if not busy:
        return {"per_uplink": {}, "max_over_mean": None, "jain": None}
    lo, hi = busy[0], busy[-1] + 1
    per = {k: sum(s[lo:hi]) / (hi - lo) for k, s in series.items()}
    mean = sum(per.values()) / len(per)
    return {"per_uplink": {k: round(v, 4) for k, v in per.items()},
            "window_s": round((hi - lo) * SAMPLE_S, 2),
            "max_over_mean": round(max(per.values()) / mean, 3) if mean > 0 else None,
            "jain": round(jain(per.values()), 4) if mean > 0 else None}


def load_bound(efficiency, per_uplink):
    """Efficiency a fabric with shaped uplinks would reach: the most loaded
    uplink's demand above its link rate slows every ring step by that factor."""
    if efficiency is None or not per_uplink:
        return efficiency
    return efficiency / max(1.0, max(per_uplink.values()))
