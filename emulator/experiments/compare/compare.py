"""``emulator compare``: one collective, one fabric, every load-balancing mode.

Model.  For each mode (``ecmp|flowlet|dlb|spray``, controller/lb.py) and each
repetition, a fresh Session is built with ``Session(lb=mode)`` (the
controller is told on its command line) and one hash seed for every switch
(``seed0 + repetition``: another draw of ECMP's hash), the collective runs
with the NIC entropy the mode needs (traffic.nic.entropy: ``spray`` for spray,
``flowlet`` for flowlet, the QP's port otherwise), and a sampler reads the
switch interface counters every ``SAMPLE_S`` while it runs.  Then:

* busbw and efficiency (busbw / host link rate) of the largest size;
* per-uplink utilisation (leaf -> spine, over the active window): max/mean
  and Jain's fairness index (sum x)^2 / (n sum x^2);
* packets the receivers counted reordered, and #wrong (lost chunks);
* the spread over repetitions (min..max of the load-bound efficiency).

ECMP's efficiency is set beside its balls-into-bins expectation for the same
flows and paths (``ecmp_expectation``): every QP of every cross-leaf ring hop
hashes onto one of the leaf's uplinks; a ring runs at the pace of its most
loaded link, so the efficiency is 1 / max(1, max link load / QPs).

Collision model (docs/load-balancing.md): every link is shaped (TBF on both
ends) and compare runs with deep egress queues (``--queue-ms``, default
2000 ms) as a stand-in for the lossless (PFC) fabric RoCE runs on: two flows
hashed onto one uplink share its rate, their ring steps take twice as long,
and the measured busbw falls -- nothing is lost, nothing is computed.
``load_bound_eff = efficiency / max(1, max per-uplink utilisation)`` stays
in the output as a cross-check (with shaped links it equals the measured
efficiency up to noise).

The sweeps (``--sweep-qps``, ``--sweep-rings``) run under ECMP only.
Everything goes to ``<results>/compare-<time>/``: compare.json, compare.png.

``--planes`` compares fabrics instead of modes: HPN dual-plane against the
single-plane fabric on the same hosts and workload, with one shared hash seed
and with per-switch seeds (emulator/experiments/compare/planes.py).
"""

import os
import random

from emulator.fabric.addressing import home_leaf
from emulator.errors import ConfigError
from emulator.experiments.measure.watch import CounterSampler
from emulator.experiments.compare.lb_table import (disturbed_attempt, should_repeat, summarize,
                                                   table)
from emulator.experiments.spec.options import (FAILOVER_MODES, LB_MODES, add_adaptive_args,
                                          add_capture_arg, add_fidelity_args, nic_lb,
                                          workload_choice)

MODES = LB_MODES
DEFAULT_MODES = ("ecmp", "flowlet", "dlb", "spray")
ENTROPY = {m: nic_lb(m) for m in MODES}          # {mode: the NICs' side of it}
SAMPLE_S = 0.1
RINGS = ("naive", "topology", "strided")


# ---- pure helpers (unit-tested) ----------------------------------------------

def jain(xs):
    """Jain's fairness index of ``xs``: 1 = all equal, 1/n = one takes all."""
    xs = list(xs)
    sq = sum(x * x for x in xs)
    return (sum(xs) ** 2 / (len(xs) * sq)) if xs and sq > 0 else None


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


def ring_connections(topo, ring):
    """[(src leaf, dst leaf)] of the ring's cross-leaf hops."""
    hl = host_leaves(topo)
    n = len(hl)
    if ring in ("naive", "topology"):
        from traffic.ranks.collectives import ring_order
        order = list(range(n)) if ring == "naive" else ring_order(
            range(n), {i: leaf for i, (_, leaf) in enumerate(hl)})
    else:
        order = ring
    hops = [(hl[order[i]][1], hl[order[(i + 1) % n]][1]) for i in range(n)]
    return [h for h in hops if h[0] != h[1]]


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


# ---- one run on a real fabric (root) -------------------------------------------

def run_one(fabric, mode, seed, ring, qps, sizes, args, progress=print, job=None, hosts=None,
            disturb=None, warmup=1):   # report.html, the page of --ui (args.ui_view)
    """One Session whose controller balances with ``mode``; returns the run's measurements.
    ``seed``: every switch's ECMP hash seed; ``job``: the job's QPN seed (new QPs);
    ``hosts``: the ranks (default all); ``disturb``: ("stream", (src, dst)) or ("cut",
    link) during the collective (stream_cmp)."""
    from emulator.experiments.compare.stream import during
    from emulator.experiments.ui.live import attached
    from emulator.experiments.workloads import collective
    from emulator.dataplane.session import Session
    with Session(fabric, results_base=args.results, seed=seed, lb=mode,
                 flowlet_frames=getattr(args, "flowlet_frames", None),
                 queue_ms=args.queue_ms, mtu=getattr(args, "mtu", 4096),
                 failover=getattr(args, "failover", "fast-failover"),
                 capture=getattr(args, "capture", None)) as s, attached.of(args, s, f"lb={mode}"):
        ranks = dict(s.topo, hosts=[h for h in s.topo["hosts"] if hosts is None
                                    or h["name"] in hosts])
        order = ring_indices(ranks, ring)
        extra = {**nic_lb(mode), "flowlet_gap_ms": args.flowlet_gap_ms,
                 "qpn_seed": job}
        sampler = CounterSampler(s.net, SAMPLE_S)
        sampler.start()
        try:
            with during(s, disturb, args.workload, sizes, hosts) as competing:
                rep = collective.run_collective(
                    s, args.workload, sizes, qps=qps, ring=order, rank_extra=extra,
                    warmup=warmup, hosts=hosts,
                    faulted=competing.faulted() if competing else ())
        finally:
            sampler.stop()
        series = uplink_series(s.topo, sampler.samples)
        row = rep["rows"][-1]
        out = {"mode": mode, "seed": seed, "job_seed": job, "ring": ring, "qps": qps,
               "dir": s.dir,
               "busbw_Mbps": row["busbw_Mbps"], "efficiency": row["efficiency"],
               "time_s": row["time_s"], "wrong": sum(r["wrong"] for r in rep["rows"]),
               "reordered": collective.rank_totals(os.path.join(s.dir, "collective")),
               "series": series, "table": rep["table"], "fidelity": rep["fidelity"]}
        out.update({k: v for k, v in spread(series).items()}, **(
            {disturb[0]: competing.result()} if competing else {}))
        out["load_bound_eff"] = load_bound(out["efficiency"], out.get("per_uplink"))
        spines = len({p[3] for p in uplinks(s.topo)})
        if mode == "ecmp":
            out["expected"] = round(ecmp_expectation(
                ring_connections(ranks, order), spines, qps)["efficiency"], 3)
    # set when the session closed: handler exceptions or OpenFlow errors
    out["controller_problems"] = s.results.get("controller", {}).get("problems", [])
    out["adaptive"] = s.results.get("adaptive")
    if s.results.get("captures"):
        out["captures"] = s.results["captures"]
        progress(f"... {mode}: captures in {s.dir}: " + ", ".join(sorted(out["captures"])))
    progress(f"... {mode:8s} ring {ring} qps {qps} seed {seed} job {job}: busbw "
             f"{out['busbw_Mbps']:.2f} Mb/s, efficiency {out['efficiency']:.3f}, "
             f"uplink max/mean {out.get('max_over_mean')}, reordered {out['reordered']}, "
             f"#wrong {out['wrong']}, {out['fidelity']['verdict']}")
    return out


def run_repetition(fabric, mode, seed, ring, qps, sizes, args, progress=print, job=None,
                   **kw):
    """``run_one``, run again with the same seeds (up to ``--retries`` times) while the
    machine, not the links, set its pace (lb_table.should_repeat)."""
    disturbed, retries = [], getattr(args, "retries", 1)
    for attempt in range(retries + 1):
        r = run_one(fabric, mode, seed, ring, qps, sizes, args, progress=progress, job=job,
                    **kw)
        if not should_repeat(r, attempt, retries):
            break
        disturbed.append(disturbed_attempt(r))
        progress(f"... {mode} seed {seed} job {job}: {r['fidelity']['verdict']} "
                 f"({'; '.join(r['fidelity'].get('reasons', []))[:160]}): the machine's "
                 "pace, not the fabric's; repeating with the same seeds")
    r["disturbed_attempts"] = disturbed
    return r


def plot(runs, path):
    """Per-uplink utilisation over time, one panel per mode (first repetition)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    firsts = {}
    for r in runs:
        firsts.setdefault((r["mode"], str(r["ring"]), r["qps"]), r)
    fig, axes = plt.subplots(len(firsts), 1, figsize=(9, 2.3 * len(firsts)), squeeze=False,
                             sharex=True)
    for ax, ((mode, ring, qps), r) in zip(axes[:, 0], firsts.items()):
        for name, s in sorted(r["series"].items()):
            ax.plot([i * SAMPLE_S for i in range(len(s))], s, lw=0.8, label=name)
        ax.set_title(f"{mode}, ring {ring}, {qps} QP(s): efficiency {r['efficiency']:.2f}",
                     fontsize=9)
        ax.set_ylabel("uplink util")
        ax.set_ylim(0, 1.3)
    axes[-1, 0].set_xlabel("s (samples every 100 ms)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def add_arguments(p):
    from emulator.experiments.spec.options import add_cc_param_arg, add_ecn_at_arg
    p.add_argument("--planes", action="store_true",
                   help="instead of modes: HPN dual-plane vs the single-plane fabric (preset "
                        "dual-plane, planes=2 vs planes=1), same hosts and workload, one shared "
                        "hash seed and per-switch seeds: busbw, per-link byte spread, egress "
                        "queue backlog per tier (emulator/experiments/compare/planes.py)")
    from emulator.experiments.compare.lossless import add_arguments as add_lossless_args
    add_lossless_args(p)
    p.add_argument("--cc", default=None, metavar="none,dcqcn",
                   help="instead of modes: congestion control at the senders on an incast "
                        "(or alltoall), ECN marking from --ecn: bottleneck queue, "
                        "utilisation, Jain fairness, CNPs, marks (experiments/compare/)")
    p.add_argument("--ecn", default=None, metavar="K|KMIN:KMAX:PMAX",
                   help="--cc: ECN marking at every switch port (default 100KB:400KB:1, scaled down to fit shallow --queue-ms: Kmax at most half a queue)")
    add_ecn_at_arg(p)
    add_cc_param_arg(p)
    p.add_argument("--hosts", default=None,
                   help="--cc: comma-separated hosts (incast: the first is the root)")
    p.add_argument("--modes", default=",".join(DEFAULT_MODES),
                   help="comma list of " + "|".join(MODES) + " (default "
                        + ",".join(DEFAULT_MODES) + ")")
    add_adaptive_args(p)
    p.add_argument("--stream", default=None, metavar="SRC:DST",
                   help="each mode with and without a competing best-effort stream from "
                        "SRC to DST at an uplink's full rate, from a quarter into the "
                        "collective for half of it (SRC, DST are not ranks)")
    p.add_argument("--cut", default=None, metavar="LINK",
                   help="each mode with and without LINK cut from a quarter into the "
                        "collective for half of it (1 ms modelled detection)")
    p.add_argument("--workload", default=None, type=workload_choice,
                   metavar="{allreduce,allgather,reducescatter,alltoall,incast,simai:FILE}",
                   help="collective (default allreduce; alltoall with --planes; incast "
                        "with --cc), or a training job: simai:FILE (each mode's iteration "
                        "time; experiments/compare/training_cmp.py)")
    from emulator.experiments.spec.options import add_training_args
    add_training_args(p)
    p.add_argument("--sizes", default=None, help="collective sizes (the largest is reported; "
                                                "default 2M)")
    p.add_argument("--reps", type=int, default=3, help="repetitions per mode (seeds)")
    p.add_argument("--seed", "--hash-seed", dest="seed", type=int, default=None,
                   help="ECMP hash seed of the first repetition, one for every switch "
                        "(default 1; 101 with --planes, above the hosts' bond seeds)")
    from emulator.experiments.spec.options import add_job_seed_arg
    add_job_seed_arg(p)
    p.add_argument("--failover", choices=FAILOVER_MODES,
                   default="fast-failover", help="repair mode (default fast-failover)")
    p.add_argument("--ring", default="strided", choices=RINGS,
                   help="ring order of the mode comparison (default strided: every hop "
                        "crosses the spines)")
    p.add_argument("--qps", type=int, default=None,
                   help="QPs per connection (default 1, 8 with --planes)")
    p.add_argument("--seedings", default="shared,per-switch",
                   help="--planes: hash seedings to run, comma list of shared|per-switch")
    p.add_argument("--sample-ms", type=float, default=20.0,
                   help="--planes, --cc: interval of the egress-queue sampler (ms)")
    p.add_argument("--retries", type=int, default=1,
                   help="run a repetition again with the same seeds, up to this many "
                        "times, when the machine set its pace (not faithful) or, with "
                        "--planes, it lost packets outside the switch queues")
    p.add_argument("--sweep-qps", default="", help="ECMP QP sweep, e.g. 1,2,4,8")
    p.add_argument("--sweep-rings", default="", help="ECMP ring sweep, e.g. topology,strided")
    p.add_argument("--flowlet-gap-ms", type=float, default=25.0,
                   help="NIC idle gap that starts a new flowlet (ms)")
    p.add_argument("--queue-ms", type=float, default=None,
                   help="egress queue per link, ms at link rate (default 2000: a deep, "
                        "lossless stand-in for PFC, so collisions slow flows, not drop them; "
                        "30 with --lossless, where the lossy fabric drops)")
    p.add_argument("--results", default="results", metavar="DIR")
    add_fidelity_args(p)
    add_capture_arg(p)


def main(fabric, args, out=print):
    """``emulator compare``: returns the exit status."""
    from emulator.experiments.workloads.collective import parse_sizes
    from emulator.dataplane.session import make_results_dir, write_json
    if getattr(args, "queue_ms", None) is None:
        args.queue_ms = 30.0 if getattr(args, "lossless", None) else 2000.0
    if getattr(args, "lossless", None):
        from emulator.experiments.compare import lossless as lossless_cmp
        return lossless_cmp.main(fabric, args, out)
    if getattr(args, "planes", False):
        from emulator.experiments.compare import planes
        args.workload = args.workload or "alltoall"
        args.sizes = args.sizes or "2M"
        args.qps = args.qps or 8
        args.seed = 101 if args.seed is None else args.seed
        return planes.main(args, out)
    if getattr(args, "cc", None):
        from emulator.experiments.compare import congestion
        return congestion.main(fabric, args, out)
    from emulator.experiments.spec.options import check_capture
    check_capture(args, fabric)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ConfigError("--modes", f"unknown mode {bad[0]!r}" if bad else "no mode given")
    args.workload = getattr(args, "workload", None) or "allreduce"
    if args.workload.startswith("simai:"):
        from emulator.experiments.compare import training as training_cmp
        if args.reps < 1:
            raise ConfigError("--reps", "at least 1")
        args.seed = 1 if args.seed is None else args.seed
        return training_cmp.main(fabric, args, modes, ENTROPY, out)
    if args.workload == "alltoall":
        raise ConfigError("--workload", "alltoall only with --planes (the modes' ECMP "
                                        "expectation models a ring)")
    args.qps = getattr(args, "qps", None) or 1
    args.sizes = args.sizes or "2M"
    args.seed = 1 if args.seed is None else args.seed
    if args.reps < 1:
        raise ConfigError("--reps", "at least 1")
    if getattr(args, "retries", 1) < 0:
        raise ConfigError("--retries", "0 or more")
    sizes = parse_sizes(args.sizes)
    if getattr(args, "stream", None) or getattr(args, "cut", None):
        from emulator.experiments.compare import stream as stream_cmp
        return stream_cmp.main(fabric, args, modes, sizes, run_repetition, out)
    plan = [(m, args.ring, args.qps) for m in modes]
    plan += [("ecmp", args.ring, int(q)) for q in args.sweep_qps.split(",") if q.strip()
             and ("ecmp", args.ring, int(q)) not in plan]
    plan += [("ecmp", r.strip(), args.qps) for r in args.sweep_rings.split(",") if r.strip()
             and ("ecmp", r.strip(), args.qps) not in plan]
    from emulator.experiments import calibrate
    from emulator.experiments.measure import budget
    from emulator.fabric import addressing
    from traffic.roce.frames import frame_len_for_mtu
    frame_len = frame_len_for_mtu(args.mtu)
    calibrate.say_load(budget.collective_streams(addressing.plan(fabric), frame_len), frame_len,
                       "auto", out, fabric)
    base = make_results_dir(args.results, "compare")
    args.results = base                     # every session's directory goes inside
    from emulator.experiments.spec.options import job_seed
    job0 = job_seed(getattr(args, "job_seed", None))
    out(f"... job seeds {job0}..{job0 + args.reps - 1} (QP numbers of each repetition's job; "
        f"--job-seed {job0} replays them)")
    runs = []
    for mode, ring, qps in plan:
        for rep in range(args.reps):
            runs.append(run_repetition(fabric, mode, args.seed + rep, ring, qps, sizes, args,
                                       progress=out, job=job0 + rep))
    rows = summarize(runs)
    text = table(rows)
    write_json(os.path.join(base, "compare.json"),
               {"fabric": fabric.name, "workload": args.workload, "sizes": sizes,
                "queue_ms": args.queue_ms, "flowlet_gap_ms": args.flowlet_gap_ms,
                "rows": rows, "runs": runs})
    plot(runs, os.path.join(base, "compare.png"))
    out(f"# {args.workload} {args.sizes} on {fabric.name}; results in {base}")
    out(text)
    if any(r["wrong"] for r in rows):
        return 1
    if args.strict and any(r["emulator_bound"] for r in rows):
        out("--strict: some runs were emulator-bound; exit status 3")
        return 3
    return 0
