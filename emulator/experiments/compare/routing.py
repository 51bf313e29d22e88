"""``emulator compare --routing minimal,valiant``: a dragonfly's routing modes side by side.

Model.  For each repetition (``--reps``; the permutation's seed is
``--seed`` + repetition, 1, 2, 3 by default) and each routing mode, a fresh
Session is built with ``Session(routing=mode)`` (the controller is told on
its command line, controller/dragonfly.py) and the pattern runs on it
(``--workload adversarial|permutation``, experiments.workloads.patterns):
every host writes ``--sizes`` bytes to one host at its link rate over RC,
with DCQCN (as RoCE NICs ship; ``--cc none`` turns it off) and, under
Valiant, the NICs changing entropy per flowlet.  Each mode's measurement is
printed beside its fluid ceiling (emulator.fabric.analysis.fluid): the mean of the
max-min fair rates over the mode's paths, and the optimum over minimal plus
Valiant paths.

A row of ``compare.json`` per (seed, mode): ``routing``, ``workload``,
``seed``, ``throughput_fraction`` (mean over hosts of accepted / injected),
``min_fraction``, ``ceiling`` (the mode's mean ceiling), ``of_ceiling``
(measured / ceiling), ``saturation`` (the mode's saturation ceiling),
``optimum``, the local and global link utilisation, ``nonminimal_share``
and the fidelity verdict.  Then the median over seeds per mode.  UGAL
(``ugal``, ``ugal-l``: the routers' data plane decides, dataplane.adaptive.ugal)
is held to the optimum: its paths are the minimal and the Valiant ones.
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


def add_arguments(p):
    p.add_argument("--routing", default=None, metavar="minimal,valiant",
                   help="instead of modes: a dragonfly's routing modes on --workload "
                        "adversarial|permutation, each beside its fluid ceiling, seeds "
                        "--seed.. over --reps (experiments/compare/routing_cmp.py)")


def parse_modes(text):
    modes = [m.strip() for m in text.split(",") if m.strip()]
    for m in modes:
        if m not in ROUTINGS:
            raise ConfigError("--routing", f"unknown routing {m!r} (one of "
                                           f"{', '.join(ROUTINGS)})")
    if not modes:
        raise ConfigError("--routing", "no routing mode given")
    return modes


def row(mode, rep):
    """One compare.json row from a pattern report."""
    c = rep["ceilings"]
    own = c.get(mode, c["optimum"])          # UGAL's: the optimum over minimal + Valiant
    ceiling = own["mean"]
    return {"routing": mode, "workload": rep["pattern"], "seed": rep["seed"],
            "throughput_fraction": rep["throughput_fraction"],
            "min_fraction": rep["min_fraction"], "ceiling": ceiling,
            "of_ceiling": round(rep["throughput_fraction"] / ceiling, 3) if ceiling else None,
            "saturation": own["saturation"], "optimum": c["optimum"]["mean"],
            "local_utilisation": rep["utilisation"]["local"]["mean"],
            "global_utilisation": rep["utilisation"]["global"]["mean"],
            "nonminimal_share": rep.get("nonminimal_share"),
            "wrong": rep["wrong"], "fidelity": rep["fidelity"]["verdict"]}


def medians(rows, modes):
    out = []
    for m in modes:
        mine = [r for r in rows if r["routing"] == m]
        if mine:
            out.append({"routing": m, "runs": len(mine),
                        "throughput_fraction": statistics.median(
                            r["throughput_fraction"] for r in mine),
                        "ceiling": statistics.median(r["ceiling"] for r in mine),
                        "faithful": sum(r["fidelity"] == "faithful" for r in mine)})
    return out


def table(rows):
    head = (f"{'seed':>5} {'routing':<8} {'accepted':>8} {'lowest':>7} {'ceiling':>7} "
            f"{'of ceil':>7} {'satur.':>7} {'optimum':>7} {'local':>6} {'global':>6} "
            f"{'nonmin':>6}  fidelity")
    lines = [head]
    for r in rows:
        seed = "-" if r["seed"] is None else str(r["seed"])
        lines.append(f"{seed:>5} {r['routing']:<8} {r['throughput_fraction']:8.3f} "
                     f"{r['min_fraction']:7.3f} {r['ceiling']:7.3f} "
                     f"{(r['of_ceiling'] or 0):7.2f} {r['saturation']:7.3f} "
                     f"{r['optimum']:7.3f} {r['local_utilisation'] or 0:6.3f} "
                     f"{r['global_utilisation'] or 0:6.3f} "
                     f"{r.get('nonminimal_share') or 0:6.3f}  {r['fidelity']}")
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
            timeout_exp=collective.default_timeout_exp(spec.queue_ms)),
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
    size = collective.parse_sizes(args.sizes or "1M")[0]
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
            out(table(rows[-1:]).splitlines()[-1])
    summary = medians(rows, modes)
    write_json(os.path.join(base, "compare.json"),
               {"fabric": fabric.name, "workload": workload, "sizes": [size],
                "queue_ms": spec.queue_ms, "cc": str(spec.cc), "rows": rows,
                "medians": summary, "runs": runs})
    out(f"# {workload}, {size} bytes per host, on {fabric.name}; results in {base}")
    out(table(rows))
    for m in summary:
        out(f"  median {m['routing']:<8} {m['throughput_fraction']:.3f} of injection "
            f"(ceiling {m['ceiling']:.3f}; {m['faithful']}/{m['runs']} faithful)")
    if any(r["wrong"] for r in rows):
        return 1
    if spec.strict and any(r["fidelity"] != "faithful" for r in rows):
        out("--strict: some runs were emulator-bound; exit status 3")
        return 3
    return 0
