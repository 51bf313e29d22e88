"""``compare --stream SRC:DST``: how much of a collective each load-balancing
mode keeps when a competing stream takes one uplink's full rate mid-collective.

Every mode runs the collective twice per repetition, on the same seeds: alone,
and with the stream (workloads.stream) from a quarter into the measured size
for half of it.  A mode's *loss* is its efficiency alone minus with the stream;
beside it the stream's uplink's queue (p99 over the stream) and, for the
data-plane modes, how fast new flowlets left that queue (the stage's
timestamps: the queue crossing 4 frames, the first new flowlet placed
elsewhere).  The ranks are every host but SRC and DST.
"""

import contextlib
import os
import statistics

from emulator.errors import ConfigError


@contextlib.contextmanager
def during(s, stream, workload, sizes, hosts):
    """The competing stream (src, dst) on session ``s`` around a collective of
    ``sizes`` over ``hosts`` (after its warm-up of the first size); None: nothing."""
    if not stream:
        yield None
        return
    from emulator.experiments.workloads import collective
    from emulator.experiments.workloads.stream import Stream
    from traffic.frames import frame_len_for_mtu
    by = {h["name"]: h for h in s.topo["hosts"]}
    rate = min(by[h]["ports"][0]["rate_bps"] for h in hosts)
    warm = collective.expected_seconds(workload, len(hosts), list(sizes[:1]), rate)
    main = collective.expected_seconds(workload, len(hosts), list(sizes[-1:]), rate)
    with Stream(s, *stream, start_s=warm + main / 4, duration_s=main / 2,
                frame_len=frame_len_for_mtu(s.mtu)) as st:
        yield st


def reaction(run):
    """{mean, max} ms from the stream's uplink's queue building to new flowlets
    leaving by another uplink (the data-plane modes), or None."""
    a, up = run.get("adaptive"), (run.get("stream") or {}).get("uplink")
    if not a or not up:
        return None
    sw, port = up.split(":")
    return a["switches"].get(sw, {}).get("ports", {}).get(port, {}).get("queue_reaction_ms")


def rows(runs, modes):
    out = []
    for mode in modes:
        quiet = [r for r in runs if r["mode"] == mode and not r.get("stream")]
        busy = [r for r in runs if r["mode"] == mode and r.get("stream")]
        if not quiet or not busy:
            continue
        e0 = statistics.median(r["efficiency"] for r in quiet)
        e1 = statistics.median(r["efficiency"] for r in busy)
        q = [r["stream"]["queue_p99_ms"] for r in busy if "queue_p99_ms" in r["stream"]]
        react = [x for x in (reaction(r) for r in busy) if x]
        verdicts = [r["fidelity"]["verdict"] for r in quiet + busy]
        out.append({
            "mode": mode, "efficiency_alone": round(e0, 3), "efficiency_stream": round(e1, 3),
            "loss": round(e0 - e1, 3),
            "queue_p99_ms": round(statistics.median(q), 2) if q else None,
            "reaction_ms": round(statistics.median(x["mean"] for x in react), 3)
            if react else None,
            "wrong": sum(r["wrong"] for r in quiet + busy),
            "reordered": sum(r["reordered"] for r in quiet + busy),
            "emulator_bound": sum(v != "faithful" for v in verdicts),
            "verdict": "faithful" if all(v == "faithful" for v in verdicts) else
            "emulator-bound"})
    return out


def table(rows):
    lines = [f"{'mode':<16}{'effic alone':>12}{'with stream':>12}{'loss':>8}"
             f"{'queue p99 ms':>14}{'reaction ms':>13}{'reord':>8}{'#wrong':>8}  fidelity"]
    for r in rows:
        q = "-" if r["queue_p99_ms"] is None else f"{r['queue_p99_ms']:.1f}"
        rc = "-" if r["reaction_ms"] is None else f"{r['reaction_ms']:.2f}"
        lines.append(f"{r['mode']:<16}{r['efficiency_alone']:>12.3f}"
                     f"{r['efficiency_stream']:>12.3f}{r['loss']:>8.3f}{q:>14}{rc:>13}"
                     f"{r['reordered']:>8}{r['wrong']:>8}  {r['verdict']}")
    lines.append("loss: efficiency alone - with the stream (medians over repetitions); "
                 "queue p99: the stream's uplink's egress queue while it ran, in ms at "
                 "the link rate; reaction: from that uplink turning hot (16 frames queued or 5/8 "
                 "of its rate) to the first flowlet placed or moved elsewhere, timestamped "
                 "in the switch's data plane")
    return "\n".join(lines)


def main(fabric, args, modes, sizes, run_repetition, out=print):
    """The comparison; ``run_repetition``: compare's, which runs one mode once."""
    from emulator.dataplane.session import make_results_dir, write_json
    from emulator.experiments.options import job_seed
    from emulator.experiments.workloads.stream import parse
    from emulator.fabric import addressing
    topo = addressing.plan(fabric)
    stream = parse(args.stream, topo)
    hosts = [h["name"] for h in topo["hosts"] if h["name"] not in stream]
    if len(hosts) < 2:
        raise ConfigError("--stream", "the collective needs 2 hosts besides the stream's")
    base = make_results_dir(args.results, "compare")
    args.results = base
    job0 = job_seed(getattr(args, "job_seed", None))
    out(f"... competing stream {stream[0]} -> {stream[1]}; ranks {', '.join(hosts)}; "
        f"job seeds {job0}..{job0 + args.reps - 1}")
    runs = []
    for mode in modes:
        for rep in range(args.reps):
            for competing in (None, stream):
                r = run_repetition(fabric, mode, args.seed + rep, args.ring, args.qps, sizes,
                                   args, progress=out, job=job0 + rep, hosts=hosts,
                                   stream=competing)
                if competing and r["stream"].get("error"):
                    out(f"... {mode}: the stream failed: {r['stream']['error']}")
                runs.append(r)
    table_rows = rows(runs, modes)
    write_json(os.path.join(base, "compare.json"),
               {"fabric": fabric.name, "workload": args.workload, "sizes": sizes,
                "stream": {"src": stream[0], "dst": stream[1]}, "queue_ms": args.queue_ms,
                "flowlet_gap_ms": args.flowlet_gap_ms, "rows": table_rows, "runs": runs})
    out(f"# {args.workload} {args.sizes} on {fabric.name} with a competing stream; "
        f"results in {base}")
    out(table(table_rows))
    if any(r["wrong"] for r in table_rows):
        return 1
    if args.strict and any(r["emulator_bound"] for r in table_rows):
        out("--strict: some runs were emulator-bound; exit status 3")
        return 3
    return 0
