"""``emulator compare --fabrics rail-optimized,rail-only``: the same jobs on both rail fabrics.

Model.  The fabrics are the presets of that name built from the same
``-P`` parameters (rail-only's; rail-optimized takes ``spines_per_plane``
as its ``spines`` and has no ``hb_rate``): the same hosts, one NIC per
rail, the same rail leaves and leaf uplinks; rail-optimized joins the rails
with shared spines, rail-only leaves them apart and moves cross-rail data
through each host's HB link (``links.hb``, ``hb_rate``).  For each
repetition (``--reps``; ECMP seed ``--seed`` + repetition) and fabric, one
Session runs each workload (``--workload allreduce|alltoall``, default
both) as one job-engine process (``workloads.rails``: one GPU per NIC, a
rank-aligned AllReduce, an all-to-all; PXN-staged on rail-only), one
warm-up iteration and ``ITERATIONS`` measured ones (their median is the
repetition's figure).  Beside each: the fluid time (the NICs' bytes at
their rate plus the HB stage), the bytes the HB links and the spines
carried, and the fidelity verdict.

Summary per (fabric, workload): medians over repetitions; then rail-only
against rail-optimized: the AllReduce's busbw ratio and the all-to-all's
slowdown (time ratio - 1).  Output: a table and
``<results>/<time>-compare/compare.json`` (``fabric``, ``workload``,
``sizes``, ``rows``, ``runs``, ``summary``).
"""

import json
import os
import statistics
import time

from emulator.dataplane.links import hb
from emulator.dataplane.observe import run_yaml
from emulator.dataplane.session import Session, make_results_dir, write_json
from emulator.errors import ConfigError, FabricError, RunFailed
from emulator.experiments.measure.watch import Watch
from emulator.experiments.spec.build import command_doc
from emulator.experiments.spec.options import compare_defaults
from emulator.experiments.training import rails
from emulator.experiments.training.launch import job_fidelity, run_engine
from emulator.experiments.workloads import collective
from emulator.experiments.workloads.collective import default_timeout_exp
from emulator.fabric import addressing, presets
from emulator.fabric.presets import parse_assignments
from lab.modes import Transport

FABRICS = ("rail-optimized", "rail-only")
ITERATIONS = 3
DEFAULT_QPS = 4                 # QPs per connection: ECMP's spread on the spines


def add_arguments(p):
    p.add_argument("--fabrics", default=None, metavar="rail-optimized,rail-only",
                   help="instead of modes: the same rank-aligned AllReduce and all-to-all "
                        "on each rail fabric, built from the same -P (rail-only's "
                        "parameters), with busbw, the all-to-all's slowdown and the HB "
                        "link's bytes (experiments/compare/rails_cmp.py)")


def parse_fabrics(text):
    names = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in names if f not in FABRICS]
    if bad or len(set(names)) != len(names) or not names:
        raise ConfigError("--fabrics", f"{bad[0]!r} is not a rail fabric" if bad else
                          "a comma list of distinct rail-optimized, rail-only")
    return names


def build(name, params):
    """Preset ``name`` from rail-only's ``params`` (name -> value strings)."""
    given = dict(params)
    if name == "rail-optimized":
        given.pop("hb_rate", None)
        if "spines_per_plane" in given:
            given["spines"] = given.pop("spines_per_plane")
    return presets.build(name, given)


def run_one(fabric, workload, session, args, job_seed, progress):
    """One workload on ``session``: its row."""
    topo = session.topo
    size = args.rail_size
    out_dir = os.path.join(session.dir, workload)
    os.makedirs(out_dir, exist_ok=True)
    doc = rails.job_document(topo, workload, size,
                             lambda h: f"/proc/{session.net.hosts[h].pid}/ns/net", ITERATIONS)
    doc.update({"mtu": session.mtu, "qps": args.qps or DEFAULT_QPS, "qpn_seed": job_seed,
                "timeout_exp": default_timeout_exp(session.queue_ms), "transport": Transport.RC})
    cfg, res = (os.path.join(out_dir, f"job.{x}.json") for x in ("config", "result"))
    with open(cfg, "w") as f:
        json.dump(doc, f)
    hosts = topo["hosts"]
    staged = rails.staged(topo) and workload == "alltoall"
    hb_bps = hb.rate_of(topo, hosts[0]) if staged else None
    ideal = rails.ideal_seconds(workload, size, topo, hb_bps)
    pids = [session.net.hosts[h["name"]].pid for h in hosts]
    hb_before = [hb.sent_bytes(p) for p in pids] if hb.rate_of(topo, hosts[0]) else None
    before = session.net.intf_counters()
    watch = Watch(session).start()
    t0 = time.monotonic()
    rc = run_engine(cfg, res, out_dir, 120 + 10 * (ITERATIONS + 1) * ideal, f"{workload} job")
    watch.stop()
    t1 = time.monotonic()
    after = session.net.intf_counters()
    if rc not in (0, 1) or not os.path.exists(res):
        raise RunFailed(f"the {workload} job failed (exit {rc}); log: {out_dir}/job.log")
    with open(res) as f:
        result = json.load(f)
    link = min(p["rate_bps"] for h in hosts for p in h["ports"])
    its = rails.measure(result, workload, size, topo, link)
    done = [r for r in its if r["time_s"] is not None]
    med = (lambda k: round(statistics.median(r[k] for r in done), 4) if done else None)
    row = {"fabric": _kind(fabric), "workload": workload,
           "size": size, "ranks": its[0].get("ranks") if its else None,
           "time_s": med("time_s"), "busbw_Mbps": med("busbw_Mbps"),
           "efficiency": med("efficiency"),
           "hb_stage_s": med("hb_stage_s") if staged else None,
           "ideal_s": round(ideal, 4), "iterations": its,
           "hb_bytes": (sum(hb.sent_bytes(p) for p in pids) - sum(hb_before))
           if hb_before is not None else None,
           "spine_bytes": spine_bytes(topo, before, after),
           "wrong": result["job"]["wrong"],
           "aborted": result["job"]["aborted"],
           "fidelity": job_fidelity(watch, result, (t0, t1))}
    progress(f"... {row['fabric']:15s} {workload:9s} {row['time_s']} s, busbw "
             f"{row['busbw_Mbps']} Mbit/s (ideal {row['ideal_s']} s), "
             f"{row['fidelity']['verdict']}")
    return row


def _kind(fabric):
    return next(k for k in FABRICS + ("multi-plane",) if fabric.name.startswith(k + "-"))


def spine_bytes(topo, before, after):
    """Bytes the spines sent down to leaves over the run (every spine port)."""
    total = 0
    for sw in topo["switches"]:
        if sw["kind"] != "spine":
            continue
        for p in sw["ports"]:
            a, b = before.get(p["intf"]), after.get(p["intf"])
            if a and b:
                total += b[0] - a[0]
    return total


def summarize(rows, fabrics, workloads):
    """Medians per (fabric, workload) and rail-only against rail-optimized."""
    out = {"per_fabric": [], "rail_only_vs_optimized": {}}
    med = {}
    for f in fabrics:
        for w in workloads:
            mine = [r for r in rows if r["fabric"] == f and r["workload"] == w
                    and r["time_s"] is not None]
            if not mine:
                continue
            m = {k: round(statistics.median(r[k] for r in mine), 4)
                 for k in ("time_s", "busbw_Mbps", "efficiency")}
            m.update(fabric=f, workload=w, runs=len(mine),
                     faithful=sum(r["fidelity"]["verdict"] == "faithful" for r in mine),
                     hb_stage_s=_median([r["hb_stage_s"] for r in mine]),
                     ideal_s=mine[0]["ideal_s"])
            med[(f, w)] = m
            out["per_fabric"].append(m)
    for w in workloads:
        a, b = med.get(("rail-only", w)), med.get(("rail-optimized", w))
        if a and b:
            out["rail_only_vs_optimized"][w] = {
                "busbw_ratio": round(a["busbw_Mbps"] / b["busbw_Mbps"], 4),
                "slowdown": round(a["time_s"] / b["time_s"] - 1, 4)}
    return out


def _median(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 4) if xs else None


def table(summary):
    lines = [f"{'fabric':15s} {'workload':9s} {'time s':>8s} {'ideal s':>8s} "
             f"{'busbw Mb/s':>10s} {'eff':>6s} {'HB s':>6s}  faithful"]
    for m in summary["per_fabric"]:
        hb_s = f"{m['hb_stage_s']:6.3f}" if m["hb_stage_s"] is not None else f"{'-':>6s}"
        lines.append(f"{m['fabric']:15s} {m['workload']:9s} {m['time_s']:8.3f} "
                     f"{m['ideal_s']:8.3f} {m['busbw_Mbps']:10.2f} {m['efficiency']:6.3f} "
                     f"{hb_s}  {m['faithful']}/{m['runs']}")
    for w, c in summary["rail_only_vs_optimized"].items():
        lines.append(f"rail-only vs rail-optimized, {w}: busbw x {c['busbw_ratio']:.3f}, "
                     f"time {100 * c['slowdown']:+.1f} %")
    return "\n".join(lines)


def prepare(args):
    """``compare fabrics`` builds its own presets from -P (rail-only's parameters):
    compare's deep queues, and the spec's fabric is rail-only's."""
    if args.fabric or args.preset not in (None, "rail-only", "rail-optimized"):
        raise FabricError("--fabrics builds its own presets from -P (rail-only's "
                          "parameters): no -f FILE, no -p other than theirs")
    args.preset = "rail-only"               # -P checked as rail-only's
    compare_defaults(args)


def main(spec, args, out=print):
    """``compare --fabrics`` (``compare fabrics``): returns the exit status."""
    names = parse_fabrics(args.fabrics)
    params = parse_assignments(args.param)
    fabrics = [build(n, params) for n in names]
    for f in fabrics:
        rails.gpus(addressing.plan(f))                    # one NIC per rail, or exit 2
    workloads = [args.workload] if args.workload else list(rails.WORKLOADS)
    if any(w not in rails.WORKLOADS for w in workloads):
        raise ConfigError("--workload", "--fabrics runs allreduce or alltoall")
    if args.reps < 1:
        raise ConfigError("--reps", "at least 1")
    args.rail_size = collective.parse_sizes(args.sizes or "2M")[-1]
    base = make_results_dir(spec.results, "compare")
    run_yaml.write(base, spec, command=command_doc("compare fabrics", args))
    rows = []
    for rep in range(args.reps):
        for name, fabric in zip(names, fabrics):
            out(f"... repetition {rep + 1}: {fabric.name}")
            variant = spec.replace(fabric=fabric, fabric_source={"preset": name,
                                                                 "params": list(args.param)},
                                   results=base, hash_seed=spec.hash_seed + rep)
            with Session(variant, progress=lambda m: out(f"...   {m}")) as s:
                for w in workloads:
                    rows.append(dict(run_one(fabric, w, s, args, spec.job_seed + rep, out),
                                     rep=rep + 1, results_dir=s.dir))
    summary = summarize(rows, names, workloads)
    write_json(os.path.join(base, "compare.json"),
               {"fabric": ",".join(f.name for f in fabrics), "workload": ",".join(workloads),
                "sizes": [args.rail_size], "queue_ms": spec.queue_ms,
                "params": {f.name: dict(f.params) for f in fabrics},
                "rows": [{k: v for k, v in r.items() if k != "iterations"} for r in rows],
                "runs": rows, "summary": summary})
    out(f"# {','.join(workloads)}, {args.rail_size} bytes per GPU; results in {base}")
    out(table(summary))
    if any(r["wrong"] or r["aborted"] for r in rows):
        return 1
    if spec.strict and any(r["fidelity"]["verdict"] != "faithful" for r in rows):
        out("--strict: some runs were emulator-bound; exit status 3")
        return 3
    return 0
