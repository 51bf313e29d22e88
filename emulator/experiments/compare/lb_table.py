"""``emulator compare``'s table: one row per load-balancing mode over its repetitions.

Efficiency is given as the mean and the median over the repetitions, with
their range.  A repetition whose fidelity verdict was not *faithful* (the
machine, not the links, set the collective's pace) is run again with the same
hash seed and job seed, so the same ECMP draw (``--retries``, default once);
the disturbed attempts stay in ``compare.json`` (``disturbed_attempts``) and
the table counts the repetitions that were repeated.  A repetition with
``#wrong`` chunks is never repeated: that is an error of the fabric or the
transport, not noise.
"""

import statistics


def summarize(runs):
    """One table row per (mode, ring, qps) from the repetitions' run dicts."""
    groups = {}
    for r in runs:
        groups.setdefault((r["mode"], str(r["ring"]), r["qps"]), []).append(r)
    rows = []
    for (mode, ring, qps), rs in groups.items():
        eff = [r["efficiency"] for r in rs]

        def mean(key):
            vals = [r[key] for r in rs if r.get(key) is not None]
            return sum(vals) / len(vals) if vals else None
        rows.append({"mode": mode, "ring": ring, "qps": qps, "reps": len(rs),
                     "busbw_Mbps": mean("busbw_Mbps"), "efficiency": mean("efficiency"),
                     "eff_median": statistics.median(eff),
                     "load_bound_eff": mean("load_bound_eff"),
                     "lb_min": min(r["load_bound_eff"] for r in rs),
                     "lb_max": max(r["load_bound_eff"] for r in rs),
                     "eff_min": min(eff), "eff_max": max(eff),
                     "expected": rs[0].get("expected"),
                     "max_over_mean": mean("max_over_mean"), "jain": mean("jain"),
                     "reordered": sum(r["reordered"] for r in rs),
                     "wrong": sum(r["wrong"] for r in rs),
                     "repeated": sum(1 for r in rs if r.get("disturbed_attempts")),
                     "emulator_bound": sum(1 for r in rs if r.get("fidelity", {})
                                           .get("verdict", "faithful") != "faithful")})
    return rows


def fidelity_cell(row):
    out = (f"EMULATOR-BOUND in {row['emulator_bound']}/{row['reps']}"
           if row.get("emulator_bound") else "faithful")
    if row.get("repeated"):
        out += f" ({row['repeated']} repeated)"
    return out


def table(rows):
    """The comparison as text."""
    head = (f"{'mode':8s} {'ring':9s} {'qps':>3s} {'busbw Mb/s':>10s} {'effic':>6s} "
            f"{'median':>6s} {'load-bound':>10s} {'min..max':>11s} {'ECMP exp':>8s} "
            f"{'up max/mean':>11s} {'Jain':>6s} {'reordered':>9s} {'#wrong':>6s} "
            f"{'reps':>4s} fidelity")
    lines = [head]

    def f(x, fmt):
        return format(x, fmt) if x is not None else "-"
    for r in rows:
        exp = f(r["expected"], ".3f") if r["expected"] is not None else "-"
        lines.append(
            f"{r['mode']:8s} {r['ring']:9s} {r['qps']:3d} {f(r['busbw_Mbps'], '10.2f')} "
            f"{f(r['efficiency'], '6.3f')} {f(r.get('eff_median'), '6.3f')} "
            f"{f(r['load_bound_eff'], '10.3f')} "
            f"{r['lb_min']:5.3f}..{r['lb_max']:5.3f} "
            f"{exp:>8s} {f(r['max_over_mean'], '11.3f')} {f(r['jain'], '6.3f')} "
            f"{r['reordered']:9d} {r['wrong']:6d} {r['reps']:4d} " + fidelity_cell(r))
    if any(r.get("emulator_bound") for r in rows):
        lines.append("EMULATOR-BOUND rows measured this machine's CPU, not load balancing: "
                     "see each run's fidelity in compare.json")
    if any(r.get("repeated") for r in rows):
        lines.append("repeated: a repetition the machine set the pace of was run again with "
                     "the same seeds (its attempts: disturbed_attempts in compare.json)")
    return "\n".join(lines)


def disturbed_attempt(run):
    """What compare.json keeps of an attempt that was run again."""
    fid = run.get("fidelity", {})
    return {"efficiency": run["efficiency"], "busbw_Mbps": run["busbw_Mbps"],
            "dir": run.get("dir"), "verdict": fid.get("verdict"),
            "reasons": fid.get("reasons", [])}


def should_repeat(run, attempt, retries):
    """A repetition is run again when the machine set its pace (not faithful), it
    lost no chunk, and ``retries`` allows another attempt."""
    return (attempt < retries and run["wrong"] == 0
            and run.get("fidelity", {}).get("verdict", "faithful") != "faithful")
