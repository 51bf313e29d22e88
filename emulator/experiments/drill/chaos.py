"""Chaos soak (``drill --chaos --duration S --mtbf S [--mttr S] [--seed N]``).

Model.  One fabric (``--failover``, one mode) carries the drill's probe
flows for ``--duration`` seconds while faults are drawn at random
(``draw``, a ``random.Random(seed)``): the time to the next fault is
exponential with mean ``--mtbf``, its kind uniform over the vocabulary
(``cut`` an inter-switch link, ``flap`` it 2-5 times, gray ``loss`` of
5-50 % on it, ``crash`` a switch, ``kill`` the controller), its target
uniform over the fabric's links or switches, and its repair exponential
with mean ``--mttr`` (at least 0.3 s; a flap repairs itself).  Faults come
one at a time (the next is drawn from the previous repair on), so each
fault's loss is its own.  The same ``--seed`` draws the same faults.

Per fault: kind, where, when, the controller's detection (fault -> its
first port event; none for a gray loss without BFD or a controller kill),
recovery (fault -> the end of the last lossy gap that began before the
repair) and the packets the probes lost from the fault to the next one (of
them, those lost after the repair, as a link comes back: ``repair_lost``).
For the soak: probes sent, delivered and lost, and the invariants, each by
name, true or false, with why when false (``invariants.report``):

* ``no_emulation_drops``: nothing was lost outside a link's queue (the
  fidelity verdict's emulation drops are 0; network drops are per link);
* ``untouched_flows_lost_nothing``: before the first fault no probe lost a
  packet, and while a fault lasted (to the next one) no probe flow none of
  whose equal-cost paths it touches (``ecmp_span`` of the path ofproto/trace
  gave before the soak) lost one (a sequence skipped that never arrived).
  Equal-cost paths, not the traced one: a repair renumbers a select group's
  buckets (no resilient hashing) and moves flows of its live buckets too;
* ``every_fault_reported``: the injector's own log (faults.jsonl) and the
  rows agree, fault for fault (``invariants.faultlog``);
  ``every_fault_repaired``: and the log has every fault's repair;
* ``reliable_qps_delivered_or_dead``: beside the probes, collective jobs on
  the RC transport run back to back (``chaos_job``): every packet a QP of
  theirs sent was delivered, or the QP failed (or was flushed when its job
  was aborted); ``job`` gives the numbers;
* ``nothing_left_behind``: after teardown no bridge, interface, nftables
  table, process or state directory carries the run's tag;
* ``results_complete``: every results file of the soak reads whole
  (``invariants.files``; drill.json itself is read back once written).

The rules that excuse packets from these (the in-flight window, a lossy
path's queue drops, the probe sender's catch-up, Open vSwitch's statistics
lag, a faulted link's drops, an aborted job's flushed QPs) are named in
``invariants.allowances``; drill.json ``allowances`` and the printout say how
many packets each excused.

On Ctrl-C the active fault is repaired, the fabric torn down, and
``drill.json`` written with every fault injected so far (``interrupted``:
true).
"""

import json
import os
import random
import time

from emulator.dataplane import cleanup
from emulator.dataplane.faults import Injector, fault_links
from emulator.dataplane.links.detect import parse_detect
from emulator.dataplane.observe import run_yaml
from emulator.dataplane.observe.counters import OVSDB_STATS_S, FaultWindows, link_names
from emulator.dataplane.ovs import datapath
from emulator.dataplane.session import Session
from emulator.dataplane.system.signals import Interrupted
from emulator.errors import ConfigError
from emulator.experiments import calibrate
from emulator.experiments.drill.chaos_job import JobLoop
from emulator.experiments.drill.drill import holddown_for, parse_modes
from emulator.experiments.drill.invariants import faultlog, files
from emulator.experiments.drill.invariants.report import events_of, report, table
from emulator.experiments.drill.probes import path_pairs, planned_flows, probe_rate
from emulator.experiments.drill.traffic import faulted_links, probe_plan
from emulator.experiments.measure.watch import Watch
from emulator.experiments.spec import scenario
from emulator.experiments.spec.build import command_doc
from emulator.experiments.ui import live
from emulator.experiments.workloads.mix import EngineProcess, child_env, lost_frames
from emulator.fabric import addressing, switch_agent

KINDS = ("cut", "flap", "loss", "crash", "kill")
MIN_REPAIR_S = 0.3


def add_arguments(p):
    """The soak's options (on drill's parser: ``drill chaos`` or ``drill --chaos``)."""
    g = p.add_argument_group("chaos soak (drill chaos, or drill --chaos)")
    g.add_argument("--chaos", action="store_true",
                   help="a chaos soak: random faults (cut, flap, gray loss, switch crash, "
                        "controller kill) under the probes for --duration s, exponential "
                        "inter-arrival (--mtbf), each repaired after a drawn time (--mttr); "
                        "per-fault table, soak totals, invariants (docs/failover.md)")
    g.add_argument("--duration", dest="chaos_duration", type=float, default=60.0,
                   help="soak seconds (default 60)")
    g.add_argument("--mtbf", type=float, default=10.0,
                   help="mean seconds between faults (default 10)")
    g.add_argument("--mttr", type=float, default=1.0,
                   help="mean seconds to repair a fault (default 1)")
    g.add_argument("--seed", dest="chaos_seed", type=int, default=None,
                   help="the random draw's seed (default: drawn and printed); the same "
                        "seed draws the same faults")


def prepare(args):
    """What a soak implies before its spec is built: BFD's hold-down (as a drill's)."""
    args.bfd_holddown = holddown_for(args)


def fault_targets(topo):
    """(inter-switch link names, switch names) a fault may hit."""
    switches = sorted(s["name"] for s in topo["switches"])
    kinds = {s["name"]: s["kind"] for s in topo["switches"]}
    links = sorted(name for name, ((sw, _), other) in fault_links(topo)
                   if sw in kinds and other in kinds and "#" not in name)
    return links, switches


def draw(seed, duration, mtbf, mttr, links, switches, kinds=KINDS):
    """The soak's faults: [{kind, target, at_s, repair_s, params}] (pure)."""
    rng = random.Random(seed)
    faults, t = [], 0.0
    while True:
        t += rng.expovariate(1.0 / mtbf)
        if t >= duration:
            return faults
        kind = rng.choice(kinds)
        repair = max(MIN_REPAIR_S, rng.expovariate(1.0 / mttr))
        params = {}
        if kind == "crash":
            target = rng.choice(switches)
        elif kind == "kill":
            target = scenario.CONTROLLER
        else:
            target = rng.choice(links)
        if kind == "flap":
            params = {"count": rng.randint(2, 5), "period": 0.2}
            repair = params["count"] * params["period"]
        elif kind == "loss":
            params = {"percent": float(rng.choice((5, 10, 20, 50)))}
        faults.append({"kind": kind, "target": target, "at_s": round(t, 3),
                       "repair_s": round(repair, 3), "params": params})
        t += repair


MAX_LAG_MS = (20.0, 200.0)  # the probe sender's catch-up: the engine's default, a cap


def catch_up_ms(topo, pairs, pps, frame_len, queue_ms):
    """How far (ms) the probe sender may fall behind and still send what fell due
    (pure).  Held up for a few tens of ms now and then on 2 shared cores, a sender
    that skips beyond the engine's 20 ms loses packets to the emulator; one that
    catches up sends them as a burst the links shape.  The burst a host sends
    (its flows x ``pps`` x the lag, ``frame_len`` bytes each) stays within half of
    its link's queue (``queue_ms`` at its rate), so it is no congestion."""
    lag = MAX_LAG_MS[1]
    for src, _, _, qpns in pairs:
        port = src["ports"][0]
        queue_bytes = queue_ms / 1e3 * port["rate_bps"] / 8
        per_ms = len(qpns) * pps * frame_len / 1e3        # bytes due per ms
        lag = min(lag, 0.5 * queue_bytes / max(per_ms, 1e-9))
    return round(max(MAX_LAG_MS[0], lag), 1)


def check_args(args):
    if args.chaos_duration <= 0 or args.mtbf <= 0 or args.mttr <= 0:
        raise ConfigError("--chaos", "--duration, --mtbf and --mttr are seconds > 0")
    if "," in args.failover:
        raise ConfigError("--failover", "a chaos soak runs one mode: give one of none, "
                                        "controller, fast-failover")
    if args.fault or args.scenario or args.workload:
        raise ConfigError("--chaos", "draws its own faults under the probes: not with "
                                     "--fault, --scenario or --workload")


def repair_active(inj, s, fault, pending):
    """After Ctrl-C: undo the fault ``fault`` left in force (its ``pending`` events'
    repairs; a flap cut short gets its link back up)."""
    for ev in pending:
        if ev.action in ("restore", "loss_stop", "recover") or (
                ev.action == scenario.CONTROLLER and ev.target == "restart"
                and s.controller is not None and not s.controller.alive()):
            scenario.execute(inj, ev)
        elif ev.action == "flap" and fault is not None:
            inj.link_up(ev.target, ev.params.get("side", "both"))


def soak(s, inj, pairs, faults, args, work, out):
    """Run the probes and the reliable jobs for the soak and inject ``faults`` in turn;
    returns what ran (``report.report``'s ``ran``).  On Ctrl-C the active fault is
    repaired and what ran so far returned."""
    os.makedirs(work, exist_ok=True)
    duration = args.chaos_duration + args.post + 2.0
    plan = probe_plan(s.net, pairs, args, duration)
    plan["max_lag_ms"] = catch_up_ms(s.topo, pairs, args.pps, args.frame_len,
                                     getattr(s, "queue_ms", 30.0))
    eng = EngineProcess(plan, work, env=child_env(s), name="probes")
    eng.start()
    watch = Watch(s)
    jobs = JobLoop(s, os.path.join(work, "jobs"), out)
    marks = FaultWindows(s.net)        # drops per fault window: queues, Open vSwitch
    starts, pending, active, logged = [], [], None, 0
    try:
        watch.start()
        eng.go()
        eng.wait_line("flowing", 20)
        jobs.start()
        t0 = time.monotonic()
        for f in faults:
            evs = events_of(f)
            pending = list(evs)
            for ev in evs:
                delay = t0 + ev.at_s - time.monotonic()
                if delay > 0:
                    time.sleep(delay)       # the drawn times, not a wait for state
                if ev is evs[0]:
                    marks.mark()
                    starts.append(time.monotonic_ns())
                    active, logged = f, len(inj.events)
                    out(f"... fault {len(starts)}/{len(faults)} at {f['at_s']:.1f}s: "
                        f"{f['kind']} {f['target']} for {f['repair_s']:.2f}s")
                scenario.execute(inj, ev)
                pending.remove(ev)
            active = None
        delay = t0 + args.chaos_duration - time.monotonic()
        if delay > 0:
            time.sleep(delay)               # the soak's length, faults or not
        job = jobs.stop()
        res = eng.result(timeout=duration + 60)
        marks.mark()                        # the last fault's window: to the traffic's end
        watch.stop()
    except (KeyboardInterrupt, Interrupted):
        out("... interrupted: repairing the active fault, writing what ran")
        if active is not None and len(inj.events) == logged:
            starts.pop()            # stopped before its first change: never injected
        else:
            repair_active(inj, s, active, pending)
        return {"starts": starts, "interrupted": True}
    finally:
        jobs.kill()
        eng.kill()
        marks.close()
    sent, recv = {}, {}
    for st in res["streams"]:
        sent.update(st["per_flow"])
    for r in res["receivers"]:
        for fl in r["flows"]:
            if fl["flow"] in sent:       # the probes' (the receivers also see the jobs')
                recv[fl["flow"]] = fl
    events = [e for f in faults for e in events_of(f)]
    per_fault = [faulted_links(events_of(f), s.topo) for f in faults]
    names, repairs = link_names(s.topo), [f["repair_s"] for f in faults]

    def verdict(faulted=(), lag_s=OVSDB_STATS_S):
        drops = marks.fault_drops(per_fault, repairs, names, lag_s) if faulted else None
        return watch.verdict(res["engine"]["sent_packets"], lost=lost_frames(res),
                             engine=res["engine"], faulted=faulted, fault_drops=drops)

    faulted = faulted_links(events, s.topo)
    return {"starts": starts, "interrupted": False, "sent": sent, "recv": recv,
            "fid": verdict(faulted),
            "verdicts": (verdict(faulted, 0.0), verdict()),   # without the allowances
            "job": job, "drops": marks.queue_drops(names),
            "in_flight_ms": (res.get("latency_ms") or {}).get("p99.9"),
            "sender": res["engine"], "catch_up_ms": plan["max_lag_ms"]}


def left_behind(tag):
    """``nothing_left_behind``: (holds, what of run ``tag`` is still on the machine)."""
    left = cleanup.leftovers(tag)
    return not left, left


def check_log(chaos, log_path):
    """``every_fault_reported`` and ``every_fault_repaired``: the rows against the
    injector's own log (faults.jsonl; none when no fabric was built)."""
    events = []
    if log_path and os.path.exists(log_path):
        with open(log_path, encoding="utf-8") as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue                # a line cut short: results_complete says so
    got = faultlog.compare(chaos["faults"], events, chaos["interrupted"])
    chaos["fault_log"] = got
    chaos["invariants"]["every_fault_reported"] = got["reported"]
    chaos["invariants"]["every_fault_repaired"] = got["repaired"]
    why = []
    if got["unreported_total"]:
        why.append(f"{got['unreported_total']} faults in the injector's log without a row: "
                   + ", ".join(f"{e['kind']} {e['target']}" for e in got["unreported"][:3]))
    if got["unlogged"]:
        why.append(f"rows {got['unlogged']} not in the injector's log")
    if got["mistimed"]:
        why.append(f"rows [row, ms] {got['mistimed']} more than {faultlog.MATCH_MS:g} ms "
                   "from the log's time")
    if why:
        chaos["why"]["every_fault_reported"] = "; ".join(why)
    if got["unrepaired"]:
        chaos["why"]["every_fault_repaired"] = f"[row, missing] {got['unrepaired']}"


def main(spec, args, out=print):
    """``emulator drill --chaos`` (``drill chaos``): returns the exit status."""
    fabric = spec.fabric
    check_args(args)
    (mode,) = parse_modes(args.failover)
    detect = parse_detect(args.detect)
    agent = switch_agent.for_run(spec.switch_agent, fabric, spec.controller)
    seed = (args.chaos_seed if args.chaos_seed is not None
            else random.SystemRandom().randrange(1 << 31))
    topo = addressing.plan(fabric)
    links, switches = fault_targets(topo)
    if not links:
        raise ConfigError("--chaos", "the fabric has no inter-switch link to break")
    faults = draw(seed, args.chaos_duration, args.mtbf, args.mttr, links, switches)
    out(f"... chaos seed {seed}: {len(faults)} faults in {args.chaos_duration:g} s "
        f"(mtbf {args.mtbf:g} s, mttr {args.mttr:g} s); --seed {seed} draws them again")
    planned = planned_flows(topo, args.probes, args.qps)
    dp_type = datapath.detect(spec.datapath)[0]
    res_ms = 1.0
    args.pps, note = probe_rate(topo, planned, args.frame_len, res_ms,
                                calibrate.cached_budget(dp_type, args.frame_len), args.pps)
    if note:
        out(f"... {note}")
    base = os.path.abspath(os.path.join(spec.results, time.strftime("drill-%Y%m%d-%H%M%S")))
    os.makedirs(base, exist_ok=False)
    command = command_doc("drill chaos", args)
    command["options"]["chaos_seed"] = seed
    run_yaml.write(base, spec, command=command)
    doc = {"modes": [], "seed": seed, "args": command["options"],
           "switch_agent": agent.as_dict() if agent else "ideal"}
    chaos, tag, log_path, problem, s_dir = None, None, None, None, None
    try:
        with Session(spec.replace(failover=mode, results=base),
                     progress=lambda m: out(f"... [{mode}] {m}")) as s:
            tag, s_dir = s.state.tag, s.dir
            pairs, paths = path_pairs(s, planned)
            inj = Injector(s, detect=detect)
            log_path = inj.log_path
            try:
                ran = soak(s, inj, pairs, faults, args, os.path.join(s.dir, "soak"), out)
            finally:
                inj.close()
            converged = s.controller.converged() if s.controller else []
            chaos = report(faults, ran, converged, paths, s.topo, args.pps, s.pfc is not None)
            doc["modes"] = [{"mode": mode, "results_dir": s.dir}]
    finally:
        if chaos is None:
            chaos = report(faults, {"starts": [], "interrupted": True}, [], {}, topo)
        check_log(chaos, log_path)
        if tag is not None:
            chaos["invariants"]["nothing_left_behind"], chaos["left_behind"] = left_behind(tag)
        if s_dir is not None:           # the fabric, its faults and this printout
            live.write_report(s_dir, summary=table(chaos).splitlines(), out=out)
        written = files.complete(base, skip=("drill.json",))
        chaos["invariants"]["results_complete"] = written["holds"]
        chaos["results_files"] = written
        if not written["holds"]:
            chaos["why"]["results_complete"] = "; ".join(
                f"{k}: {v}" for k, v in written["problems"].items())
        doc["chaos"] = chaos
        problem = files.write_whole(os.path.join(base, "drill.json"), doc)
    out(table(chaos))
    if problem:                 # drill.json itself: it cannot say so, the printout does
        out(f"invariant results_complete: FALSE (drill.json {problem})")
    out(f"results: {base}/drill.json")
    if chaos["interrupted"]:
        raise KeyboardInterrupt
    return 0 if all(chaos["invariants"].values()) and not problem else 1
