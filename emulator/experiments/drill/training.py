"""A failover drill under a training job: what does the fault cost an iteration?

Model.  ``drill --workload simai:FILE --fault SPEC`` runs, per failover mode,
one fabric and per repeat one training job (``workloads.training``) of
``--iterations`` iterations (default 3), and injects the fault schedule
while it runs: the events' times count from the moment the job engine
starts the ranks (it says ``ready`` in its log).  The engine's op times
count from its own start on CLOCK_MONOTONIC, the injector's clock, so the
iteration whose window holds the first fault is known.  Per repeat:

- the disturbed iteration's time against the median of the others
  (``slowdown``), and its exposed communication against theirs;
- the RC transport's retransmissions and timeouts over the job;
- whether a QP ran out of retries (the job died) and #wrong.

Over the repeats, per mode, the table ``drill_collective`` prints for a
collective: median and max slowdown, and how many jobs died.  Without
``--at`` the fault comes in the middle of the second iteration (by the
analytic estimate), so the first and the last are undisturbed.
"""

import json
import os
import time

from emulator.errors import ConfigError

DEFAULT_ITERATIONS = 3


def started(log_path):
    """True once the job engine started the ranks (its log says ``ready``)."""
    from emulator.experiments.drill.collective import log_says
    return log_says(log_path, "ready")


def judge(t, t_fault_ns):
    """One repeat's verdict from the ``training`` document (pure)."""
    its = t["per_iteration"]
    k = None
    for i, it in enumerate(its):
        if t["t0_ns"] + it["start_ns"] <= t_fault_ns <= t["t0_ns"] + it["end_ns"]:
            k = i
            break
    others = sorted(it["time_s"] for i, it in enumerate(its) if i != k)
    base = others[len(others) // 2] if others else None
    hit = its[k] if k is not None else None
    exposed = sorted(it["exposed_comm_s"] for i, it in enumerate(its) if i != k)
    tr = t.get("transport", {})
    failed = t.get("failed_qps", [])
    return {"iterations": [it["time_s"] for it in its], "disturbed": k,
            "undisturbed_s": base, "disturbed_s": hit["time_s"] if hit else None,
            "slowdown": round(hit["time_s"] / base, 3) if hit and base else None,
            "exposed_s": hit["exposed_comm_s"] if hit else None,
            "undisturbed_exposed_s": exposed[len(exposed) // 2] if exposed else None,
            "retransmitted": tr.get("retransmitted_packets", 0),
            "timeouts": tr.get("timeouts", 0), "naks": tr.get("naks_sent", 0),
            "failed_qps": failed, "job_died": bool(failed or t.get("aborted")),
            "wrong": t.get("wrong") or 0}


def repeat(s, job, inj, events, extra, out):
    """One job with the schedule injected; returns ``judge``'s verdict."""
    from emulator.experiments.drill.collective import under_schedule
    from emulator.experiments.drill.traffic import faulted_links
    from emulator.experiments.training import launch as training
    log = os.path.join(s.dir, "training", "job.log")
    if os.path.exists(log):
        os.remove(log)               # the last repeat's "ready" must not start this one
    t, injected = under_schedule(
        inj, events, lambda: training.run_job(s, job, extra, progress=out,
                                              faulted=faulted_links(events, s.topo)),
        lambda: started(log), "the training job")
    verdict = judge(t, injected[0]["t_ns"])
    verdict["events"] = injected
    verdict["fidelity"] = t["fidelity"]["verdict"]
    verdict["fidelity_detail"] = t["fidelity"]
    return verdict


def stretched_agent(params, detect_s, stretch):
    """The switch-agent model and the modelled detection on the job's clock: every
    time x ``stretch`` (r/s), so a repair is as long against an iteration as on the
    real cluster.  Without a model (ideal) the detection stays as given."""
    if params is None:
        return None, detect_s
    return params.scaled(stretch), None if detect_s is None else detect_s * stretch


def agent_scales(params, scaled, detect_s, stretch):
    """drill.json's ``switch_agent`` of a job drill: both time scales."""
    if params is None:
        return "ideal"
    return {"time_scale": round(stretch, 3), "real": params.as_dict(),
            "emulated": scaled.as_dict(), "detect_real_ms": None if detect_s is None
            else round(detect_s * 1e3, 3), "detect_emulated_ms": None if detect_s is None
            else round(detect_s * stretch * 1e3, 3)}


def restore_timeout(scaled, changes=300):
    """s to wait for the controller to converge on a restore: 60, and under a
    stretched switch-agent model room for ``changes`` table changes and a barrier
    round per switch at its pace (a fast-failover push is ~50 on the default fabric)."""
    if scaled is None:
        return 60
    from emulator.fabric.switch_agent import fleet
    scaled = fleet(scaled).slowest()
    per_ms = scaled.change_ms() + scaled.processing_ms + 2 * scaled.latency_ms
    return 60 + changes * per_ms / 1e3


def scales_line(params, scaled, scales):
    return (f"switch agents on the job's clock, time scale r/s = {scales['time_scale']:g}: "
            f"real {params.text()}; emulated {scaled.text()}; detection "
            f"{scales['detect_real_ms']} ms real = {scales['detect_emulated_ms']} ms emulated")


def run_mode(fabric, mode, events, job, args, base, out, ecn=None):
    from emulator.dataplane.faults import Injector
    from emulator.dataplane.links.detect import parse_detect
    from emulator.dataplane.session import Session
    from emulator.experiments.spec import scenario
    from emulator.experiments.drill.drill import restore_event
    from emulator.experiments.measure.convergence import wait_restored
    from emulator.experiments.drill.collective import summarise
    from emulator.experiments.spec.options import nic_lb, rank_transport
    from emulator.experiments.workloads.collective import default_timeout_exp
    with Session(fabric, results_base=base, datapath_request=args.datapath, failover=mode,
                 lb=args.lb, flowlet_frames=getattr(args, "flowlet_frames", None),
                 queue_ms=args.queue_ms, seed=args.hash_seed, mtu=args.mtu,
                 ecn=ecn, capture=getattr(args, "capture", None),
                 switch_agent=getattr(args, "agent_params", None),
                 progress=lambda m: out(f"... [{mode}] {m}")) as s:
        scenario.check_targets(events, s.topo, fabric.flow_control)
        detect = parse_detect(args.detect)
        if s.agent is not None:      # installed at the switches' own pace; the job's clock now
            s.agent.set_params(args.agent_emulated)
            detect = args.detect_emulated
        inj = Injector(s, detect=detect)
        extra = dict(rank_transport(args), **nic_lb(args.lb), qpn_seed=args.job_seed,
                     timeout_exp=args.rc_timeout or default_timeout_exp(s.queue_ms))
        reps = []
        try:
            for r in range(args.repeat):
                v = repeat(s, job, inj, events, extra, lambda m: out(f"... [{mode}] {m}"))
                reps.append(v)
                t_rest, rest_kind = restore_event(v["events"])
                wait_restored(s, mode, t_rest, kind=rest_kind, timeout=restore_timeout(
                    getattr(args, "agent_emulated", None)))
                out(f"... [{mode}] repeat {r + 1}/{args.repeat}: iteration "
                    f"{v['disturbed']} took {v['disturbed_s']} s vs {v['undisturbed_s']} s "
                    f"(x{v['slowdown']}), {v['retransmitted']} retransmitted, "
                    f"{v['timeouts']} timeouts, job {'DIED' if v['job_died'] else 'survived'}")
        finally:
            inj.close()
    return {"mode": mode, "results_dir": s.dir, "events": [vars(e) for e in events],
            "repeats": reps, "summary": summarise(reps)}


def main(fabric, args, out=print):
    """``emulator drill --workload simai:FILE``: returns the exit status."""
    from emulator.dataplane.links.detect import parse_detect
    from emulator.experiments.drill.drill import parse_modes, schedule_from
    from emulator.experiments.drill.collective import table
    from emulator.experiments.spec.options import (check_capture, check_transport, job_seed,
                                              training_cc)
    from emulator.experiments.training import job as jobs
    from emulator.experiments.training import launch as training
    from emulator.fabric import addressing
    modes = parse_modes(args.failover)
    parse_detect(args.detect)
    training_cc(args, out)
    ecn = check_transport(args, fabric)
    check_capture(args, fabric)
    if args.iterations is None:
        args.iterations = DEFAULT_ITERATIONS
    if args.iterations < 2:
        raise ConfigError("--iterations", "at least 2 (one disturbed, one to compare)")
    if args.repeat < 1:
        raise ConfigError("--repeat", "at least 1")
    if not (args.fault or args.scenario):
        raise ConfigError("--fault", "a drill under a training job needs --fault SPEC (or "
                          "--scenario FILE): which link or switch to break")
    topo = addressing.plan(fabric)
    job = training.prepare(training.workload_path(args.workload), topo, args, args.mtu)
    if args.at is None:      # the middle of the second iteration
        args.at = 1.5 * jobs.estimate(job)["iteration_s"]
    args.job_seed = job_seed(getattr(args, "job_seed", None))
    out(f"... job seed {args.job_seed} (its QP numbers; --job-seed replays them)")
    events = schedule_from(args, topo, out)
    from emulator.experiments.spec.options import switch_agent_from
    agent = args.agent_params = switch_agent_from(args, fabric)
    args.agent_emulated, args.detect_emulated = stretched_agent(
        agent, parse_detect(args.detect), job.stretch)
    scales = agent_scales(agent, args.agent_emulated, parse_detect(args.detect), job.stretch)
    if agent is not None:
        out("... " + scales_line(agent, args.agent_emulated, scales))
    base = os.path.abspath(os.path.join(args.results, time.strftime("drill-%Y%m%d-%H%M%S")))
    os.makedirs(base, exist_ok=False)
    results = [run_mode(fabric, m, events, job, args, base, out, ecn) for m in modes]
    with open(os.path.join(base, "drill.json"), "w") as f:
        json.dump({"workload": args.workload, "modes": results,
                   "switch_agent": scales}, f, indent=1)
    args.sizes = f"{os.path.basename(args.workload)} (sizes / {job.scale:g})"
    out(table(results, args))
    if agent is not None:
        out(scales_line(agent, args.agent_emulated, scales))
    out(f"results: {base}/drill.json")
    died = any(m["summary"]["jobs_died"] for m in results)
    return 1 if died or any(m["summary"]["wrong"] for m in results) else 0
