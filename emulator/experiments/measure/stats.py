"""Statistics every measurement shares (pure): percentiles, summaries, spread, fairness.

Two percentile definitions, each named for its method: ``percentile`` is the
nearest rank (q in 0..100; drills' loss windows, probes, queue samples of
congestion runs), ``quantile`` interpolates linearly between order statistics
(q in 0..1; a tier's queue samples).  ``busy_window`` finds the samples in
which a counter moved, ``spread`` and ``jain`` say how evenly links or flows
shared load.
"""

import statistics

BUSY_FRACTION = 0.1       # a sampling interval is busy above this share of the peak rate
IDLE_FRACTION = 0.02      # a link is idle under this share of its tier's mean


def percentile(values, q):
    """Nearest-rank percentile (q in 0..100) of ``values``; None if empty."""
    if not values:
        return None
    v = sorted(values)
    return v[max(0, min(len(v) - 1, -(-len(v) * q // 100) - 1))]


def quantile(xs, q):
    """The q-quantile (0..1) of ``xs``, linear between order statistics; None if empty."""
    xs = sorted(xs)
    if not xs:
        return None
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stats(values):
    """n, median, p95 (nearest rank) and max of ``values``; None if empty."""
    if not values:
        return None
    return {"n": len(values), "median": round(statistics.median(values), 3),
            "p95": round(percentile(values, 95), 3), "max": round(max(values), 3)}


def busy_window(times, totals, fraction=BUSY_FRACTION):
    """(lo, hi): samples lo..hi span the intervals whose send rate (from the
    cumulative byte ``totals``) exceeds ``fraction`` of the peak; None if idle."""
    rates = [(b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
             for (t0, b0), (t1, b1) in zip(zip(times, totals), zip(times[1:], totals[1:]))]
    peak = max(rates, default=0.0)
    busy = [i for i, r in enumerate(rates) if peak > 0 and r > fraction * peak]
    if not busy:
        return None
    return busy[0], busy[-1] + 1


def spread(byte_counts, idle_fraction=IDLE_FRACTION):
    """Max/mean, Jain's index and idle links (< idle_fraction of the mean) of a tier."""
    xs = list(byte_counts)
    if not xs:
        return {"links": 0, "max_over_mean": None, "jain": None, "idle": 0}
    mean = sum(xs) / len(xs)
    sq = sum(x * x for x in xs)
    return {"links": len(xs),
            "max_over_mean": round(max(xs) / mean, 3) if mean > 0 else None,
            "jain": round(sum(xs) ** 2 / (len(xs) * sq), 4) if sq > 0 else None,
            "idle": sum(1 for x in xs if x < idle_fraction * mean) if mean > 0 else len(xs)}


def queue_stats(backlogs, rates):
    """Backlog statistics of one tier: ``backlogs[i]`` are link i's samples (bytes)
    over the busy window, ``rates[i]`` its rate (bit/s).  Milliseconds are the
    time the backlog takes to drain at the link rate."""
    ms = [b * 8 / r * 1000 for series, r in zip(backlogs, rates) for b in series]
    raw = [b for series in backlogs for b in series]
    if not ms:
        return {"max_bytes": None, "max_ms": None, "p95_ms": None, "mean_ms": None}
    return {"max_bytes": max(raw), "max_ms": round(max(ms), 2),
            "p95_ms": round(quantile(ms, 0.95), 2),
            "mean_ms": round(sum(ms) / len(ms), 2)}


def median(xs):
    """The median of the values that are not None; None if there are none."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def jain(xs):
    """Jain's fairness index of ``xs`` (1 = equal shares)."""
    xs = [x for x in xs if x is not None]
    if not xs or not any(xs):
        return None
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))
