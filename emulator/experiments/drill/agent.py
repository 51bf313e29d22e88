"""A drill's repair push against the switch-agent model's prediction.

Under ``--switch-agent hardware|FILE`` every OpenFlow message passes the agent
proxy (emulator/dataplane/ovs/agent_proxy.py), which logs what it read, per
switch.  For one repeat, ``push_report`` takes the messages the controller
sent between the first PORT_STATUS and its last barrier reply (the repair
push), per switch, and predicts the convergence as the sum of:

* detection (measured): the fault -> the last switch emitting PORT_STATUS
  (the modelled carrier detection, --detect, and Open vSwitch's own pass);
* the port event (model): ``event_ms`` + ``latency_ms``;
* the controller (measured): its ``compute_ms`` + ``send_ms`` for the push
  (CONVERGED line) and its turns from a barrier reply to the next barrier
  (the proxy's log), a program's time, not a switch's;
* Open vSwitch (measured): from the model releasing a barrier to Open
  vSwitch's reply (its main loop also forwards every packet of the fabric);
* the push (model, ``switch_agent.predict_push``): every switch's messages
  and changes at its processing time and table rate, then the controller's
  barriers, one switch after another.

The measured convergence is the drill's (fault -> the last port-down push
acknowledged).  Both are printed side by side with the changes and the
model's rate and latencies.
"""

from emulator.fabric import switch_agent


def push_counts(records, t0, t1):
    """{dpid: [messages, changes]} of the controller's sends read in [t0, t1] s
    (barriers not counted), and the last port status a switch emitted in it
    (its time, its dpid)."""
    per, last_ps, ps_dpid = {}, None, None
    for r in records:
        if r["d"] not in ("up", "down") or not t0 <= r["t"] <= t1:
            continue
        if r["d"] == "up":
            if r.get("port_status") and (last_ps is None or r["t"] > last_ps):
                last_ps, ps_dpid = r["t"], r["dpid"]
        elif r["changes"] or r["barriers"]:
            c = per.setdefault(r["dpid"], [0, 0])
            c[0] += r["msgs"] - r["barriers"]
            c[1] += r["changes"]
    return {d: c for d, c in per.items() if c[0]}, (last_ps, ps_dpid)


def barrier_overheads(records, t0, t1):
    """(ms Open vSwitch took to answer the push's barriers once the model released
    them, ms the controller took from a barrier reply to its next barrier), summed
    over the chain of barriers read in [t0, t1]: time outside the model."""
    chain = sorted((r for r in records if r["d"] == "down" and r.get("barriers")
                    and t0 <= r["t"] <= t1), key=lambda r: r["t"])
    replies = sorted((r for r in records if r.get("barrier_reply") and t0 <= r["t"]),
                     key=lambda r: r["t"])
    ovs = turn = 0.0
    last_out = None
    for b in chain:
        if last_out is not None and b["t"] > last_out:
            turn += b["t"] - last_out
        reply = next((x for x in replies if x["dpid"] == b["dpid"] and x["t"] >= b["out"]),
                     None)
        if reply is None:
            break
        replies.remove(reply)
        ovs += reply["t"] - b["out"]
        last_out = reply["out"]
    return ovs * 1e3, turn * 1e3


def push_report(params, records, conv, t_fault_ns, kinds=None):
    """Predicted and measured convergence of one repeat's repair push, or None.
    ``params``: a switch_agent.Fleet (or one Params); ``kinds``: {dpid: switch kind}."""
    if params is None or not conv:
        return None
    fleet, kinds = switch_agent.fleet(params), kinds or {}

    def model(dpid):
        p = fleet.for_kind(kinds.get(int(dpid, 16))) if dpid else fleet.default
        return p or switch_agent.Params()
    t0 = t_fault_ns / 1e9
    t1 = t0 + conv["convergence_ms"] / 1e3
    per, (last_ps, ps_dpid) = push_counts(records, t0, t1)
    if last_ps is None:
        return None
    order = sorted(per, key=lambda d: int(d, 16) if d else -1)   # the controller's order
    switches = [tuple(per[d]) for d in order]
    detection = (last_ps - t0) * 1e3
    event = switch_agent.predict_port_status(model(ps_dpid))
    ovs, turn = barrier_overheads(records, last_ps, t1)
    controller = conv.get("compute_ms", 0.0) + conv.get("send_ms", 0.0) + turn
    push = switch_agent.predict_push([model(d) for d in order], switches)
    predicted = detection + event + controller + ovs + push
    return {"switches": len(switches), "messages": sum(m for m, _ in switches),
            "changes": sum(c for _, c in switches),
            "max_changes": max((c for _, c in switches), default=0),
            "detection_ms": round(detection, 3), "port_event_ms": round(event, 3),
            "controller_ms": round(controller, 3), "ovs_ms": round(ovs, 3),
            "push_ms": round(push, 3),
            "predicted_ms": round(predicted, 3), "measured_ms": conv["convergence_ms"],
            "error": round(conv["convergence_ms"] / predicted - 1, 4) if predicted else None}


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return None if not n else xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def summary(reports):
    """Medians over a mode's repeats (those with a push)."""
    reps = [r for r in reports if r]
    if not reps:
        return None
    keys = ("changes", "max_changes", "messages", "switches", "detection_ms", "port_event_ms",
            "controller_ms", "ovs_ms", "push_ms", "predicted_ms", "measured_ms", "error")
    out = {k: median([r[k] for r in reps if r.get(k) is not None]) for k in keys}
    out["repeats"] = len(reps)
    out["worst_error"] = max((abs(r["error"]) for r in reps if r["error"] is not None),
                             default=None)
    return out


def text(params, results):
    """The side-by-side lines, one per mode with a push under the model."""
    rows = [(r["mode"], r.get("switch_agent_summary")) for r in results]
    rows = [(m, s) for m, s in rows if s]
    if params is None or not rows:
        return ""
    fleet = switch_agent.fleet(params)
    params = fleet.uniform or fleet.slowest()     # per kind: the slowest figures
    lines = [f"switch agents: {fleet.text()}",
             f"{'mode':<14} {'changes':>7} {'msgs':>5} {'switches':>8} {'rate/s':>7} "
             f"{'lat ms':>6} {'event':>6} {'detect':>7} {'ctl':>6} {'ovs':>5} {'push':>7} "
             f"{'predicted':>9} {'measured':>9} {'error':>7}"]
    for mode, s in rows:
        lines.append(
            f"{mode:<14} {s['changes']:>7g} {s['messages']:>5g} {s['switches']:>8g} "
            f"{params.table_rate:>7g} {params.latency_ms:>6g} {s['port_event_ms']:>6.1f} "
            f"{s['detection_ms']:>7.1f} {s['controller_ms']:>6.1f} {s['ovs_ms']:>5.1f} "
            f"{s['push_ms']:>7.1f} "
            f"{s['predicted_ms']:>9.1f} {s['measured_ms']:>9.1f} {s['error']:>+7.1%}")
    lines.append("(medians over the repeats, ms; predicted = detect + event + ctl + ovs + "
                 "push: event and push from the model; detect (fault -> a switch emits the "
                 "port status), ctl (the controller's compute, sends and turns from a "
                 "barrier reply to the next barrier) and ovs (Open vSwitch answering a "
                 "barrier the model released) measured: they are not the switch agent's)")
    for mode, s in rows:
        tables = s["max_changes"] * params.change_ms()
        lines.append(f"[{mode}] the repair push: {s['changes']:g} table changes on "
                     f"{s['switches']:g} switches, at most {s['max_changes']:g} on one: "
                     f"{tables:.1f} ms of table updates at {params.table_rate:g}/s in a "
                     f"{s['measured_ms']:.1f} ms convergence"
                     + (" (table updates dominate)" if tables > s["measured_ms"] / 2 else ""))
    return "\n".join(lines)


# ---- the drill's hooks (experiments/drill/drill.py) ---------------------------

def for_repeat(s, conv, t_fault_ns):
    """One repeat's ``switch_agent`` entry (None under ideal)."""
    return push_report(s.switch_agent,
                       s.agent.records() if s.agent else [], conv, t_fault_ns,
                       kinds={sw["dpid"]: sw["kind"] for sw in s.topo["switches"]})


def mode_summary(repeats):
    return {"switch_agent_summary": summary([r.get("switch_agent") for r in repeats])}


def doc_entry(params):
    return params.as_dict() if params else "ideal"


def print_text(params, results, out):
    lines = text(params, results)
    if lines:
        out(lines)
