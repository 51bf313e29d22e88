"""Dual-plane vs single-plane: the comparison's pure parts (no I/O; unit-tested).

The fabrics and their hash seeds, which tier a port belongs to, the busy
window of a run, per-link byte spread and idle links, queue statistics per
tier, and the summary table over repetitions.  ``planes`` runs the fabrics
and feeds these.
"""

import random
from dataclasses import replace

from emulator.errors import ConfigError
from emulator.experiments.measure.stats import busy_window, median, queue_stats, spread
from emulator.fabric import addressing, presets

FABRICS = ("dual-plane", "single-plane")
SEEDINGS = ("shared", "per-switch")
# (key, label, (switch kind, peer kinds)) of the shaped switch ports measured
TIERS = (("nic_tor", "NIC->ToR", ("nic", ("leaf",))),
         ("tor_spine", "ToR->spine", ("leaf", ("spine",))),
         ("spine_tor", "spine->ToR", ("spine", ("leaf",))),
         ("tor_nic", "ToR->NIC", ("leaf", ("nic", "host"))))
TIER_LABEL = {k: label for k, label, _ in TIERS}
PRESET = "dual-plane"
# equal ToR uplink capacity in both fabrics; rates the userspace datapath keeps up with
DEFAULT_PARAMS = {"host_rate": "10Mbps"}


# ---- pure helpers (unit-tested) ----------------------------------------------

def fabric_params(given):
    """The preset parameters of both fabrics: ``given`` plus the defaults.

    ``planes`` is what is compared, so giving it is an error; without
    ``uplink_rate`` or ``oversubscription``, ``oversubscription=1`` makes the
    ToR uplink capacity equal in both fabrics.
    """
    given = dict(given)
    if "planes" in given:
        raise ConfigError("--param", "planes: --planes runs planes=2 and planes=1 itself")
    out = dict(DEFAULT_PARAMS)
    if "uplink_rate" not in given and "oversubscription" not in given:
        out["oversubscription"] = "1"
    out.update(given)
    return out


def build_fabrics(given):
    """{'dual-plane': Fabric, 'single-plane': Fabric} from the user's parameters."""
    params = fabric_params(given)
    return {"dual-plane": presets.build(PRESET, dict(params, planes="2")),
            "single-plane": presets.build(PRESET, dict(params, planes="1"))}


def draw_seeds(names, key):
    """{name: seed} drawn from ``key``: the same names get the same seeds in any fabric."""
    rng = random.Random(key)
    return {n: rng.randrange(1, 1 << 31) for n in sorted(names)}


def reseed(fabric, switch_seeds):
    """``fabric`` with every switch's ECMP seed from ``switch_seeds`` (name -> seed)."""
    return replace(fabric, nodes=tuple(
        n if n.is_host else replace(n, hash_seed=switch_seeds[n.name]) for n in fabric.nodes))


def nic_seeds(fabric):
    """{NIC switch: seed} of the hosts' bonds (the addressing plan's own seeds)."""
    return {sw["name"]: sw["hash_seed"] for sw in addressing.plan(fabric)["switches"]
            if sw["kind"] == "nic"}


def tier_of(switch_kind, peer_kind):
    for key, _, (kind, peers) in TIERS:
        if switch_kind == kind and peer_kind in peers:
            return key
    return None


def shaped_ports(topo):
    """[{tier, link, intf, rate_bps}] of the switch ports in a measured tier."""
    out = []
    for sw in topo["switches"]:
        for p in sw["ports"]:
            tier = tier_of(sw["kind"], p["peer_kind"])
            if tier:
                out.append({"tier": tier, "link": f"{sw['name']}->{p['peer']}",
                            "intf": p["intf"], "rate_bps": p["rate_bps"]})
    return out


def analyse(ports, times, backlog, sent, drops):
    """One run's link and queue figures from the sampler's arrays.

    ``backlog[i]``, ``sent[i]``, ``drops[i]``: per sample, of ``ports[i]``.
    """
    out = {"links": {}, "queues": {}, "per_link": {}}
    totals = [sum(s[k] for s in sent) for k in range(len(times))]
    win = busy_window(times, totals)
    lo, hi = win if win else (0, max(0, len(times) - 1))   # samples lo..hi
    out["window_s"] = round(times[hi] - times[lo], 3) if times else 0.0
    for key, _, _ in TIERS:
        idx = [i for i, p in enumerate(ports) if p["tier"] == key]
        nbytes = [sent[i][-1] - sent[i][0] for i in idx]
        out["links"][key] = spread(nbytes)
        out["queues"][key] = queue_stats([backlog[i][lo:hi + 1] for i in idx],
                                         [ports[i]["rate_bps"] for i in idx])
        for i, b in zip(idx, nbytes):
            out["per_link"][ports[i]["link"]] = {
                "tier": key, "bytes": b, "max_backlog": max(backlog[i][lo:hi + 1], default=0)}
    total = [sum(b[k] for b in backlog) for k in range(lo, hi + 1)] if backlog else []
    out["total_backlog_max_bytes"] = max(total, default=0)
    out["drops"] = sum(d[-1] - d[0] for d in drops)
    return out


def worst_series(ports, times, backlog):
    """Per tier, the largest backlog (ms) among its links at every sample (plot)."""
    t0 = times[0] if times else 0.0
    out = {"t": [round(t - t0, 3) for t in times]}
    for key, _, _ in TIERS:
        idx = [i for i, p in enumerate(ports) if p["tier"] == key]
        out[key] = [round(max((backlog[i][k] * 8 / ports[i]["rate_bps"] * 1000 for i in idx),
                              default=0.0), 2) for k in range(len(times))]
    return out


# The table's rows: (label, getter of one run's value, number format)
def _tier(kind, tier, field):
    return lambda r: r[kind][tier][field]


METRICS = ([("busbw Mb/s", lambda r: r["busbw_Mbps"], ".2f"),
            ("efficiency", lambda r: r["efficiency"], ".3f"),
            ("collective time s", lambda r: r["time_s"], ".2f")]
           + [(f"{TIER_LABEL[t]} bytes max/mean", _tier("links", t, "max_over_mean"), ".2f")
              for t in ("tor_spine", "spine_tor", "tor_nic")]
           + [(f"{TIER_LABEL[t]} idle links", _tier("links", t, "idle"), ".1f")
              for t in ("tor_spine", "spine_tor")]
           + [(f"{TIER_LABEL[t]} queue {f.split('_')[0]} ms", _tier("queues", t, f), ".1f")
              for t, _, _ in TIERS for f in ("max_ms", "p95_ms", "mean_ms")]
           + [("any tier queue max kB",
               lambda r: max((q["max_bytes"] or 0) for q in r["queues"].values()) / 1000, ".1f"),
              ("all queues together max kB", lambda r: r["total_backlog_max_bytes"] / 1000,
               ".1f"),
              ("qdisc drops, sum of reps", lambda r: r["drops"], ".0f"),
              ("packets lost, sum of reps", lambda r: r["lost"], ".0f"),
              ("#wrong, sum of reps", lambda r: r["wrong"], ".0f"),
              ("not faithful, runs", lambda r: int(r["fidelity"] != "faithful"), ".0f")])
SUMMED = {"qdisc drops, sum of reps", "packets lost, sum of reps", "#wrong, sum of reps",
          "not faithful, runs"}


def summarize(runs):
    """{seeding: {metric label: {fabric: median, 'ratio': single/dual}}} and link counts
    (losses are summed over the repetitions, not their median)."""
    out = {}
    for seeding in SEEDINGS:
        rs = [r for r in runs if r["seeding"] == seeding]
        if not rs:
            continue
        rows = {}
        for label, get, _ in METRICS:
            agg = sum if label in SUMMED else median
            row = {f: agg([get(r) for r in rs if r["fabric"] == f]) for f in FABRICS}
            d, s = row["dual-plane"], row["single-plane"]
            row["ratio"] = round(s / d, 3) if d and s is not None else None
            rows[label] = row
        out[seeding] = {"reps": max(sum(1 for r in rs if r["fabric"] == f) for f in FABRICS),
                        "rows": rows,
                        "links": {f: {t: next((r["links"][t]["links"] for r in rs
                                               if r["fabric"] == f), 0)
                                      for t in ("tor_spine", "spine_tor")} for f in FABRICS}}
    return out


def table(summary):
    """The side-by-side text table of ``summarize``'s result."""
    seedings = [s for s in SEEDINGS if s in summary]
    width = 30
    title = {"shared": "shared seed", "per-switch": "per-switch seeds"}
    head1 = " " * width + "".join(
        f"{title[s] + ' (' + str(summary[s]['reps']) + ' reps)':^33s}" for s in seedings)
    head2 = f"{'median':{width}s}" + "".join(
        f"{'dual':>10s} {'single':>10s} {'single/dual':>11s}" for _ in seedings)
    lines = [head1.rstrip(), head2]

    def f(x, fmt):
        return format(x, fmt) if x is not None else "-"
    for label, _, fmt in METRICS:
        line = f"{label:{width}s}"
        for s in seedings:
            row = summary[s]["rows"][label]
            line += (f"{f(row['dual-plane'], fmt):>10s} {f(row['single-plane'], fmt):>10s} "
                     f"{f(row['ratio'], '.2f'):>11s}")
        lines.append(line)
    links = summary[seedings[0]]["links"] if seedings else {}
    if links:
        lines.append("links per tier: " + "; ".join(
            f"{fab} {links[fab]['tor_spine']} ToR->spine, {links[fab]['spine_tor']} spine->ToR"
            for fab in FABRICS))
    return "\n".join(lines)


# ---- one run on a real fabric (root) -------------------------------------------
