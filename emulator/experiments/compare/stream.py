"""``compare --stream SRC:DST`` and ``compare --cut LINK``: how much of a
collective each load-balancing mode keeps when a competing stream takes one
uplink's full rate, or a link dies, mid-collective.

Every mode runs the collective twice per repetition, on the same seeds and
without a warm-up: alone, and disturbed (workloads.stream, workloads.cut) from
a quarter into it (its ideal time at the link rate) for half of it.  A mode's *loss* is its efficiency alone minus
disturbed.  Beside it, for a stream, its uplink's queue (p99 over the stream)
and, for the data-plane modes, how fast flowlets left that uplink once its
queue built (the stage's timestamps); for a cut, how soon after the cut the
first frame left by another uplink.  With a stream the ranks are every host
but SRC and DST.
"""

import contextlib
import os
import statistics

from emulator.dataplane.faults import parse_link
from emulator.dataplane.observe import run_yaml
from emulator.dataplane.session import make_results_dir, write_json
from emulator.errors import ConfigError
from emulator.experiments.spec.build import command_doc
from emulator.experiments.workloads import collective
from emulator.experiments.workloads.cut import Cut
from emulator.experiments.workloads.stream import Stream, parse
from emulator.fabric import addressing
from traffic.roce.frames import frame_len_for_mtu


@contextlib.contextmanager
def during(s, disturb, workload, sizes, hosts):
    """``disturb`` on session ``s`` around a collective of ``sizes`` over
    ``hosts`` (run without a warm-up, so the quarter is the measured size's):
    ("stream", (src, dst)) or ("cut", link); None: nothing."""
    if not disturb:
        yield None
        return
    by = {h["name"]: h for h in s.topo["hosts"]}
    hosts = hosts or list(by)
    rate = min(by[h]["ports"][0]["rate_bps"] for h in hosts)
    main = collective.expected_seconds(workload, len(hosts), list(sizes), rate)
    kind, what = disturb
    if kind == "cut":
        with Cut(s, what, start_s=main / 4, duration_s=main / 2) as c:
            yield c
        return
    with Stream(s, *what, start_s=main / 4, duration_s=main / 2,
                frame_len=frame_len_for_mtu(s.mtu)) as st:
        yield st


def reaction(run):
    """ms from the stream's uplink turning hot to flowlets leaving it (mean over
    its episodes), or from the cut to the first frame on another uplink (the
    data-plane modes), or None."""
    if run.get("cut"):
        return run["cut"].get("first_elsewhere_after_cut_ms")
    a, up = run.get("adaptive"), (run.get("stream") or {}).get("uplink")
    if not a or not up:
        return None
    sw, port = up.split(":")
    r = a["switches"].get(sw, {}).get("ports", {}).get(port, {}).get("queue_reaction_ms")
    return r and r["mean"]


def disturbed(run):
    return bool(run.get("stream") or run.get("cut"))


def rows(runs, modes):
    out = []
    for mode in modes:
        quiet = [r for r in runs if r["mode"] == mode and not disturbed(r)]
        busy = [r for r in runs if r["mode"] == mode and disturbed(r)]
        if not quiet or not busy:
            continue
        e0 = statistics.median(r["efficiency"] for r in quiet)
        e1 = statistics.median(r["efficiency"] for r in busy)
        q = [r["stream"]["queue_p99_ms"] for r in busy
             if "queue_p99_ms" in (r.get("stream") or {})]
        worst = [r["stream"]["worst_queue_p99_ms"] for r in busy
                 if "worst_queue_p99_ms" in (r.get("stream") or {})]
        react = [x for x in (reaction(r) for r in busy) if x is not None]
        verdicts = [r["fidelity"]["verdict"] for r in quiet + busy]
        out.append({
            "mode": mode, "efficiency_alone": round(e0, 3), "efficiency_stream": round(e1, 3),
            "loss": round(e0 - e1, 3),
            "queue_p99_ms": round(statistics.median(q), 2) if q else None,
            "worst_queue_p99_ms": round(statistics.median(worst), 2) if worst else None,
            "reaction_ms": round(statistics.median(react), 3) if react else None,
            "wrong": sum(r["wrong"] for r in quiet + busy),
            "reordered": sum(r["reordered"] for r in quiet + busy),
            "emulator_bound": sum(v != "faithful" for v in verdicts),
            "verdict": "faithful" if all(v == "faithful" for v in verdicts) else
            "emulator-bound"})
    return out


def table(rows, kind="stream"):
    lines = [f"{'mode':<16}{'effic alone':>12}{'with ' + kind:>12}{'loss':>8}"
             f"{'queue p99 ms':>14}{'worst p99':>11}{'reaction ms':>13}{'reord':>8}"
             f"{'#wrong':>8}  fidelity"]
    for r in rows:
        q = "-" if r["queue_p99_ms"] is None else f"{r['queue_p99_ms']:.1f}"
        w = "-" if r.get("worst_queue_p99_ms") is None else f"{r['worst_queue_p99_ms']:.1f}"
        rc = "-" if r["reaction_ms"] is None else f"{r['reaction_ms']:.2f}"
        lines.append(f"{r['mode']:<16}{r['efficiency_alone']:>12.3f}"
                     f"{r['efficiency_stream']:>12.3f}{r['loss']:>8.3f}{q:>14}{w:>11}{rc:>13}"
                     f"{r['reordered']:>8}{r['wrong']:>8}  {r['verdict']}")
    if kind == "cut":
        lines.append("loss: efficiency alone - with the cut (medians over repetitions); "
                     "reaction: from the cut to the first frame sent by another uplink "
                     "(the modelled detection included), timestamped in the switch's "
                     "data plane")
        return "\n".join(lines)
    lines.append("loss: efficiency alone - with the stream (medians over repetitions); "
                 "queue p99: the stream's uplink's egress queue while it ran, in ms at "
                 "the link rate (worst: the longest of its leaf's uplinks); reaction: from that uplink's queue building (4 frames) to "
                 "the first flowlet placed or moved elsewhere, timestamped in the "
                 "switch's data plane")
    return "\n".join(lines)


def main(spec, args, modes, sizes, repetitions, out=print):
    """The comparison; ``repetitions``: compare's runner of (mode, ring, QPs,
    disturbance) repetitions (compare.repetitions)."""
    fabric = spec.fabric
    topo = addressing.plan(fabric)
    hosts = None
    if args.stream:
        if args.cut:
            raise ConfigError("--cut", "one disturbance at a time: --stream or --cut")
        stream = parse(args.stream, topo)
        disturb = ("stream", stream)
        hosts = [h["name"] for h in topo["hosts"] if h["name"] not in stream]
        if len(hosts) < 2:
            raise ConfigError("--stream", "the collective needs 2 hosts besides the stream's")
        what = f"competing stream {stream[0]} -> {stream[1]}; ranks {', '.join(hosts)}"
    else:
        parse_link(args.cut, topo, where="--cut")
        disturb = ("cut", args.cut)
        what = f"cut {args.cut} (failover {spec.failover})"
    base = make_results_dir(spec.results, "compare")
    run_yaml.write(base, spec, command=command_doc("compare", args))
    spec = spec.replace(results=base)
    job0 = spec.job_seed
    out(f"... {what}; job seeds {job0}..{job0 + args.reps - 1}")
    qps = args.qps or 1
    plan = [(mode, args.ring, qps, d) for mode in modes for d in (None, disturb)]
    runs = repetitions(spec, plan, sizes, args, out, hosts=hosts, warmup=0)
    for r in runs:
        err = (r.get(disturb[0]) or {}).get("error")
        if err:
            out(f"... {r['mode']}: the {disturb[0]} failed: {err}")
    table_rows = rows(runs, modes)
    write_json(os.path.join(base, "compare.json"),
               {"fabric": fabric.name, "workload": spec.workload, "sizes": sizes,
                disturb[0]: disturb[1], "queue_ms": spec.queue_ms,
                "flowlet_gap_ms": args.flowlet_gap_ms, "rows": table_rows, "runs": runs})
    out(f"# {spec.workload} {args.sizes or '2M'} on {fabric.name} with a {disturb[0]}; "
        f"results in {base}")
    out(table(table_rows, disturb[0]))
    if any(r["wrong"] for r in table_rows):
        return 1
    if spec.strict and any(r["emulator_bound"] for r in table_rows):
        out("--strict: some runs were emulator-bound; exit status 3")
        return 3
    return 0
