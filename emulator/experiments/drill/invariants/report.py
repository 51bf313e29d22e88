"""A chaos soak's report (drill.json ``chaos``): a row per fault, totals, the
invariants its traffic decides, and the allowances with what they excused.

A fault's window runs from its start to the next fault's (the last one's to
the traffic's end); the time before the first fault is calm, and every flow
is untouched then.  A packet is lost when its sequence was skipped across a
gap and never arrived (``never_arrived``; one that came later, overtaken on a
shorter path, was not).  A gap belongs to the window its loss began in: one
probe interval after the gap's last packet, plus the ``in_flight`` allowance
(``lead_ns``).  The invariants the log, the teardown and the files decide
are added by the soak (``chaos.main``).
"""

from emulator.dataplane.observe.counters import OVSDB_STATS_S
from emulator.experiments.drill.invariants import allowances
from emulator.experiments.measure.paths import crosses, ecmp_span, path_links
from emulator.experiments.spec import scenario
from traffic.nic.pacing import DEFAULT_LAG_NS

JITTER_NS = int(allowances.JITTER_MS * 1e6)
FABRIC_KIND = {True: "lossless", False: "lossy"}   # the soak's label of its fabric


def lead_ns(pps, in_flight_ms=None, allow=True):
    """How long after the last packet before a gap its loss may have begun: one probe
    interval, and (the ``in_flight`` allowance) the arrival jitter or, if longer,
    the packets still in flight (the probes' p99.9 one-way latency): a fault loses
    what was in flight when it struck, so its gap opens with a packet that arrived
    up to that long before it (a spine crash's gap opened 8.9 ms before it, at a
    p99.9 of 16.2 ms, and was counted against the fault before, on a flow that
    fault did not touch).  ``allow=False``: the interval alone."""
    return 1e9 / pps + (max(JITTER_NS, (in_flight_ms or 0) * 1e6) if allow else 0)


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
    On a lossy fabric (not ``lossless``), an untouched flow's loss while a queue on
    its path dropped frames (``queue_drops`` {link: n} in the window) is the
    network's (the ``lossy_path`` allowance): ``untouched_queue_lost_packets``,
    not ``untouched_lost_packets``.  On a lossless fabric no queue may drop: it
    counts.  A gap counts from ``lead_ns`` after the last packet before it."""
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


def calm_lost(recv, t_first, lead_ns):
    """Packets lost before the first fault (at ``t_first`` ns): no fault touched any
    flow then."""
    return sum(g.get("never_arrived", g["skipped"]) for r in recv.values()
               for g in r.get("disruptions", []) if g["start_ns"] + lead_ns < t_first)


def report(faults, ran, converged, paths, topo, pps=1000.0, lossless=False):
    """drill.json's ``chaos`` of a soak that ``ran`` ({starts, sent, recv, fid,
    verdicts: (without the statistics lag, without the faulted links), interrupted,
    job, drops: per window {link: queue drops}, in_flight_ms, sender: the probe
    engine's counts, catch_up_ms}); the log's, the teardown's and the files'
    invariants are added by the soak."""
    starts, recv, sent = ran.get("starts", []), ran.get("recv", {}), ran.get("sent", {})
    fid, job, interrupted = ran.get("fid"), ran.get("job"), ran.get("interrupted", True)
    ends = starts[1:] + [float("inf")]
    drops = list(ran.get("drops") or ()) + [None] * len(starts)
    span = {k: ecmp_span(p, topo) for k, p in paths.items()}
    links = {k: path_links(p, topo) for k, p in paths.items()}
    untouched = [{k: links[k] for k in paths if not crosses(span[k], events_of(f), topo)}
                 for f in faults[:len(starts)]]
    t_first = starts[0] if starts else float("inf")

    def attribute(lead, lossy):
        rows = [fault_result(f, t, e, recv, converged, u, lead, w, not lossy)
                for f, t, e, w, u in zip(faults, starts, ends, drops, untouched)]
        return rows, calm_lost(recv, t_first, lead)

    def breaches(rows, calm):
        return calm + sum(r["untouched_lost_packets"] for r in rows)

    lead = lead_ns(pps, ran.get("in_flight_ms"))
    rows, calm = attribute(lead, not lossless)
    actual = breaches(rows, calm)
    strict = breaches(*attribute(lead_ns(pps, allow=False), False))
    no_lossy = breaches(*attribute(lead, False))
    lag, faulted = allowances.verdict_excuses(fid, *(ran.get("verdicts") or (None, None)))
    catch_up = ran.get("catch_up_ms")
    values = {"in_flight": round((lead - 1e9 / pps) / 1e6, 3),
              "lossy_path": None if lossless else True,
              "sender_catch_up": catch_up if catch_up and catch_up * 1e6 > DEFAULT_LAG_NS
              else None,
              "ovsdb_stats_lag": OVSDB_STATS_S if lag is not None else None,
              "faulted_links": True, "aborted_job": True if job else None}
    excused = {"in_flight": strict - no_lossy, "lossy_path": no_lossy - actual,
               "sender_catch_up": (ran.get("sender") or {}).get("caught_up_packets"),
               "ovsdb_stats_lag": lag, "faulted_links": faulted,
               "aborted_job": job["reliable"].get("flushed_packets") if job else None}
    received = sum(r.get("received_packets", 0) for r in recv.values())
    total = sum(sent.values())
    inv, not_checked = {}, {}
    if not interrupted:
        inv["no_emulation_drops"] = allowances.emulation_total(fid or {}) == 0
        inv["untouched_flows_lost_nothing"] = actual == 0
    if job is not None:
        inv["reliable_qps_delivered_or_dead"] = job["reliable"]["holds"]
    else:
        not_checked["reliable_qps_delivered_or_dead"] = "the soak was interrupted: its " \
                                                        "jobs' QPs were not all read"
    return {"faults": rows, "drawn": len(faults), "injected": len(starts),
            "why": reasons(inv, rows, calm, fid, job),
            "interrupted": interrupted,
            "totals": {"sent_packets": total, "received_packets": received,
                       "lost_packets": total - received if total else None,
                       "delivered": round(received / total, 6) if total else None,
                       "calm_lost_packets": calm,
                       "untouched_lost_packets": actual - calm,
                       "untouched_queue_lost_packets": sum(
                           r["untouched_queue_lost_packets"] for r in rows)},
            "fabric": FABRIC_KIND[bool(lossless)],
            "fidelity": (fid or {}).get("verdict"),
            "emulation_drops": (fid or {}).get("emulation_drops"),
            "network_drops": (fid or {}).get("network_drops"),
            "invariants": inv,
            "allowances": {} if interrupted else allowances.table(values, excused),
            "job": job, "not_checked": not_checked, "probe_paths": paths}


def reasons(inv, rows, calm, fid, job):
    """{invariant: why it is false} for the invariants the traffic decided false."""
    why = {}
    if inv.get("untouched_flows_lost_nothing") is False:
        per = [f"{n} at fault {i}" for i, n in
               ((i, r["untouched_lost_packets"]) for i, r in enumerate(rows, 1)) if n]
        why["untouched_flows_lost_nothing"] = ", ".join(
            ([f"{calm} before the first fault"] if calm else []) + per) + \
            " (packets of flows the fault did not touch)"
    if inv.get("no_emulation_drops") is False:
        emu = (fid or {}).get("emulation_drops")
        why["no_emulation_drops"] = "no fidelity verdict" if emu is None else ", ".join(
            f"{k} {v if not isinstance(v, dict) else sum(v.values())}"
            for k, v in emu.items() if v and k != "total")
    if inv.get("reliable_qps_delivered_or_dead") is False:
        r = job["reliable"]
        why["reliable_qps_delivered_or_dead"] = (
            f"{r['violations_total']} QPs or instances unaccounted for; the first: "
            f"{r['violations'][0]['problem']}" if r["violations"] else "")
    return why


def table(chaos):
    """The soak's printout: a line per fault, totals, allowances, invariants."""
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
    if t.get("calm_lost_packets"):
        lines.append(f"probes lost {t['calm_lost_packets']} packets before the first fault")
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
    lines += allowances.lines(chaos.get("allowances") or {})
    why = chaos.get("why") or {}
    for name, ok in chaos["invariants"].items():
        lines.append(f"invariant {name}: {'true' if ok else 'FALSE'}"
                     + (f" ({why[name]})" if not ok and why.get(name) else ""))
    for name, reason in chaos["not_checked"].items():
        lines.append(f"invariant {name}: not checked ({reason})")
    return "\n".join(lines)
