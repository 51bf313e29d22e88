"""Failover drills under a workload: would this failure have killed the job, and what
does it cost an iteration?

Model.  ``drill --workload allreduce`` (or ``drill workload``) runs, per
failover mode, one fabric and per repeat one collective of ``--iterations``
calls of ``--sizes`` bytes over the RC transport (``traffic.roce.transport``);
``--workload simai:FILE`` runs a training job (``training.launch``) of
``--iterations`` iterations (default 3) instead; several jobs (``jobs:FILE``)
are ``drill jobs`` (``shared.drill``).  The fault schedule is
injected while it runs: the events' times count from the moment the work
starts (rank 0 says ``calls``, the job engine ``ready``, in their logs).
The ranks' and the engine's times are CLOCK_MONOTONIC, the injector's clock,
so the call or iteration that held the first fault is known.  Per repeat
(``stats.collective_verdict``, ``stats.training_verdict``):

- the disturbed iteration's time against the median of the others
  (``slowdown``), and for a job its exposed communication against theirs;
- the packets retransmitted, NAKs and timeouts;
- whether a QP ran out of retries (the job died) and #wrong.

Under a collective, which ring connections cross the fault is read from
``ofproto/trace`` (each QP's UDP source port); without ``--fault`` the drill
cuts the first leaf uplink a connection crosses (ECMP decides which), and
without ``--at`` the fault comes in the middle of the calls.  A training job
needs ``--fault``; without ``--at`` the fault comes in the middle of its
second iteration (by the analytic estimate).  Under a switch-agent model the
job's repairs run on the job's clock: every agent time and the modelled
detection stretched by r/s.  Over the repeats, per mode: median and max
slowdown, and in how many repeats the job died.  The timer and retry count
are ``--rc-timeout`` and ``--rc-retry`` (NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT).
"""

import json
import os
import threading
import time

from emulator.dataplane.faults import Injector
from emulator.dataplane.links.detect import parse_detect
from emulator.dataplane.observe import run_yaml
from emulator.errors import ConfigError, RunFailed
from emulator.experiments.drill.drill import parse_modes, restore_event, schedule_from
from emulator.experiments.drill.stats import collective_verdict, training_verdict, workload_summary
from emulator.experiments.drill.traffic import faulted_links
from emulator.experiments.measure.convergence import wait_restored
from emulator.experiments.measure.paths import crosses, flow_paths
from emulator.experiments.repeat import Mode, each_mode
from emulator.experiments.spec import scenario
from emulator.experiments.spec.build import command_doc
from emulator.experiments.spec.options import nic_lb, rank_transport
from emulator.experiments.training import job as jobs
from emulator.experiments.training import launch as training
from emulator.experiments.workloads import collective
from emulator.experiments.workloads.collective import default_timeout_exp
from emulator.fabric import addressing, switch_agent
from emulator.fabric.switch_agent import fleet
from traffic.ranks.collectives import schedule
from traffic.ranks.config import flow_id, qpn
from traffic.roce.transport import RcParams

COLLECTIVE_ITERATIONS = 10     # calls per repeat of a collective
TRAINING_ITERATIONS = 3        # iterations of a job: one disturbed, two to compare


def log_says(log_path, word):
    """True once ``log_path`` has a line that is ``word`` alone."""
    try:
        with open(log_path) as f:
            return any(line.strip() == word for line in f)
    except OSError:
        return False


def under_schedule(inj, events, work, has_started, what):
    """Run ``work()`` in a thread and inject ``events`` while it runs, their times
    counted from when ``has_started()`` first holds; returns (``work``'s result, the
    injector's events of this run).  ``what`` names the work in errors."""
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


def connections(s, collective, hosts, seed=None):
    """{flow key: path} of every connection of the collective (QP 0 of each; ``seed``:
    the job's QPN seed)."""
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


def table(results, spec, iterations, sizes):
    """The drill's table: one row per mode over its repeats."""
    exp = spec.rc_timeout if spec.rc_timeout is not None else \
        default_timeout_exp(spec.queue_ms)
    lines = [f"# {spec.workload} x{iterations} of {sizes}, transport "
             f"{spec.transport}, ACK timeout 4.096 us x 2^{exp} = "
             f"{RcParams(timeout_exp=exp).timeout_ns / 1e6:.0f} ms, retry {spec.rc_retry}",
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
    scaled = fleet(scaled).slowest()
    per_ms = scaled.change_ms() + scaled.processing_ms + 2 * scaled.latency_ms
    return 60 + changes * per_ms / 1e3


def scales_line(params, scaled, scales):
    return (f"switch agents on the job's clock, time scale r/s = {scales['time_scale']:g}: "
            f"real {params.text()}; emulated {scaled.text()}; detection "
            f"{scales['detect_real_ms']} ms real = {scales['detect_emulated_ms']} ms emulated")


class WorkloadDrill(Mode):
    """One failover mode's fabric under the drill's workload, repeat after repeat."""

    def __init__(self, s, mode, spec, args, events, out):
        super().__init__(s, mode)
        self.spec, self.args, self.events = spec, args, events
        self.say = lambda m: out(f"... [{mode}] {m}")
        self.inj = None

    def settle(self, v):
        t_rest, rest_kind = restore_event(v["events"])
        wait_restored(self.s, self.s.spec.failover, t_rest, kind=rest_kind,
                      timeout=restore_timeout(getattr(self, "scaled", None)))

    def line(self, v):
        return (f"iteration {v['disturbed']} took {v['disturbed_s']} s vs "
                f"{v['undisturbed_s']} s (x{v['slowdown']}), {v['retransmitted']} "
                f"retransmitted, {v['timeouts']} timeouts, job "
                f"{'DIED' if v['job_died'] else 'survived'}")

    def finish(self, reps):
        return {"mode": self.mode, "results_dir": self.s.dir,
                "events": [vars(e) for e in self.events], "repeats": reps,
                "summary": workload_summary(reps), **getattr(self, "extra", {})}

    def close(self):
        if self.inj is not None:
            self.inj.close()


class CollectiveDrill(WorkloadDrill):
    """The drill under a collective: is the job still alive after the fault?"""

    def start(self):
        s, spec, args = self.s, self.spec, self.args
        paths = connections(s, spec.workload, s.topo["hosts"], spec.job_seed)
        if self.events is None:           # no --fault: the first uplink the job uses
            link = first_uplink(paths, s.topo)
            if link is None:
                raise RunFailed("no connection of the collective crosses a leaf uplink: "
                                "give --fault SPEC")
            self.say(f"no --fault given: cutting {link}, the first leaf uplink a "
                     f"connection of the {spec.workload} crosses")
            self.events = scenario.fault_spec(link, at_s=args.at, hold_s=args.hold)
        scenario.check_targets(self.events, s.topo, s.fabric.flow_control)
        crossing = sorted(k for k, p in paths.items() if crosses(p, self.events, s.topo))
        self.say(f"{len(crossing)} of {len(paths)} connections cross the fault")
        self.extra = {"crossing": crossing, "paths": paths}
        self.inj = Injector(s, detect=parse_detect(args.detect))
        self.rank_extra = dict(rank_transport(spec), **nic_lb(spec.lb), qpn_seed=spec.job_seed)

    def repeat(self, r):
        s = self.s
        sizes = [collective.parse_sizes(self.spec.sizes)[0]] * self.args.iterations
        log = os.path.join(s.dir, "collective", "rank0.log")
        if os.path.exists(log):
            os.remove(log)           # the last repeat's "calls" must not start this one
        report, injected = under_schedule(
            self.inj, self.events, lambda: collective.run_collective(
                s, self.spec.workload, sizes, qps=1, warmup=1, rank_extra=self.rank_extra,
                faulted=faulted_links(self.events, s.topo)),
            lambda: log_says(log, "calls"), "the collective's ranks")
        verdict = collective_verdict(collective.rank_results(os.path.join(s.dir, "collective")),
                                     injected[0]["t_ns"])
        verdict["events"] = injected
        verdict["fidelity"] = report["fidelity"]["verdict"]
        return verdict


class TrainingDrill(WorkloadDrill):
    """The drill under a training job: what does the fault cost an iteration?"""

    def __init__(self, s, mode, spec, args, events, out, job, scaled, detect):
        super().__init__(s, mode, spec, args, events, out)
        self.job, self.scaled, self.detect = job, scaled, detect

    def start(self):
        s, spec = self.s, self.spec
        scenario.check_targets(self.events, s.topo, s.fabric.flow_control)
        detect = parse_detect(self.args.detect)
        if s.agent is not None:      # installed at the switches' own pace; the job's clock now
            s.agent.set_params(self.scaled)
            detect = self.detect
        self.inj = Injector(s, detect=detect)
        self.job_extra = dict(rank_transport(spec), **nic_lb(spec.lb), qpn_seed=spec.job_seed,
                              timeout_exp=spec.rc_timeout or default_timeout_exp(s.queue_ms))

    def scheduled(self, room, run, what):
        """``run()`` under the fault schedule, the clock starting when the job log in
        ``room`` says ready: (its result, the injected events)."""
        log = os.path.join(self.s.dir, room, "job.log")
        if os.path.exists(log):
            os.remove(log)           # the last repeat's "ready" must not start this one
        return under_schedule(self.inj, self.events, run, lambda: log_says(log, "ready"),
                              what)

    def repeat(self, r):
        s = self.s
        t, injected = self.scheduled("training", lambda: training.run_job(
            s, self.job, self.job_extra, progress=self.say,
            faulted=faulted_links(self.events, s.topo)), "the training job")
        verdict = training_verdict(t, injected[0]["t_ns"])
        verdict["events"] = injected
        verdict["fidelity"] = t["fidelity"]["verdict"]
        verdict["fidelity_detail"] = t["fidelity"]
        return verdict


def main(spec, args, out=print):
    """``emulator drill --workload W`` (``drill workload``): returns the exit status."""
    fabric = spec.fabric
    modes = parse_modes(args.failover)
    detect = parse_detect(args.detect)
    if args.repeat < 1:
        raise ConfigError("--repeat", "at least 1")
    training_job = spec.workload.startswith("simai:")
    if args.iterations is None:
        args.iterations = TRAINING_ITERATIONS if training_job else COLLECTIVE_ITERATIONS
    if args.iterations < 2:
        raise ConfigError("--iterations", "at least 2 (one disturbed, one to compare)")
    if training_job and not (args.fault or args.scenario):
        raise ConfigError("--fault", "a drill under a training job needs --fault SPEC (or "
                          "--scenario FILE): which link or switch to break")
    topo = addressing.plan(fabric)
    agent = switch_agent.for_run(spec.switch_agent, fabric, spec.controller)
    out(f"... job seed {spec.job_seed} (its QP numbers; --job-seed replays them)")
    scales = "ideal"
    if training_job:
        job = training.prepare(training.workload_path(spec.workload), topo,
                               spec.replace(iterations=args.iterations), spec.mtu)
        if args.at is None:      # the middle of the second iteration
            args.at = 1.5 * jobs.estimate(job)["iteration_s"]
        scaled, scaled_detect = stretched_agent(agent, detect, job.stretch)
        scales = agent_scales(agent, scaled, detect, job.stretch)
        if agent is not None:
            out("... " + scales_line(agent, scaled, scales))
        sizes = f"{os.path.basename(spec.workload)} (sizes / {job.scale:g})"
    else:
        call_sizes = collective.parse_sizes(spec.sizes)
        if args.at is None:      # the middle of the calls (after the warm-up call)
            rate = min(h["ports"][0]["rate_bps"] for h in topo["hosts"])
            args.at = collective.expected_seconds(spec.workload, len(topo["hosts"]),
                                                  call_sizes[:1], rate) \
                * (1 + args.iterations / 2)
        sizes = spec.sizes
    # no --fault under a collective: each mode cuts the first leaf uplink the job uses
    events = schedule_from(args, topo, out) if (args.fault or args.scenario) else None
    base = os.path.abspath(os.path.join(spec.results, time.strftime("drill-%Y%m%d-%H%M%S")))
    os.makedirs(base, exist_ok=False)
    run_yaml.write(base, spec, command=command_doc("drill workload", args))

    def make(s, mode):
        if training_job:
            return TrainingDrill(s, mode, spec, args, events, out, job, scaled, scaled_detect)
        return CollectiveDrill(s, mode, spec, args, events, out)
    results = each_mode(spec.replace(results=base), "failover", modes, args.repeat, make, out)
    with open(os.path.join(base, "drill.json"), "w") as f:
        json.dump({"workload": spec.workload, "modes": results,
                   **({"switch_agent": scales} if training_job else {})}, f, indent=1)
    out(table(results, spec, args.iterations, sizes))
    if training_job and agent is not None:
        out(scales_line(agent, scaled, scales))
    out(f"results: {base}/drill.json")
    return 1 if any(r["summary"]["jobs_died"] or r["summary"]["wrong"] for r in results) else 0


def prepare(args):
    """A collective's calls are 1M each unless ``--sizes`` says otherwise."""
    if args.sizes is None and not str(args.workload).startswith("simai:"):
        args.sizes = "1M"
