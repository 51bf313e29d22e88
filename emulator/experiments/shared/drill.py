"""A fault during several jobs: ``drill --workload jobs:FILE --fault SPEC``.

Model.  Per failover mode one fabric; per repeat every job of the file (and
its background flows) together in one job engine (``launch.run_shared``),
and the fault schedule injected while they run, its times counted from the
engine's start (its ``ready``; the jobs' own clock, as the single job's drill
counts, ``drill.workload``).  Without ``--at`` the fault comes in the middle
of the first job's second iteration (by its analytic estimate and start).
Per job and repeat (``drill.stats.training_verdict`` on the job's own
document): the iteration that held the fault against the median of its
others (``slowdown``), its retransmitted packets, timeouts and whether one
of its QPs ran out of retries (the job died); so the table says which job
lost what.  Over the repeats, per mode and job: median and max slowdown,
median retransmissions, deaths.
"""

import json
import os
import time

from emulator.dataplane.observe import run_yaml
from emulator.errors import ConfigError
from emulator.experiments.drill.drill import parse_modes, schedule_from
from emulator.experiments.drill.stats import training_verdict, workload_summary
from emulator.experiments.drill.traffic import faulted_links
from emulator.experiments.drill.workload import TrainingDrill
from emulator.experiments.repeat import each_mode
from emulator.experiments.shared import launch as shared_launch
from emulator.experiments.spec.build import command_doc
from emulator.fabric import addressing, switch_agent

ITERATIONS = 3             # per job: one disturbed, two to hold it against


class SharedDrill(TrainingDrill):
    """One failover mode's fabric under every job of a shared cluster."""

    def __init__(self, s, mode, spec, args, events, out, shared):
        super().__init__(s, mode, spec, args, events, out, None, None, None)
        self.shared = shared

    def repeat(self, r):
        s = self.s
        doc, injected = self.scheduled("shared", lambda: shared_launch.run_shared(
            s, self.shared, self.job_extra, progress=self.say,
            faulted=faulted_links(self.events, s.topo)), "the shared run")
        t_fault = injected[0]["t_ns"]
        jobs = {j["name"]: dict(training_verdict(j["training"], t_fault),
                                retransmitted_bytes=j["retransmitted_bytes"])
                for j in doc["jobs"]}
        return {"jobs": jobs, "events": injected, "fidelity": doc["fidelity"]["verdict"],
                "fidelity_detail": doc["fidelity"], "shared_links": doc["shared_links"],
                "background": doc["background"]}

    def line(self, v):
        return "; ".join(f"{n}: iteration {j['disturbed']} x{j['slowdown']}, "
                         f"{j['retransmitted']} retransmitted"
                         f"{', DIED' if j['job_died'] else ''}" for n, j in v["jobs"].items())

    def finish(self, reps):
        names = list(reps[0]["jobs"]) if reps else []
        per_job = {n: workload_summary([dict(r["jobs"][n], fidelity=r["fidelity"])
                                        for r in reps]) for n in names}
        return {"mode": self.mode, "results_dir": self.s.dir,
                "events": [vars(e) for e in self.events], "repeats": reps,
                "jobs": per_job, "summary": _overall(per_job, reps)}


def _overall(per_job, reps):
    slow = [j["slowdown_max"] for j in per_job.values() if j["slowdown_max"] is not None]
    return {"repeats": len(reps), "slowdown_max": max(slow, default=None),
            "jobs_died": sum(j["jobs_died"] for j in per_job.values()),
            "wrong": sum(j["wrong"] for j in per_job.values()),
            "faithful": sum(r["fidelity"] == "faithful" for r in reps)}


def table(results):
    lines = [f"{'mode':14s} {'job':10s} {'slowdown med':>12s} {'max':>6s} {'retx':>6s} "
             f"{'RTOs':>5s} {'job died':>8s} {'#wrong':>6s} faithful"]
    f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for r in results:
        for n, m in r["jobs"].items():
            lines.append(f"{r['mode']:14s} {n:10s} {f(m['slowdown_median']):>12s} "
                         f"{f(m['slowdown_max']):>6s} {m['retransmitted_median']:6d} "
                         f"{m['timeouts_median']:5d} {m['jobs_died']:>4d}/{m['repeats']:<3d} "
                         f"{m['wrong']:6d} {m['faithful']}/{m['repeats']}")
    return "\n".join(lines)


def main(spec, args, out=print):
    """``emulator drill --workload jobs:FILE``: returns the exit status."""
    modes = parse_modes(args.failover)
    if args.repeat < 1:
        raise ConfigError("--repeat", "at least 1")
    if not (args.fault or args.scenario):
        raise ConfigError("--fault", "a drill under several jobs needs --fault SPEC (or "
                          "--scenario FILE): which link or switch to break")
    if switch_agent.for_run(spec.switch_agent, spec.fabric, spec.controller) is not None:
        raise ConfigError("--switch-agent", "a drill under several jobs runs with ideal "
                          "switch agents only (each job has its own time scale)")
    its = args.iterations or ITERATIONS
    shared = shared_launch.prepare(spec.replace(iterations=its))
    short = [j.name for j in shared.plan.jobs
             if shared.jobs[j.name].options.iterations < 2]
    if short:
        raise ConfigError(shared.plan.job(short[0]).where("iterations"),
                          "a drill needs 2 iterations or more of every job (one disturbed, "
                          "one to compare)", shared.plan.source)
    first = shared.plan.jobs[0]
    if args.at is None:       # the middle of the first job's second iteration
        args.at = first.start_s + 1.5 * shared.estimates[first.name]["iteration_s"]
    topo = addressing.plan(spec.fabric)
    events = schedule_from(args, topo, out)
    base = os.path.abspath(os.path.join(spec.results, time.strftime("drill-%Y%m%d-%H%M%S")))
    os.makedirs(base, exist_ok=False)
    run_yaml.write(base, spec, command=command_doc("drill workload", args))
    out(f"... job seed {spec.job_seed}; {len(shared.plan.jobs)} jobs, fault at "
        f"{args.at:.2f}s of the engine's clock")
    results = each_mode(spec.replace(results=base, iterations=its), "failover", modes,
                        args.repeat, lambda s, m: SharedDrill(s, m, spec, args, events, out,
                                                              shared), out)
    with open(os.path.join(base, "drill.json"), "w") as f:
        json.dump({"workload": spec.workload, "modes": results}, f, indent=1)
    out(table(results))
    out(f"results: {base}/drill.json")
    return 1 if any(r["summary"]["jobs_died"] or r["summary"]["wrong"] for r in results) \
        else 0
