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
def during(s, disturb, workload, sizes, hosts, cut_for=None):
    """``disturb`` on session ``s`` around a collective of ``sizes`` over
    ``hosts`` (run without a warm-up, so the quarter is the measured size's):
    ("stream", (src, dst)) or ("cut", link), the cut lasting ``cut_for`` s (default
    half the collective); None: nothing."""
    if not disturb:
        yield None
        return
    by = {h["name"]: h for h in s.topo["hosts"]}
    hosts = hosts or list(by)
    rate = min(by[h]["ports"][0]["rate_bps"] for h in hosts)
    main = collective.expected_seconds(workload, len(hosts), list(sizes), rate)
    kind, what = disturb
    if kind == "cut":
        with Cut(s, what, start_s=main / 4, duration_s=cut_for or main / 2) as c:
            yield c
        return
    with Stream(s, *what, start_s=main / 4, duration_s=main / 2,
                frame_len=frame_len_for_mtu(s.mtu)) as st:
        yield st


def cut_times(cut, coll_dir):
    """The cut's times from the collective's start (the ranks' first reported call,
    same monotonic clock): when it went down and came back up (ms)."""
    starts = [row["t_start_ns"] for r in collective.rank_results(os.path.join(coll_dir,
                                                                               "collective"))
              for row in r.get("results", ()) if "t_start_ns" in row]
    if not starts or cut.down is None:
        return {}
    t0 = min(starts)
    out = {"cut_at_ms": round((cut.down["t_cut_ns"] - t0) / 1e6, 1)}
    if cut.up is not None:
        out["restored_at_ms"] = round((cut.up["t_ns"] - t0) / 1e6, 1)
    return out


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


def cut_rows(runs, modes):
    """Per mode, the completion times alone and with the cut (medians), the cut's
    times, what the transport did: retransmission timeouts, QPs or PDCs out of
    retries, and for UET the EVs retired and the last retirement (ms from the
    collective's start)."""
    out = []
    med = statistics.median
    for mode in modes:
        quiet = [r for r in runs if r["mode"] == mode and not disturbed(r)]
        busy = [r for r in runs if r["mode"] == mode and r.get("cut", {}).get("happened")]
        if not quiet or not busy:
            continue

        def m(vals, nd=1):
            vals = [v for v in vals if v is not None]
            return round(med(vals), nd) if vals else None
        tc = [r.get("transport_counts") or {} for r in busy]
        out.append({
            "mode": mode, "time_alone_s": m([r["time_s"] for r in quiet], 3),
            "time_cut_s": m([r["time_s"] for r in busy], 3),
            "cut_at_ms": m([r["cut"].get("cut_at_ms") for r in busy]),
            "restored_at_ms": m([r["cut"].get("restored_at_ms") for r in busy]),
            "last_retired_ms": m([(r.get("uet") or {}).get("last_retired_ms") for r in busy]),
            "evs_retired": m([(r.get("uet") or {}).get("evs_retired") for r in busy], 0),
            "timeouts": sum(t.get("timeouts", 0) for t in tc),
            "failed": sum(r.get("failed_qps", 0) for r in busy)})
    return out


def cut_table(rows):
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)
    lines = [f"{'mode':<16}{'time alone s':>13}{'with cut s':>12}{'cut at ms':>11}"
             f"{'restored ms':>13}{'EVs retired':>13}{'last retired ms':>17}{'timeouts':>10}"
             f"{'failed':>8}"]
    for r in rows:
        lines.append(f"{r['mode']:<16}{f(r['time_alone_s'], '.3f'):>13}"
                     f"{f(r['time_cut_s'], '.3f'):>12}{f(r['cut_at_ms'], '.0f'):>11}"
                     f"{f(r['restored_at_ms'], '.0f'):>13}{f(r['evs_retired'], '.0f'):>13}"
                     f"{f(r['last_retired_ms'], '.0f'):>17}{r['timeouts']:>10}{r['failed']:>8}")
    lines.append("times from the collective's start (medians over repetitions); timeouts: "
                 "retransmissions by timer in the cut runs (all of them); failed: QPs or PDCs "
                 "out of retries; EVs retired: UET's senders stopped using a lost packet's "
                 "entropy value")
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
    doc = {"fabric": fabric.name, "workload": spec.workload, "sizes": sizes,
           disturb[0]: disturb[1], "queue_ms": spec.queue_ms,
           "flowlet_gap_ms": args.flowlet_gap_ms, "rows": table_rows, "runs": runs}
    if disturb[0] == "cut":
        doc["cut_rows"] = cut_rows(runs, modes)
    write_json(os.path.join(base, "compare.json"), doc)
    out(f"# {spec.workload} {args.sizes or '2M'} on {fabric.name} with a {disturb[0]}; "
        f"results in {base}")
    out(table(table_rows, disturb[0]))
    if disturb[0] == "cut":
        out(cut_table(doc["cut_rows"]))
    if any(r["wrong"] for r in table_rows):
        return 1
    if spec.strict and any(r["emulator_bound"] for r in table_rows):
        out("--strict: some runs were emulator-bound; exit status 3")
        return 3
    return 0
