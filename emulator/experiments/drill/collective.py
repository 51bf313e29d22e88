"""A failover drill under a collective: would this failure have killed the training job?

Model.  ``drill --workload allreduce`` runs, per failover mode, one fabric
and per repeat one collective of ``--iterations`` calls of ``--sizes``
bytes over the RC transport (``traffic.roce.transport``), and injects the fault
schedule while it runs: the events' times count from the moment the ranks
start their first call (rank 0 says ``calls`` in its log).  Every call's
start and duration come back from the ranks (CLOCK_MONOTONIC, the
injector's clock too), so the call that contained the first fault is known.
Per repeat:

- the disturbed iteration's time against the median of the others
  (``slowdown``);
- the packets retransmitted, NAKs and timeouts of that iteration;
- whether a QP ran out of retries (``transport retry counter exceeded``:
  the job died) and #wrong.

Which ring connections cross the fault is read from ``ofproto/trace``
(each QP's UDP source port, as ``drill.flow_paths`` does for probes).
Without ``--fault``, the drill cuts the first leaf uplink that a
connection of the collective crosses (ECMP decides which), so the fault
always hits the job; without ``--at``, it comes in the middle of the
calls.  Over the repeats, per mode: median and max slowdown, and in how
many repeats the job died.  The timer and retry count are ``--rc-timeout`` and
``--rc-retry`` (NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT).
"""

import json
import os
import threading
import time

from emulator.errors import RunFailed
from emulator.experiments.drill.traffic import faulted_links


def log_says(log_path, word):
    """True once ``log_path`` has a line that is ``word`` alone."""
    try:
        with open(log_path) as f:
            return any(line.strip() == word for line in f)
    except OSError:
        return False


def started(log_path):
    """True once rank 0 began its calls (its log says ``calls``)."""
    return log_says(log_path, "calls")


def disturbed(rows, t_fault_ns):
    """Index of the call whose [start, start + time] holds ``t_fault_ns`` (or the
    first call that started after it), None if the fault came after every call."""
    for i, r in enumerate(rows):
        if r["t_start_ns"] <= t_fault_ns <= r["t_start_ns"] + r["time_s"] * 1e9:
            return i
    later = [i for i, r in enumerate(rows) if r["t_start_ns"] > t_fault_ns]
    return later[0] if later else None


def judge(ranks, t_fault_ns):
    """One repeat's verdict from the rank results (pure)."""
    n = len(ranks[0]["results"])
    calls = []
    for i in range(n):
        per = [r["results"][i] for r in ranks]
        calls.append({"t_start_ns": min(p["t_start_ns"] for p in per),
                      "time_s": max(p["time_s"] for p in per),
                      "retransmitted": sum(p.get("transport", {}).get(
                          "retransmitted_packets", 0) for p in per),
                      "timeouts": sum(p.get("transport", {}).get("timeouts", 0) for p in per),
                      "naks": sum(p.get("transport", {}).get("naks_sent", 0) for p in per),
                      "wrong": sum(p["chunks_missing"] + p["chunks_corrupted"] for p in per)})
    k = disturbed(calls, t_fault_ns)
    others = sorted(c["time_s"] for i, c in enumerate(calls) if i != k)
    base = others[len(others) // 2] if others else None
    failed = [dict(q, rank=r.get("name")) for r in ranks for q in r.get("failed_qps", [])]
    hit = calls[k] if k is not None else None
    return {"calls": calls, "disturbed": k, "undisturbed_s": base,
            "disturbed_s": hit["time_s"] if hit else None,
            "slowdown": round(hit["time_s"] / base, 3) if hit and base else None,
            "retransmitted": hit["retransmitted"] if hit else 0,
            "timeouts": hit["timeouts"] if hit else 0, "naks": hit["naks"] if hit else 0,
            "failed_qps": failed, "job_died": bool(failed),
            "wrong": sum(c["wrong"] for c in calls)}


def under_schedule(inj, events, work, has_started, what):
    """Run ``work()`` in a thread and inject ``events`` while it runs, their times
    counted from when ``has_started()`` first holds; returns (``work``'s result, the
    injector's events of this run).  ``what`` names the work in errors."""
    from emulator.experiments.spec import scenario
    box = {}

    def run():
        try:
            box["result"] = work()
        except BaseException as e:       # re-raised in the caller's thread
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    deadline = time.monotonic() + 120
    while not has_started():
        if not t.is_alive() or time.monotonic() > deadline:
            t.join(timeout=5)
            raise box.get("error") or RunFailed(f"{what} never started")
        time.sleep(0.01)
    t0 = time.monotonic()
    n0 = len(inj.events)
    for ev in events:
        delay = t0 + ev.at_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)            # the schedule's own times
        scenario.execute(inj, ev)
    t.join()
    if "error" in box:
        raise box["error"]
    return box["result"], inj.events[n0:]


def repeat(s, inj, events, args, rank_extra):
    """One collective with the schedule injected; returns ``judge``'s verdict."""
    from emulator.experiments.workloads import collective
    sizes = [collective.parse_sizes(args.sizes or "1M")[0]] * args.iterations
    log = os.path.join(s.dir, "collective", "rank0.log")
    if os.path.exists(log):
        os.remove(log)               # the last repeat's "calls" must not start this one
    report, injected = under_schedule(
        inj, events, lambda: collective.run_collective(
            s, args.workload, sizes, qps=1, warmup=1, rank_extra=rank_extra,
            faulted=faulted_links(events, s.topo)),
        lambda: started(log), "the collective's ranks")
    verdict = judge(collective.rank_results(os.path.join(s.dir, "collective")),
                    injected[0]["t_ns"])
    verdict["events"] = injected
    verdict["fidelity"] = report["fidelity"]["verdict"]
    return verdict


def connections(s, collective, hosts, seed=None):
    """{flow key: path} of every connection of the collective (QP 0 of each; ``seed``:
    the job's QPN seed)."""
    from emulator.experiments.measure.paths import flow_paths
    from traffic.ranks.collectives import schedule
    from traffic.ranks.config import flow_id, qpn
    n = len(hosts)
    pairs = {(i, t.peer) for i in range(n) for st in schedule(collective, n, i, n * 1024)
             for t in st.sends}
    return flow_paths(s, [(hosts[i], hosts[j], flow_id(i, j, 0), (qpn(i, j, 0, seed),))
                          for i, j in sorted(pairs)])


def first_uplink(paths, topo):
    """The first leaf uplink (``leaf1-spine2``) on any path, in leaf order."""
    kind = {sw["name"]: sw["kind"] for sw in topo["switches"]}
    ports = {(sw["name"], p["name"]): p["peer"] for sw in topo["switches"]
             for p in sw["ports"]}
    found = set()
    for path in paths.values():
        for h in path:
            node, _, port = h.rpartition(":")
            peer = ports.get((node, port))
            if kind.get(node) == "leaf" and kind.get(peer) not in (None, "leaf"):
                found.add((node, peer))
    order = [sw["name"] for sw in topo["switches"]]
    if not found:
        return None
    a, b = min(found, key=lambda x: (order.index(x[0]), order.index(x[1])))
    return f"{a}-{b}"


def run_mode(fabric, mode, events, args, base, out, ecn=None):
    from emulator.dataplane.links.detect import parse_detect
    from emulator.dataplane.faults import Injector
    from emulator.dataplane.session import Session
    from emulator.experiments.spec import scenario
    from emulator.experiments.drill.drill import restore_event
    from emulator.experiments.measure.convergence import wait_restored
    from emulator.experiments.spec.options import nic_lb, rank_transport
    with Session(fabric, results_base=base, datapath_request=args.datapath, failover=mode,
                 lb=args.lb, flowlet_frames=getattr(args, "flowlet_frames", None),
                 queue_ms=args.queue_ms, seed=args.hash_seed, mtu=args.mtu,
                 ecn=ecn, capture=getattr(args, "capture", None),
                 switch_agent=getattr(args, "agent_params", None),
                 progress=lambda m: out(f"... [{mode}] {m}")) as s:
        paths = connections(s, args.workload, s.topo["hosts"], args.job_seed)
        if events is None:           # no --fault: the first uplink the job uses
            link = first_uplink(paths, s.topo)
            if link is None:
                raise RunFailed("no connection of the collective crosses a leaf uplink: "
                                "give --fault SPEC")
            out(f"... [{mode}] no --fault given: cutting {link}, the first leaf uplink "
                f"a connection of the {args.workload} crosses")
            events = scenario.fault_spec(link, at_s=args.at, hold_s=args.hold)
        scenario.check_targets(events, s.topo, fabric.flow_control)
        from emulator.experiments.measure.paths import crosses
        crossing = sorted(k for k, p in paths.items() if crosses(p, events, s.topo))
        out(f"... [{mode}] {len(crossing)} of {len(paths)} connections cross the fault")
        inj = Injector(s, detect=parse_detect(args.detect))
        reps = []
        try:
            for r in range(args.repeat):
                v = repeat(s, inj, events, args,
                           dict(rank_transport(args), **nic_lb(args.lb),
                                qpn_seed=args.job_seed))
                reps.append(v)
                t_rest, rest_kind = restore_event(v["events"])
                wait_restored(s, mode, t_rest, kind=rest_kind)
                out(f"... [{mode}] repeat {r + 1}/{args.repeat}: iteration "
                    f"{v['disturbed']} took {v['disturbed_s']} s vs {v['undisturbed_s']} s "
                    f"(x{v['slowdown']}), {v['retransmitted']} retransmitted, "
                    f"{v['timeouts']} timeouts, job {'DIED' if v['job_died'] else 'survived'}")
        finally:
            inj.close()
    return {"mode": mode, "results_dir": s.dir, "events": [vars(e) for e in events],
            "crossing": crossing, "paths": paths, "repeats": reps, "summary": summarise(reps)}


def summarise(reps):
    slow = sorted(r["slowdown"] for r in reps if r["slowdown"] is not None)
    return {"repeats": len(reps),
            "slowdown_median": slow[len(slow) // 2] if slow else None,
            "slowdown_max": slow[-1] if slow else None,
            "retransmitted_median": sorted(r["retransmitted"] for r in reps)[len(reps) // 2],
            "timeouts_median": sorted(r["timeouts"] for r in reps)[len(reps) // 2],
            "jobs_died": sum(r["job_died"] for r in reps),
            "wrong": sum(r["wrong"] for r in reps),
            "faithful": sum(r["fidelity"] == "faithful" for r in reps)}


def table(results, args):
    from emulator.experiments.workloads.collective import default_timeout_exp
    from traffic.roce.transport import RcParams
    exp = args.rc_timeout if args.rc_timeout is not None else \
        default_timeout_exp(args.queue_ms)
    lines = [f"# {args.workload} x{args.iterations} of {args.sizes or '1M'}, transport "
             f"{args.transport}, ACK timeout 4.096 us x 2^{exp} = "
             f"{RcParams(timeout_exp=exp).timeout_ns / 1e6:.0f} ms, retry {args.rc_retry}",
             f"{'mode':14s} {'slowdown med':>12s} {'max':>6s} {'retx':>6s} {'RTOs':>5s} "
             f"{'job died':>8s} {'#wrong':>6s} faithful"]
    for r in results:
        m = r["summary"]
        f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        lines.append(f"{r['mode']:14s} {f(m['slowdown_median']):>12s} {f(m['slowdown_max']):>6s} "
                     f"{m['retransmitted_median']:6d} {m['timeouts_median']:5d} "
                     f"{m['jobs_died']:>4d}/{m['repeats']:<3d} {m['wrong']:6d} "
                     f"{m['faithful']}/{m['repeats']}")
    return "\n".join(lines)


def main(fabric, args, out=print):
    """``emulator drill --workload COLLECTIVE``: returns the exit status."""
    from emulator.dataplane.links.detect import parse_detect
    from emulator.errors import ConfigError
    from emulator.experiments.workloads.collective import expected_seconds, parse_sizes
    from emulator.experiments.drill.drill import parse_modes, schedule_from
    from emulator.experiments.spec.options import check_capture, check_transport
    from emulator.fabric import addressing
    modes = parse_modes(args.failover)
    parse_detect(args.detect)
    from emulator.experiments.spec.options import switch_agent_from
    args.agent_params = switch_agent_from(args, fabric)
    ecn = check_transport(args, fabric)
    check_capture(args, fabric)
    if args.iterations is None:
        args.iterations = 10
    if args.iterations < 2:
        raise ConfigError("--iterations", "at least 2 (one disturbed, one to compare)")
    if args.repeat < 1:
        raise ConfigError("--repeat", "at least 1")
    topo = addressing.plan(fabric)
    sizes = parse_sizes(args.sizes or "1M")
    if args.at is None:      # the middle of the calls (after the warm-up call)
        rate = min(h["ports"][0]["rate_bps"] for h in topo["hosts"])
        args.at = expected_seconds(args.workload, len(topo["hosts"]), sizes[:1],
                                   rate) * (1 + args.iterations / 2)
    from emulator.experiments.spec.options import job_seed
    args.job_seed = job_seed(getattr(args, "job_seed", None))   # one job: the same QPs throughout
    out(f"... job seed {args.job_seed} (its QP numbers; --job-seed replays them)")
    # no --fault: run_mode cuts the first leaf uplink the job uses
    events = schedule_from(args, topo, out) if (args.fault or args.scenario) else None
    base = os.path.abspath(os.path.join(args.results, time.strftime("drill-%Y%m%d-%H%M%S")))
    os.makedirs(base, exist_ok=False)
    results = [run_mode(fabric, m, events, args, base, out, ecn) for m in modes]
    with open(os.path.join(base, "drill.json"), "w") as f:
        json.dump({"workload": args.workload, "modes": results}, f, indent=1)
    out(table(results, args))
    out(f"results: {base}/drill.json")
    return 1 if any(r["summary"]["jobs_died"] or r["summary"]["wrong"] for r in results) else 0
