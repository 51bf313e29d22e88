"""``emulator compare --routing minimal,valiant``: a dragonfly's routing modes side by side.

Model.  For each repetition (``--reps``; the permutation's seed is
``--seed`` + repetition, 1, 2, 3 by default) and each routing mode, a fresh
fabric is built for that mode (the controller is told on its command line,
controller/dragonfly.py) and the pattern runs on it (``--workload
adversarial|permutation``, experiments.workloads.patterns): every host writes
``--sizes`` bytes to one host at its link rate over RC, with DCQCN (as RoCE
NICs ship; ``--cc none`` turns it off) and, under Valiant and UGAL, the NICs
changing entropy per flowlet.  Each mode's saturated goodput (mean over
flows and lowest flow, in a window where every sender is backlogged:
experiments.measure.goodput) is printed beside the LP bounds of its path set
(emulator.fabric.analysis.bounds: minimal, Valiant's, both for UGAL).

A row of ``compare.json`` per (seed, mode): ``routing``, ``workload``,
``seed``, ``regime`` (lossless open-loop or closed-loop), ``goodput_mean``,
``goodput_min`` and ``window_s`` (None with ``no_window``, the reason),
``completion_mean`` and ``completion_min`` (the completion-based figure),
``path_set``, ``bound_min``, ``bound_mean``, ``of_bound`` (goodput_mean /
bound_mean), ``fair_share`` (the fixed split's max-min mean; None for UGAL),
the local and global link utilisation, ``nonminimal_share``, the transport's
``retransmitted_share``, ``timeouts``, ``naks``, ``cnps`` and ``failed_qps``,
``wrong`` and the fidelity verdict.  Then the median over seeds per mode.
"""

import os
import statistics

from emulator.dataplane.observe import run_yaml
from emulator.dataplane.session import make_results_dir, write_json
from emulator.errors import ConfigError
from emulator.experiments.repeat import Mode, each_mode
from emulator.experiments.spec.build import command_doc
from emulator.experiments.spec.options import compare_defaults, rank_transport
from emulator.experiments.workloads import collective, patterns
from lab.modes import LB, Routing

ROUTINGS = Routing.names()
DEFAULT_QUEUE_MS = 200.0      # 100 KB at 4 Mbit/s: room for DCQCN's marks before drops
# 3 MiB per host (756 frames of 4170 bytes): a flow alone on its link (a permutation's)
# still has a steady window after the closed loop's warm-up of 600 frame times
DEFAULT_SIZE = "3M"
# a window's ends fall between frames and queues drain into it: a goodput up to 3 % over
# its LP bound is within it; beyond that the measurement is wrong (no routing can do it)
BOUND_SLACK = 1.03


def add_arguments(p):
    p.add_argument("--routing", default=None, metavar="minimal,valiant",
                   help="instead of modes: a dragonfly's routing modes on --workload "
                        "adversarial|permutation, each's saturated goodput beside the LP "
                        "bounds of its paths, seeds --seed.. over --reps "
                        "(experiments/compare/routing.py)")


def parse_modes(text):
    modes = [m.strip() for m in text.split(",") if m.strip()]
    for m in modes:
        if m not in ROUTINGS:
            raise ConfigError("--routing", f"unknown routing {m!r} (one of "
                                           f"{', '.join(ROUTINGS)})")
    if not modes:
        raise ConfigError("--routing", "no routing mode given")
    return modes


def within_bounds(goodput, bound):
    """True if the window's lowest and mean flow are within their LP bounds (x
    BOUND_SLACK), None without a window."""
    if goodput["mean"] is None:
        return None
    return (goodput["min"] <= bound["bound_min"] * BOUND_SLACK
            and goodput["mean"] <= bound["bound_mean"] * BOUND_SLACK)


def row(mode, rep):
    """One compare.json row from a pattern report."""
    ps = patterns.path_set(mode)
    b, g, c, t = rep["bounds"][ps], rep["goodput"], rep["completion"], rep["transport"]
    fair = rep["fair_share"].get(mode)
    return {"routing": mode, "workload": rep["pattern"], "seed": rep["seed"],
            "regime": rep["regime"], "goodput_mean": g["mean"], "goodput_min": g["min"],
            "window_s": g["window"]["seconds"] if g["window"] else None,
            "no_window": g["no_window"],
            "completion_mean": c["mean"], "completion_min": c["min"],
            "path_set": ps, "bound_min": b["bound_min"], "bound_mean": b["bound_mean"],
            "of_bound": round(g["mean"] / b["bound_mean"], 3)
            if g["mean"] is not None and b["bound_mean"] else None,
            "within_bounds": within_bounds(g, b),
            "fair_share": fair["mean"] if fair else None,
            "local_utilisation": rep["utilisation"]["local"]["mean"],
            "global_utilisation": rep["utilisation"]["global"]["mean"],
            "nonminimal_share": rep.get("nonminimal_share"),
            "retransmitted_share": t["retransmitted_share"], "timeouts": t["timeouts"],
            "naks": t["naks_received"], "cnps": t["cnps_sent"],
            "failed_qps": len(rep["failed_qps"]),
            "wrong": rep["wrong"], "fidelity": rep["fidelity"]["verdict"]}


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def medians(rows, modes):
    out = []
    for m in modes:
        mine = [r for r in rows if r["routing"] == m]
        if mine:
            out.append({"routing": m, "runs": len(mine),
                        "windows": sum(r["goodput_mean"] is not None for r in mine),
                        "goodput_mean": _median(r["goodput_mean"] for r in mine),
                        "goodput_min": _median(r["goodput_min"] for r in mine),
                        "of_bound": _median(r["of_bound"] for r in mine),
                        "bound_mean": statistics.median(r["bound_mean"] for r in mine),
                        "faithful": sum(r["fidelity"] == "faithful" for r in mine)})
    return out


def _num(x, width, digits=3):
    return f"{x:{width}.{digits}f}" if x is not None else f"{'-':>{width}}"


def table(rows):
    head = (f"{'seed':>5} {'routing':<8} {'goodput':>7} {'lowest':>7} {'bound':>6} "
            f"{'b.low':>6} {'of bnd':>6} {'compl.':>6} {'fair':>6} {'global':>6} "
            f"{'nonmin':>6} {'retx':>5} {'fail':>4}  fidelity")
    lines = [head]
    for r in rows:
        seed = "-" if r["seed"] is None else str(r["seed"])
        lines.append(f"{seed:>5} {r['routing']:<8} {_num(r['goodput_mean'], 7)} "
                     f"{_num(r['goodput_min'], 7)} {_num(r['bound_mean'], 6)} "
                     f"{_num(r['bound_min'], 6)} {_num(r['of_bound'], 6, 2)} "
                     f"{_num(r['completion_mean'], 6)} {_num(r['fair_share'], 6)} "
                     f"{_num(r['global_utilisation'], 6)} "
                     f"{_num(r.get('nonminimal_share') or 0, 6)} "
                     f"{_num(r['retransmitted_share'], 5, 2)} {r['failed_qps']:4d}  "
                     f"{r['fidelity']}")
    for r in rows:
        if r["no_window"]:
            lines.append(f"  {r['routing']}" + (f" seed {r['seed']}" if r["seed"] else "")
                         + f": no steady window ({r['no_window']})")
        elif r.get("within_bounds") is False:
            lines.append(f"  {r['routing']}" + (f" seed {r['seed']}" if r["seed"] else "")
                         + f": goodput above its LP bound x {BOUND_SLACK} (a measurement "
                         "error: no routing over these paths can do it)")
    return "\n".join(lines)


def prepare(args):
    """A dragonfly's routing modes: queues of DEFAULT_QUEUE_MS, the adversarial pattern,
    DCQCN (as RoCE NICs ship), the first repetition's permutation seed 1."""
    compare_defaults(args, queue_ms=DEFAULT_QUEUE_MS)
    args.workload = args.workload or "adversarial"
    args.seed = args.hash_seed        # compare's --seed: here the permutation's
    args.hash_seed = None


class PatternRun(Mode):
    """One repetition of one routing mode: a fresh fabric, the pattern once."""

    def __init__(self, s, mode, size, out):
        super().__init__(s, mode)
        self.size, self.out = size, out

    def repeat(self, r):
        s, spec = self.s, self.s.spec
        doc = patterns.run_pattern(s, spec.workload, self.size, spec.seed, dict(
            rank_transport(spec), entropy=patterns.entropy(LB.ECMP, spec.routing),
            qpn_seed=spec.job_seed, qps=1,
            timeout_exp=spec.rc_timeout or collective.default_timeout_exp(spec.queue_ms)),
            progress=lambda m: self.out(f"...   {m}"))
        return dict(doc, routing=str(spec.routing), results_dir=s.dir)

    def finish(self, runs):
        return runs


def main(spec, args, out=print):
    """``compare --routing`` (``compare routing``): returns the exit status."""
    fabric, workload = spec.fabric, spec.workload
    modes = parse_modes(args.routing)
    if workload not in patterns.PATTERNS:
        raise ConfigError("--workload", f"--routing compares {' or '.join(patterns.PATTERNS)}")
    patterns.pairs_for(fabric, workload, 1)             # a fabric of groups, or exit 2
    if args.reps < 1:
        raise ConfigError("--reps", "at least 1")
    size = collective.parse_sizes(args.sizes or DEFAULT_SIZE)[0]
    base = make_results_dir(spec.results, "compare")
    run_yaml.write(base, spec, command=command_doc("compare routing", args))
    spec = spec.replace(results=base)
    rows, runs = [], []
    for rep in range(args.reps):       # every mode once per seed, side by side
        seed = spec.seed + rep
        out(f"... {workload}" + (f" seed {seed}" if workload == "permutation" else ""))
        for doc in each_mode(spec.replace(seed=seed, job_seed=spec.job_seed + rep), "routing",
                             modes, 1, lambda s, m: PatternRun(s, m, size, out), out,
                             per_repeat=lambda r: {}):
            runs += doc
            rows.append(row(doc[0]["routing"], doc[0]))
            for line in table(rows[-1:]).splitlines()[1:]:     # the row and its notes
                out(line)
    summary = medians(rows, modes)
    write_json(os.path.join(base, "compare.json"),
               {"fabric": fabric.name, "workload": workload, "sizes": [size],
                "queue_ms": spec.queue_ms, "cc": str(spec.cc), "rows": rows,
                "medians": summary, "runs": runs})
    warm = runs[0]["goodput"]["warmup_frames"]
    out(f"# {workload}, {size} bytes per host, on {fabric.name} ({rows[0]['regime']}); "
        f"saturated goodput / injection after a warm-up of {warm} frame times, "
        f"against the LP bounds of each mode's paths; results in {base}")
    out(table(rows))
    for m in summary:
        g = "no steady window" if m["goodput_mean"] is None else \
            f"{m['goodput_mean']:.3f} of injection ({m['of_bound']:.2f} of its bound " \
            f"{m['bound_mean']:.3f})"
        out(f"  median {m['routing']:<8} {g}; {m['windows']}/{m['runs']} with a window, "
            f"{m['faithful']}/{m['runs']} faithful")
    if any(r["wrong"] or r["failed_qps"] for r in rows):
        return 1
    if spec.strict and any(r["fidelity"] != "faithful" for r in rows):
        out("--strict: some runs were emulator-bound; exit status 3")
        return 3
    return 0
