"""A drill's controller convergence under switch agents, predicted before its first repeat.

Under ``--switch-agent NAME|FILE`` (or a fabric file's models) the drill
prints, per failover mode and before the first repeat, the convergence the
model predicts for the schedule's first fault (a link cut), and then
measures it in every repeat (fault -> the last port-down push acknowledged,
``measure.convergence``).  The prediction (``agents.predict.convergence``)
uses only:

* the model's parameters, per switch (its kind's);
* the repair the controller's pure policy computes offline for the fault
  (``controller.state.repair``, run as ``python -m controller.state``: the
  controller is a program of its own): the messages per switch, in the
  controller's order, and the table each switch holds before it (the
  installation of the healthy fabric), for the priority dependence;
* a calibration of what is not the switch agent's, measured once on the
  ideal agent (every switch through the proxy, every delay 0) in a separate
  run of the same drill on its own fabric (``CAL_REPEATS`` repeats): the
  detection (fault -> the first PORT_STATUS read), the controller's compute
  and sends, Open vSwitch's barrier round trip with the controller's turn
  per switch, and the tail after the repair push (the other end's event).

The calibration is cached (``CACHE``, by machine, fabric, schedule, modes
and probes: ``calibration_key``) like ``emulator calibrate``'s budget;
``--agent-calibration fresh`` measures it again.  Per repeat drill.json
carries the measured convergence beside the prediction (and the push the
proxy saw, to check the offline repair against); per mode the median and its
error.
"""

import argparse
import datetime
import hashlib
import json
import os
import sys

from emulator.dataplane.ovs.controller_proc import REPO
from emulator.dataplane.system import proc
from emulator.experiments import calibrate
from emulator.experiments.measure import budget
from emulator.experiments.measure.paths import fault_ports
from emulator.experiments.measure.stats import median
from emulator.experiments.repeat import each_mode
from emulator.fabric import switch_agent
from emulator.fabric.agents import predict
from lab.modes import Failover

CACHE = "/var/cache/fabric-lab/agent-calibration.json"
CAL_REPEATS = 5
TOLERANCE = 0.25           # the prediction holds when the median is within this of it
DRILL_KEYS = ("probes", "qps", "pps", "frame_len", "rails", "detect", "bfd", "at", "hold",
              "post", "resolution", "datapath", "lb", "hash_seed", "queue_ms", "mtu")


def add_arguments(p):
    """``drill``'s option for the prediction's calibration."""
    p.add_argument("--agent-calibration", choices=("cached", "fresh"), default="cached",
                   help="the ideal agent's calibration a switch agent's prediction uses: "
                        "cached (default) or measured again (docs/switch-agents.md)")


# ---- the repair, offline --------------------------------------------------------

def to_changes(entries):
    """switch_agent.Change of each of the controller's entries ([op, table, prio, key])."""
    return [switch_agent.Change(op, table, prio, key) for op, table, prio, key in entries]


def offline_repair(topo_doc, events, lb, mode, routing):
    """The first fault's repair as the controller's policy computes it (``python -m
    controller.state``: the controller is a program of its own): {"repair": {dpid:
    [Change]}, "tables": {dpid: Table before it}, "ends": [dpid], "bundle_min": N},
    or a string saying why there is none."""
    if not events or events[0].action != "cut":
        return "the schedule's first fault is not a link cut"
    if Failover(mode) == Failover.NONE:
        return "failover none: the controller repairs nothing"
    doc = dict(topo_doc, modes={"lb": str(lb), "failover": str(mode), "routing": str(routing)})
    down = sorted(fault_ports(events[:1], topo_doc))
    got = json.loads(proc.run([sys.executable, "-m", "controller.state"], timeout=120,
                              input=json.dumps({"topology": doc, "down": down}),
                              env=dict(os.environ, PYTHONPATH=REPO)))
    return {"repair": {int(d): to_changes(m) for d, m in got["repair"].items()},
            "tables": {int(d): predict.occupancy(to_changes(f))
                       for d, f in got["flows"].items()},
            "ends": sorted({d for d, _ in down}), "bundle_min": got["bundle_min"]}


def models_of(fleet, topo_doc):
    """{dpid: Params or None} of every switch."""
    fleet = switch_agent.fleet(fleet)
    return {sw["dpid"]: fleet.for_kind(sw["kind"]) for sw in topo_doc["switches"]}


# ---- the calibration ------------------------------------------------------------

def calibration_key(spec, args, events, mode, dp_type):
    """What a calibration is valid for: the machine, the fabric, the schedule, the
    modes, the probes."""
    try:
        machine = budget.machine_key(calibrate.ovs_version(), dp_type, args.frame_len)
    except Exception:          # no OVS: no key to share (the run will say why)
        machine = "unknown"
    doc = {"machine": machine, "fabric": spec.fabric.to_spec(),
           "events": [vars(e) for e in events], "mode": str(mode),
           "routing": str(spec.routing), "drill": {k: str(getattr(args, k, None))
                                                    for k in DRILL_KEYS}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def load_cache(path=CACHE):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def save_cache(key, doc, path=CACHE):
    data = load_cache(path)
    data[key] = doc
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def calibration_of(repeats):
    """Calibration from the ideal agent's repeats (their ``controller`` entries), or
    None when no repeat converged."""
    convs = [r.get("controller") for r in repeats]
    convs = [c for c in convs if c and c.get("touched")]
    if not convs:
        return None

    def med(f):
        return round(median([f(c) for c in convs]), 3)
    return predict.Calibration(
        detection_ms=med(lambda c: c["first_port_status_ms"]),
        compute_ms=med(lambda c: c.get("compute_ms", 0.0)),
        send_ms=med(lambda c: c.get("send_ms", 0.0)),
        barrier_ms=med(lambda c: c.get("barrier_ms", 0.0) / c["touched"]),
        tail_ms=med(lambda c: max(0.0, c["convergence_ms"] - c["push_done_ms"])),
        repeats=len(convs))


def ideal_agent_file(directory):
    """A model file of the ideal agent through the proxy: every delay 0."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "ideal-agent.yaml")
    with open(path, "w") as f:
        f.write("# the ideal agent, through the proxy: every delay 0\nlatency_ms: 0\n")
    return path


def calibrations(spec, args, events, modes, dp_type, base, run, out):
    """{mode: (Calibration, where from)} for the modes the controller repairs in;
    ``run(spec, modes, repeats, base)`` runs the drill and returns each mode's
    document (``drill.main``'s each_mode)."""
    keys = {m: calibration_key(spec, args, events, m, dp_type) for m in modes
            if Failover(m) != Failover.NONE}
    cache = {} if getattr(args, "agent_calibration", "cached") == "fresh" else load_cache()
    out_of = {m: (predict.Calibration(**cache[k]["calibration"]),
                  f"cached, measured {cache[k]['date']}")
              for m, k in keys.items() if k in cache}
    todo = [m for m in keys if m not in out_of]
    if todo:
        where = os.path.join(base, "agent-calibration")
        out(f"... switch agents: calibrating on the ideal agent ({CAL_REPEATS} repeats of "
            f"{', '.join(todo)} on a fabric of their own, every switch through the proxy "
            f"with no delay; cached in {CACHE})")
        cal_spec = spec.replace(switch_agent=ideal_agent_file(where), results=where,
                                capture=None, ui=False, strict=False)
        today = datetime.date.today().isoformat()
        for doc in run(cal_spec, todo, CAL_REPEATS, where):
            cal = calibration_of(doc["repeats"])
            if cal is None:
                out(f"... [{doc['mode']}] the calibration saw no repair push: no prediction")
                continue
            out_of[doc["mode"]] = (cal, f"measured {today}")
            save_cache(keys[doc["mode"]], {"date": today, "calibration": cal.as_dict(),
                                           "results_dir": doc["results_dir"]})
    return out_of


# ---- the prediction -------------------------------------------------------------

def prediction(fleet, topo_doc, events, spec, mode, cal):
    """The mode's predicted convergence (a dict), or None with the reason."""
    rep = offline_repair(topo_doc, events, spec.lb, mode, spec.routing)
    if isinstance(rep, str):
        return {"none": rep}
    if cal is None:
        return {"none": "no calibration"}
    cal, when = cal
    models = models_of(fleet, topo_doc)
    out = predict.convergence(models, rep["repair"], rep["tables"], cal,
                              [models.get(d) for d in rep["ends"]], rep["bundle_min"])
    out["calibration"] = dict(cal.as_dict(), source=when)
    out["repair"] = {f"{d:x}": {op: sum(c.op == op for c in cs)
                                for op in {c.op for c in cs}}
                     for d, cs in rep["repair"].items()}
    return out


def predictions(spec, args, events, modes, topo, fleet, dp_type, base, out, drill):
    """{mode: the predicted convergence}, printed before the first repeat (after the
    ideal agent's calibration, when it is not cached); ``drill``: the drill's Mode
    class (``drill.ProbeDrill``), for the calibration's run."""
    if fleet is None:
        return {}
    if spec.controller != "builtin":
        out("switch agents: no prediction (the controller is not the built-in one: its "
            "repair is not the policy's)")
        return {}
    quiet = argparse.Namespace(**dict(vars(args), ui=False, ui_view=None))

    def run(cal_spec, ms, repeats, where):
        return each_mode(cal_spec, "failover", ms, repeats,
                         lambda s, m: drill(s, m, quiet, events, where, out), out)
    cals = calibrations(spec, args, events, modes, dp_type, base, run, out)
    out_of = {m: prediction(fleet, topo, events, spec, m, cals.get(m)) for m in modes}
    for m in modes:
        out(prediction_line(m, out_of[m]))
    return out_of


def prediction_line(mode, p):
    if "none" in p:
        return f"switch agents [{mode}]: no prediction ({p['none']})"
    c = p["calibration"]
    return (f"switch agents [{mode}]: predicted controller convergence {p['predicted_ms']:.1f} ms"
            f" = detection {p['detection_ms']:.1f} + port event {p['port_event_ms']:.1f} + "
            f"compute {p['compute_ms']:.1f} + send {p['send_ms']:.1f} + push "
            f"{p['push_ms']:.1f} + tail {p['tail_ms']:.1f} (repair: {p['changes']} changes on "
            f"{p['switches']} switches, from the controller's policy; calibration: ideal agent, "
            f"{c['repeats']} repeats, {c['source']})")


# ---- per repeat, per mode -------------------------------------------------------

def push_counts(records, t0, t1):
    """{dpid: changes} the controller sent in [t0, t1] s, as the proxy read them."""
    per = {}
    for r in records:
        if r["d"] == "down" and t0 <= r["t"] <= t1 and r.get("changes"):
            per[r["dpid"]] = per.get(r["dpid"], 0) + r["changes"]
    return per


def for_repeat(s, conv, t_fault_ns, predicted):
    """One repeat's ``switch_agent`` entry: measured against predicted (None: ideal)."""
    if s.switch_agent is None or not conv:
        return None
    t0 = t_fault_ns / 1e9
    seen = push_counts(s.agent.records() if s.agent else [], t0,
                       t0 + conv["convergence_ms"] / 1e3)
    out = {"measured_ms": conv["convergence_ms"], "seen_changes": sum(seen.values()),
           "seen_switches": len(seen)}
    p = (predicted or {}).get("predicted_ms")
    if p:
        out.update(predicted_ms=p, error=round(conv["convergence_ms"] / p - 1, 4))
    return out


def summary(repeats, predicted):
    """The mode's measured convergence (median over its repeats) against the prediction."""
    reps = [r.get("switch_agent") for r in repeats]
    reps = [r for r in reps if r]
    if not reps:
        return None
    measured = median([r["measured_ms"] for r in reps])
    out = {"repeats": len(reps), "measured_ms": measured,
           "measured_range_ms": [min(r["measured_ms"] for r in reps),
                                 max(r["measured_ms"] for r in reps)]}
    p = (predicted or {}).get("predicted_ms")
    if p:
        err = measured / p - 1
        out.update(predicted_ms=p, error=round(err, 4), within=abs(err) <= TOLERANCE)
    return out


def mode_entries(repeats, predicted):
    """A mode's drill.json entries: the prediction and the summary against it."""
    return {"switch_agent_prediction": predicted,
            "switch_agent_summary": summary(repeats, predicted)}


def text(params, results):
    """The measured-against-predicted lines, one per mode with a prediction."""
    rows = [(r["mode"], r.get("switch_agent_summary")) for r in results]
    rows = [(m, s) for m, s in rows if s and s.get("predicted_ms")]
    if params is None or not rows:
        return ""
    lines = [f"switch agents: {switch_agent.fleet(params).text()}",
             f"{'mode':<14} {'predicted':>9} {'measured':>9} {'error':>7} {'range ms':>15} "
             f"{'repeats':>7}  verdict"]
    for mode, s in rows:
        lo, hi = s["measured_range_ms"]
        lines.append(f"{mode:<14} {s['predicted_ms']:>9.1f} {s['measured_ms']:>9.1f} "
                     f"{s['error']:>+7.1%} {f'{lo:.1f}-{hi:.1f}':>15} {s['repeats']:>7}  "
                     + ("within" if s["within"] else "outside") + f" +-{TOLERANCE:.0%}")
    lines.append("(controller convergence, ms: predicted before the first repeat from the "
                 "model, the policy's repair and the ideal agent's calibration; measured: "
                 "the median over the repeats)")
    return "\n".join(lines)


def doc_entry(params):
    return params.as_dict() if params else "ideal"


def print_text(params, results, out):
    lines = text(params, results)
    if lines:
        out(lines)
