"""Placement policies x load-balancing modes under a shared cluster: ``compare jobs``.

Model.  ``compare jobs --workload jobs:FILE --placements packed,spread
--modes ecmp,dlb --reps N`` runs, for every repetition r (ECMP hash seed
``--seed`` + r, QP numbers ``--job-seed`` + r: the same draw for every
policy and mode of that repetition) and every (policy, mode), a fresh
fabric balancing with the mode, every job of the file placed by the policy
(explicit host lists are kept), all jobs together and then each alone
(``launch.run_shared`` with the baseline).  A repetition whose runs are not
all faithful is measured again on a fresh fabric with the same seeds, up to
``--retries`` times (the machine set its pace, not the fabric).

One row per (policy, mode): per job the median, min and max slowdown over
the repetitions, the medians of its iteration together and alone, its
retransmitted bytes; the repetitions' verdicts and #wrong; and per
repetition the larger of the jobs' slowdowns, so two modes can be held
against each other seed by seed (``worst``).  The queues are the run's
(30 ms, lossy: collisions cost drops and RC resends, and DCQCN reacts) unless
``--queue-ms`` says otherwise.
"""

import os
import statistics

from emulator.dataplane.observe import run_yaml
from emulator.dataplane.session import make_results_dir, write_json
from emulator.errors import ConfigError
from emulator.experiments.repeat import Mode, each_mode
from emulator.experiments.shared import jobsfile
from emulator.experiments.shared import launch as shared_launch
from emulator.experiments.spec.build import command_doc
from emulator.experiments.spec.options import compare_defaults, nic_lb, rank_transport
from emulator.experiments.workloads.collective import default_timeout_exp
from lab.modes import LB, Placement

QUEUE_MS = 30.0            # the run's queues: a comparison of jobs keeps them
DEFAULT_MODES = (LB.ECMP, LB.DLB)


def add_arguments(p):
    """``--placements``: the policies ``compare jobs`` runs (on the compare parser)."""
    p.add_argument("--placements", default=None, metavar="P,...",
                   help="compare jobs: placement policies to run every job of "
                        "--workload jobs:FILE with (" + ", ".join(Placement.names())
                        + "; default packed,spread), each under every --modes mode, "
                        "each job's slowdown against it alone (docs/shared-clusters.md)")


def prepare(args):
    """The run's 30 ms queues unless ``--queue-ms``; the first hash seed 1; modes ecmp
    and dlb unless ``--modes``."""
    compare_defaults(args, queue_ms=QUEUE_MS)
    if "modes" not in getattr(args, "given", set()):
        args.modes = ",".join(DEFAULT_MODES)


class Together(Mode):
    """One repetition of a (policy, mode): a fresh fabric, the jobs together, each alone."""

    def __init__(self, s, combo, shared, args, progress):
        super().__init__(s, f"{combo[0]}/{combo[1]}")
        self.combo, self.shared, self.args, self.progress = combo, shared, args, progress

    def repeat(self, r):
        s, spec = self.s, self.s.spec
        extra = dict(rank_transport(spec), **nic_lb(spec.lb), qpn_seed=spec.job_seed,
                     qps=spec.qps or 1, flowlet_gap_ms=self.args.flowlet_gap_ms,
                     timeout_exp=spec.rc_timeout or default_timeout_exp(s.queue_ms))
        doc = shared_launch.run_shared(s, self.shared, extra, baseline=True,
                                       progress=lambda m: self.progress(
                                           f"... [{self.mode}] {m}"))
        jobs = {j["name"]: {k: j.get(k) for k in (
            "iteration_s", "alone_s", "slowdown", "retransmitted_bytes", "wrong",
            "alone_wrong", "aborted", "hosts", "leaves", "crowding", "crowded_link",
            "fair_share_slowdown")} for j in doc["jobs"]}
        return {"placement": self.combo[0], "mode": self.combo[1], "seed": spec.hash_seed,
                "job_seed": spec.job_seed, "dir": s.dir, "jobs": jobs,
                "worst": max((j["slowdown"] or 0) for j in jobs.values()),
                "shared_links": doc["shared_links"], "uplinks": doc["uplinks"],
                "background": doc["background"], "verdicts": doc["verdicts"],
                "faithful": all(v == "faithful" for v in doc["verdicts"]),
                "wrong": doc["wrong"] + sum((j["alone_wrong"] or 0) for j in jobs.values())}

    def again(self, v, attempt):
        return not v["faithful"] and attempt < self.args.retries

    def line(self, v):
        per = ", ".join(f"{n} x{j['slowdown']:.3f}" if j["slowdown"] else f"{n} -"
                        for n, j in v["jobs"].items())
        return f"slowdowns {per}; verdicts {'/'.join(v['verdicts'])}"

    def finish(self, verdicts):
        return verdicts


def summarize(runs, combos, names):
    rows = []
    for placement, mode in combos:
        mine = [r for r in runs if r["placement"] == placement and r["mode"] == mode]
        jobs = {}
        for n in names:
            sd = [r["jobs"][n]["slowdown"] for r in mine if r["jobs"][n]["slowdown"]]
            jobs[n] = {"slowdown": _med(sd), "slowdown_min": min(sd, default=None),
                       "slowdown_max": max(sd, default=None),
                       "together_s": _med([r["jobs"][n]["iteration_s"] for r in mine]),
                       "alone_s": _med([r["jobs"][n]["alone_s"] for r in mine
                                        if r["jobs"][n]["alone_s"]]),
                       "retransmitted_bytes": _med([r["jobs"][n]["retransmitted_bytes"]
                                                    for r in mine]),
                       "fair_share_slowdown": _med([r["jobs"][n].get("fair_share_slowdown")
                                                    for r in mine])}
        rows.append({"placement": placement, "mode": mode, "reps": len(mine), "jobs": jobs,
                     "worst": [r["worst"] for r in mine], "worst_median": _med(
                         [r["worst"] for r in mine]),
                     "seeds": [r["seed"] for r in mine],
                     "shared_links": _med([len(r["shared_links"] or ()) for r in mine]),
                     "faithful": sum(r["faithful"] for r in mine),
                     "wrong": sum(r["wrong"] for r in mine)})
    return rows


def _med(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 4) if values else None


def table(rows, names):
    head = f"{'placement':9s} {'mode':8s} " + " ".join(f"{n + ' slowdown (min..max)':>26s}"
                                                     for n in names)
    lines = [head + f" {'worst med':>9s} {'#wrong':>6s} faithful"]
    for r in rows:
        cells = []
        for n in names:
            j = r["jobs"][n]
            cells.append("-".rjust(26) if j["slowdown"] is None else
                         f"{j['slowdown']:.3f} ({j['slowdown_min']:.3f}..{j['slowdown_max']:.3f})"
                         .rjust(26))
        worst = "-" if r["worst_median"] is None else f"{r['worst_median']:.3f}"
        lines.append(f"{r['placement']:9s} {r['mode']:8s} " + " ".join(cells)
                     + f" {worst:>9s} {r['wrong']:6d} {r['faithful']}/{r['reps']}")
    return "\n".join(lines)


def paired(rows, a, b):
    """Seed by seed, the larger slowdown under mode ``a`` minus under ``b`` (same policy)."""
    out = {}
    for r in rows:
        if r["mode"] != a:
            continue
        other = next((x for x in rows if x["placement"] == r["placement"]
                      and x["mode"] == b), None)
        if other:
            d = [x - y for x, y in zip(r["worst"], other["worst"])]
            out[r["placement"]] = {"differences": [round(x, 4) for x in d],
                                   "median": _med(d), "lower_in": sum(x > 0 for x in d)}
    return out


def main(spec, args, out=print):
    """``emulator compare jobs``: the exit status."""
    if not jobsfile.is_shared(spec.workload):
        raise ConfigError("--workload", "compare jobs needs several jobs: jobs:FILE or "
                          "simai:A,simai:B")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        try:
            LB.parse(m, "--modes")
        except ValueError as e:
            raise ConfigError("--modes", str(e))
    policies = [p.strip() for p in (args.placements or "packed,spread").split(",")
                if p.strip()]
    for p in policies:
        try:
            Placement.parse(p, "--placements")
        except ValueError as e:
            raise ConfigError("--placements", str(e))
    if args.reps < 1 or args.retries < 0:
        raise ConfigError("--reps/--retries", "--reps at least 1, --retries 0 or more")
    prepared = {p: shared_launch.prepare(spec.replace(job_placement=p)) for p in policies}
    names = [j.name for j in prepared[policies[0]].plan.jobs]
    for note in prepared[policies[0]].notes:
        out(f"... {note}")
    base = make_results_dir(spec.results, "compare")
    run_yaml.write(base, spec, command=command_doc("compare jobs", args))
    spec = spec.replace(results=base, baseline=True)
    job0 = spec.job_seed
    combos = [(p, m) for p in policies for m in modes]
    out(f"... {len(combos)} (placement, mode) pairs x {args.reps} repetitions; hash seeds "
        f"{spec.hash_seed}..{spec.hash_seed + args.reps - 1}, job seeds "
        f"{job0}..{job0 + args.reps - 1}")
    docs = each_mode(spec, lambda c: {"lb": c[1], "job_placement": c[0]}, combos, args.reps,
                     lambda s, c: Together(s, c, prepared[c[0]], args, out), out,
                     per_repeat=lambda r: {"hash_seed": spec.hash_seed + r,
                                           "job_seed": job0 + r},
                     label=lambda c: f"{c[0]}/{c[1]}")
    runs = [r for doc in docs for r in doc]
    rows = summarize(runs, combos, names)
    pairs = paired(rows, LB.ECMP, LB.DLB) if {LB.ECMP, LB.DLB} <= set(modes) else {}
    write_json(os.path.join(base, "compare.json"),
               {"fabric": spec.fabric.name, "workload": spec.workload, "jobs": names,
                "placements": policies, "modes": modes,
                "sizes": {n: {"size_scale": j.scale, "compute_scale": j.stretch}
                          for n, j in prepared[policies[0]].jobs.items()},
                "queue_ms": spec.queue_ms, "rows": rows, "ecmp_minus_dlb": pairs,
                "runs": runs})
    out(f"# jobs {', '.join(names)} on {spec.fabric.name}; results in {base}")
    out(table(rows, names))
    for p, d in pairs.items():
        out(f"{p}: the larger slowdown under ecmp minus under dlb, seed by seed: median "
            f"{d['median']}, dlb lower in {d['lower_in']} of {len(d['differences'])}")
    return 1 if any(r["wrong"] for r in rows) else 0
