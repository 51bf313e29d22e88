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
them, those lost after the repair, as a link comes back: ``repair_lost``).  For the soak: probes sent,
delivered and lost, and the invariants, each by name, true or false:

* ``no_emulation_drops``: nothing was lost outside a link's queue (the
  fidelity verdict's emulation drops are 0; network drops are per link);
* ``untouched_flows_lost_nothing``: while a fault lasted (to the next one),
  no probe flow none of whose equal-cost paths it touches (``ecmp_span`` of
  the path ofproto/trace gave before the soak) lost a packet (a sequence
  skipped that never arrived).  On a lossless
  fabric, any loss counts.  On a lossy one (the default), a loss while a
  queue on the flow's path dropped frames in that window (tc counters read at
  every fault) is the network's, rerouted traffic overflowing a queue:
  reported (``untouched_queue_lost_packets``, per fault ``queue_drops``), not
  a breach.  Equal-cost paths, not the traced one: a repair renumbers a
  select group's buckets (no resilient hashing) and moves flows of its live
  buckets too, which lost packets at flap transitions;
* ``every_fault_reported``: every injected fault has its entry;
* ``nothing_left_behind``: after teardown no bridge, interface, nftables
  table, process or state directory carries the run's tag.

* ``reliable_qps_delivered_or_dead``: beside the probes, collective jobs on
  the RC transport run back to back (``drill_chaos_job``): every packet a QP
  of theirs sent was delivered, or the QP failed (or was flushed when its job
  was aborted); ``job`` gives the numbers (QPs, packets sent and delivered,
  failed and flushed QPs, job instances, interruptions, calls completed).

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
from emulator.dataplane.observe.counters import FaultWindows, link_names
from emulator.dataplane.ovs import datapath
from emulator.dataplane.session import Session
from emulator.dataplane.system.signals import Interrupted
from emulator.errors import ConfigError
from emulator.experiments import calibrate
from emulator.experiments.drill.chaos_job import JobLoop
from emulator.experiments.drill.drill import holddown_for, parse_modes
from emulator.experiments.drill.probes import path_pairs, planned_flows, probe_rate
from emulator.experiments.drill.traffic import faulted_links, probe_plan
from emulator.experiments.measure.paths import crosses, ecmp_span, path_links
from emulator.experiments.measure.watch import Watch
from emulator.experiments.spec import scenario
from emulator.experiments.spec.build import command_doc
from emulator.experiments.workloads.mix import EngineProcess, child_env, lost_frames
from emulator.fabric import addressing, switch_agent

FABRIC_KIND = {True: "lossless", False: "lossy"}   # the soak's label of its fabric

KINDS = ("cut", "flap", "loss", "crash", "kill")
MIN_REPAIR_S = 0.3
JITTER_NS = 5_000_000      # arrival jitter on 2 shared cores: calm gaps are 3-6 ms


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


def lead_ns(pps, in_flight_ms=None):
    """How long after the last packet before a gap its loss may have begun: one probe
    interval, and the arrival jitter or, if longer, the packets still in flight (the
    probes' p99.9 one-way latency): a fault loses what was in flight when it struck,
    so its gap opens with a packet that arrived up to that long before it (a spine
    crash's gap opened 8.9 ms before it, at a p99.9 of 16.2 ms, and was counted
    against the fault before, on a flow that fault did not touch)."""
    return 1e9 / pps + max(JITTER_NS, (in_flight_ms or 0) * 1e6)


def events_of(fault):
    """The scenario events that inject and repair one fault (times from the soak's start)."""
    at, end, k, tgt, p = (fault["at_s"], fault["at_s"] + fault["repair_s"], fault["kind"],
                          fault["target"], fault["params"])
    if k == "cut":
        return [scenario.Event(at, "cut", tgt, {"side": "both"}),
                scenario.Event(end, "restore", tgt, {"side": "both"})]
    if k == "flap":
        return [scenario.Event(at, "flap", tgt, dict(p))]
    if k == "loss":
        return [scenario.Event(at, "loss", tgt, dict(p)), scenario.Event(end, "loss_stop", tgt)]
    if k == "crash":
        return [scenario.Event(at, "crash", tgt), scenario.Event(end, "recover", tgt)]
    return [scenario.Event(at, scenario.CONTROLLER, "kill"),
            scenario.Event(end, scenario.CONTROLLER, "restart")]


def fault_result(fault, t_start, t_next, recv, converged, untouched=(), lead_ns=1e6,
                 queue_drops=None, lossless=True):
    """One fault's row: detection, recovery, packets lost in [t_start, t_next) ns; of
    them, those of the flows in ``untouched`` (their paths cross nothing it breaks;
    a dict gives each flow's links).
    A packet is lost when its sequence was skipped across a gap and never arrived
    (``never_arrived``; one that came later, overtaken on a shorter path, was not).
    On a lossy fabric (not ``lossless``), an untouched flow's loss while a queue on
    its path dropped frames (``queue_drops`` {link: n} in the window) is the
    network's (rerouted traffic may overflow a queue): ``untouched_queue_lost_packets``,
    not ``untouched_lost_packets``.  On a lossless fabric no queue may drop: it counts.
    A gap counts from ``lead_ns`` after the last packet before it (one probe
    interval and the emulator's arrival jitter, ``JITTER_NS``): a gap that a fault
    opens begins with a packet that arrived just before the fault (up to ~1 ms
    before it was seen at 1 kpps)."""
    lost, end, repair_lost, lost_untouched, lost_queued = 0, None, 0, 0, 0
    t_repair = t_start + fault["repair_s"] * 1e9
    dropped = {k for k, n in (queue_drops or {}).items() if n > 0}
    for key, r in recv.items():
        queued = not lossless and bool(dropped & set(
            untouched.get(key, ()) if isinstance(untouched, dict) else ()))
        for g in r.get("disruptions", []):
            first = g["start_ns"] + lead_ns
            n = g.get("never_arrived", g["skipped"])     # skipped, then arrived: reordered
            if key in untouched and t_start <= first < t_next:
                if queued:
                    lost_queued += n
                else:
                    lost_untouched += n
            if t_start <= first < t_next and n > 0:
                lost += n
                if first >= t_repair:
                    repair_lost += n                 # lost to the repair (a link back)
                else:
                    end = g["end_ns"] if end is None else max(end, g["end_ns"])
    detect = None
    for ev in converged:
        if ev.get("event") == "port" and t_start / 1e9 <= ev.get("t_event", 0) < t_next / 1e9:
            ms = (ev["t_event"] - t_start / 1e9) * 1e3
            detect = ms if detect is None else min(detect, ms)
    return dict(fault, t_ns=t_start, lost_packets=lost, repair_lost_packets=repair_lost,
                untouched_lost_packets=lost_untouched,
                untouched_queue_lost_packets=lost_queued,
                queue_drops=dict(sorted((k, n) for k, n in (queue_drops or {}).items() if n)),
                detection_ms=None if detect is None else round(detect, 3),
                recovery_ms=None if end is None else round((end - t_start) / 1e6, 3))


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


def soak(s, inj, pairs, faults, args, work, out):
    """Run the probes and the reliable jobs for the soak and inject ``faults`` in turn;
    returns (sent, recv, fidelity, [t_ns the fault started], interrupted, job summary).
    On Ctrl-C the active fault is repaired and what ran so far returned."""
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
    starts, pending, interrupted = [], [], False
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
                    out(f"... fault {len(starts)}/{len(faults)} at {f['at_s']:.1f}s: "
                        f"{f['kind']} {f['target']} for {f['repair_s']:.2f}s")
                scenario.execute(inj, ev)
                pending.remove(ev)
        delay = t0 + args.chaos_duration - time.monotonic()
        if delay > 0:
            time.sleep(delay)               # the soak's length, faults or not
        job = jobs.stop()
        res = eng.result(timeout=duration + 60)
        marks.mark()                        # the last fault's window: to the traffic's end
        watch.stop()
    except (KeyboardInterrupt, Interrupted):
        interrupted = True
        out("... interrupted: repairing the active fault, writing what ran")
        for ev in pending:
            if ev.action in ("restore", "loss_stop", "recover") or (
                    ev.action == scenario.CONTROLLER and ev.target == "restart"
                    and s.controller is not None and not s.controller.alive()):
                scenario.execute(inj, ev)
        return {}, {}, None, starts, interrupted, None, [], None
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
    fid = watch.verdict(res["engine"]["sent_packets"], lost=lost_frames(res),
                        engine=res["engine"], faulted=faulted_links(events, s.topo),
                        fault_drops=marks.fault_drops(per_fault, [f["repair_s"] for f in faults],
                                                      link_names(s.topo)))
    return (sent, recv, fid, starts, interrupted, job, marks.queue_drops(link_names(s.topo)),
            (res.get("latency_ms") or {}).get("p99.9"))


def report(faults, starts, sent, recv, fid, converged, paths, topo, interrupted, pps=1000.0,
           job=None, drops=(), lossless=False, in_flight_ms=None):
    """drill.json's ``chaos``: per-fault rows, totals, invariants (leftovers added later).
    ``drops``: {link: queue drops} per fault window (``window_drops``); ``in_flight_ms``:
    the probes' p99.9 one-way latency (``lead_ns``)."""
    ends = starts[1:] + [float("inf")]
    drops = list(drops) + [None] * (len(starts) - len(drops))
    span = {k: ecmp_span(p, topo) for k, p in paths.items()}
    links = {k: path_links(p, topo) for k, p in paths.items()}
    rows = [fault_result(f, t, e, recv, converged,
                         {k: links[k] for k in paths
                          if not crosses(span[k], events_of(f), topo)},
                         lead_ns(pps, in_flight_ms), w, lossless)
            for f, t, e, w in zip(faults, starts, ends, drops)]
    received = sum(r.get("received_packets", 0) for r in recv.values())
    total = sum(sent.values())
    lost_untouched = sum(r["untouched_lost_packets"] for r in rows)
    lost_queued = sum(r["untouched_queue_lost_packets"] for r in rows)
    inv = {"every_fault_reported": len(rows) == len(starts)}
    if not interrupted:
        inv["no_emulation_drops"] = (fid or {}).get("emulation_drops", {}).get("total", 1) == 0
        inv["untouched_flows_lost_nothing"] = lost_untouched == 0
    not_checked = {}
    if job is not None:
        inv["reliable_qps_delivered_or_dead"] = job["reliable"]["holds"]
    else:
        not_checked["reliable_qps_delivered_or_dead"] = "the soak was interrupted: its " \
                                                        "jobs' QPs were not all read"
    return {"faults": rows, "drawn": len(faults), "injected": len(starts),
            "interrupted": interrupted,
            "totals": {"sent_packets": total, "received_packets": received,
                       "lost_packets": total - received if total else None,
                       "delivered": round(received / total, 6) if total else None,
                       "untouched_lost_packets": lost_untouched,
                       "untouched_queue_lost_packets": lost_queued},
            "fabric": FABRIC_KIND[bool(lossless)],
            "fidelity": (fid or {}).get("verdict"),
            "emulation_drops": (fid or {}).get("emulation_drops"),
            "network_drops": (fid or {}).get("network_drops"),
            "invariants": inv, "job": job, "not_checked": not_checked,
            "probe_paths": paths}


def table(chaos):
    lines = [f"{'#':>3} {'at s':>7} {'kind':<6} {'where':<16} {'repair s':>8} "
             f"{'detect ms':>9} {'recovery ms':>11} {'lost':>6} {'at repair':>9} "
             f"{'others':>6}"]
    f = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    for i, r in enumerate(chaos["faults"], 1):
        lines.append(f"{i:>3} {r['at_s']:>7.2f} {r['kind']:<6} {r['target']:<16} "
                     f"{r['repair_s']:>8.2f} {f(r['detection_ms']):>9} "
                     f"{f(r['recovery_ms']):>11} {r['lost_packets']:>6} "
                     f"{r['repair_lost_packets']:>9} {r.get('untouched_lost_packets', 0):>6}")
    t = chaos["totals"]
    if t.get("untouched_queue_lost_packets"):
        lines.append(f"untouched flows also lost {t['untouched_queue_lost_packets']} packets "
                     "while a queue on their path dropped frames (the network's on a "
                     f"{chaos.get('fabric', 'lossy')} fabric; per fault: queue_drops)")
    lines.append(f"soak: {chaos['injected']}/{chaos['drawn']} faults, probes sent "
                 f"{t['sent_packets']}, delivered {t['delivered']}, lost {t['lost_packets']}; "
                 f"fidelity {chaos['fidelity']}"
                 + (" (INTERRUPTED)" if chaos["interrupted"] else ""))
    job = chaos.get("job")
    if job:
        r = job["reliable"]
        lines.append(f"jobs: {job['instances']} instances over {', '.join(job['hosts'])}, "
                     f"{job['interruptions']} interrupted, {job['calls_completed']} calls "
                     f"completed; {r['qps']} QPs sent {r['sent_packets']} packets, "
                     f"{r['delivered_packets']} delivered, {r['failed_qps']} QPs failed, "
                     f"{r['flushed_qps']} flushed, {r['violations_total']} unaccounted")
    for name, ok in chaos["invariants"].items():
        lines.append(f"invariant {name}: {'true' if ok else 'FALSE'}")
    for name, why in chaos["not_checked"].items():
        lines.append(f"invariant {name}: not checked ({why})")
    return "\n".join(lines)


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
    chaos, tag = None, None
    try:
        with Session(spec.replace(failover=mode, results=base),
                     progress=lambda m: out(f"... [{mode}] {m}")) as s:
            tag = s.state.tag
            pairs, paths = path_pairs(s, planned)
            inj = Injector(s, detect=detect)
            try:
                sent, recv, fid, starts, interrupted, job, drops, in_flight = soak(
                    s, inj, pairs, faults, args, os.path.join(s.dir, "soak"), out)
            finally:
                inj.close()
            converged = s.controller.converged() if s.controller else []
            chaos = report(faults, starts, sent, recv, fid, converged, paths, s.topo,
                           interrupted, args.pps, job, drops, s.pfc is not None, in_flight)
            doc["modes"] = [{"mode": mode, "results_dir": s.dir}]
    finally:
        if chaos is None:
            chaos = report(faults, [], {}, {}, None, [], {}, topo, True)
        if tag is not None:
            left = cleanup.leftovers(tag)
            chaos["invariants"]["nothing_left_behind"] = not left
            chaos["left_behind"] = left
        doc["chaos"] = chaos
        with open(os.path.join(base, "drill.json"), "w") as f:
            json.dump(doc, f, indent=1)
    out(table(chaos))
    out(f"results: {base}/drill.json")
    if chaos["interrupted"]:
        raise KeyboardInterrupt
    return 0 if all(chaos["invariants"].values()) else 1
