"""The drill's figures from what the probes saw (pure: no fabric, no processes).

Per flow (``flow_result``): lost packets, the loss window (lost sequences /
pps), recovery, the longest arrival gap; per repeat the controller's
convergence from its log; over the repeats (``summarise``) median / p95 /
max of the crossing flows' figures, the lost packets of the others (must be
0), the *stall*: the longest gap of flows that do not cross the fault, and
*calm*: the same flows' longest gap before the fault.  They lose nothing, so
their gaps are the emulator's: its arrival jitter (calm) plus any pause the
fault itself causes it (stall - calm).  Both are part of every crossing
flow's gap too.
"""

import statistics

from emulator.experiments.measure.stats import stats


def flow_result(recv, sent, t_fault, t_restore, pps, duration_s=None, calm_from=None):
    """One flow's drill figures from its receiver summary and sent count.

    ``calm_gap_ms`` is the flow's longest gap between ``calm_from`` and the
    fault (ns; None: not measured): what the emulator's arrival jitter alone
    produces, the floor under every gap measured during the fault.

    ``loss_window_ms`` is the sender-time span of the sequences lost in the
    gaps around the fault (skipped PSNs / pps): the userspace OVS thread and
    the Python receiver both stall for tens of ms under load, which delays
    packets without losing them, so arrival gaps (``longest_gap_ms``) measure
    the stall, lost sequences measure the failover.
    """
    if duration_s:
        # the sender's achieved rate: on a loaded machine it falls short of --pps
        pps = min(pps, sent / duration_s) if sent else pps
    gaps = recv.get("disruptions", []) if recv else []
    # A gap starts at the arrival of the packet before it.  Packets lost to the
    # restore were sent after it, so the packet before them was sent at most one
    # interval earlier and arrived later still: a gap starting after
    # t_restore - 1/pps is the restore's (restore_lost_packets), not the fault's.
    end = t_restore - int(1e9 / pps) if t_restore is not None else float("inf")
    fault_gaps = [g for g in gaps if g["end_ns"] > t_fault and g["start_ns"] < end]
    received = recv["received_packets"] if recv else 0
    dup = recv["duplicated_packets"] if recv else 0
    lost = max(sent - (received - dup), 0)
    # A gap skips sequences; if they arrive later they were reordered, not lost:
    # what the fault lost is at most what the flow lost in all.
    lossy = [g for g in fault_gaps if g["skipped"] > 0] if lost else []
    skipped = min(sum(g["skipped"] for g in lossy), lost)
    return {
        "sent_packets": sent, "received_packets": received,
        "lost_packets": lost,
        "fault_lost_packets": skipped,
        "duplicated_packets": dup,
        "reordered_packets": recv["reordered_packets"] if recv else 0,
        "total_disruptions": recv["total_disruptions"] if recv else 0,
        "longest_disruption": recv["longest_disruption"] if recv else None,
        "loss_window_ms": round(skipped / pps * 1e3, 3),
        "longest_gap_ms": round(max((g["ms"] for g in fault_gaps), default=0.0), 3),
        "recovery_ms": round((max(g["end_ns"] for g in lossy) - t_fault) / 1e6, 3)
        if lossy else 0.0,
        "restore_lost_packets": sum(g["skipped"] for g in gaps if g["start_ns"] >= end),
        "calm_gap_ms": None if calm_from is None else round(max(
            (g["ms"] for g in gaps if g["start_ns"] >= calm_from and g["end_ns"] <= t_fault),
            default=0.0), 3),
    }


def summary_line(rep):
    cross = [f["loss_window_ms"] for f in rep["flows"].values() if f["crosses"]]
    conv = rep["controller"]["convergence_ms"] if rep["controller"] else None
    late = rep["fidelity"].get("bfd_late_sends") or {}
    bfd = (f", BFD sent {late['late_sends']} packets late (up to {late['max_ms']} ms)"
           if late.get("late_sends") else "")
    return (f"worst loss window {max(cross, default=0):.1f} ms over {len(cross)} crossing flows, "
            f"controller {conv} ms{bfd}, {rep['fidelity']['verdict']}")


def summarise(repeats):
    win = [f["loss_window_ms"] for r in repeats for f in r["flows"].values() if f["crosses"]]
    rec = [f["recovery_ms"] for r in repeats for f in r["flows"].values() if f["crosses"]]
    lost = [f["fault_lost_packets"] for r in repeats for f in r["flows"].values() if f["crosses"]]
    other = [f["fault_lost_packets"] for r in repeats for f in r["flows"].values()
             if not f["crosses"]]
    gap = [f["longest_gap_ms"] for r in repeats for f in r["flows"].values() if f["crosses"]]
    # flows that do not cross lose nothing; their longest gap is the fabric's own pause
    stall = [max(f["longest_gap_ms"] for f in r["flows"].values() if not f["crosses"])
             for r in repeats if any(not f["crosses"] for f in r["flows"].values())]
    # the same flows before the fault: the jitter floor the stall stands on
    calm = [max(f["calm_gap_ms"] for f in r["flows"].values() if not f["crosses"])
            for r in repeats if any(not f["crosses"] and f.get("calm_gap_ms") is not None
                                    for f in r["flows"].values())]
    conv = [r["controller"]["convergence_ms"] for r in repeats if r["controller"]]
    detect = [r["controller"]["first_port_status_ms"] for r in repeats if r["controller"]]
    after = [r["controller"]["after_detection_ms"] for r in repeats
             if r["controller"] and "after_detection_ms" in r["controller"]]
    # a crossing flow's last lossy gap ends this long after the fault was detected
    rec_after = [f["recovery_ms"] - r["controller"]["first_port_status_ms"]
                 for r in repeats if r["controller"] for f in r["flows"].values()
                 if f["crosses"] and f["fault_lost_packets"]]
    return {"loss_window_ms": stats(win), "recovery_ms": stats(rec), "longest_gap_ms": stats(gap),
            "stall_ms": stats(stall), "calm_ms": stats(calm),
            "lost_packets_crossing": stats(lost),
            "controller_convergence_ms": stats(conv),
            "detection_ms": stats(detect),
            "convergence_after_detection_ms": stats(after),
            "recovery_after_detection_ms": stats(rec_after),
            "non_crossing_flows": len(other), "non_crossing_lost_packets": sum(other),
            "duplicated_packets": sum(f["duplicated_packets"] for r in repeats
                                      for f in r["flows"].values()),
            "reordered_packets": sum(f["reordered_packets"] for r in repeats
                                     for f in r["flows"].values()),
            "emulator_bound_repeats": sum(1 for r in repeats
                                          if r.get("fidelity", {}).get("verdict",
                                                                       "faithful") != "faithful")}


def per_flow_lines(results):
    """With two modes or more: each crossing flow's median loss window per mode, and
    fast-failover's over controller's.  A flow the data plane repairs in both modes
    (leaving the cut switch: a select bucket watching its port) has the same window
    in both; the one that waits for the controller shows the gap between them,
    which a median over all crossing flows dilutes."""
    if len(results) < 2:
        return []
    per = {}
    for res in results:
        for r in res["repeats"]:
            for key, f in r["flows"].items():
                if f["crosses"]:
                    per.setdefault(key, {}).setdefault(res["mode"], []).append(
                        (f["loss_window_ms"], f.get("path")))
    if not per:
        return []
    lines = ["loss window per crossing flow (lost / pps ms, median over the repeats):"]
    for key in sorted(per):
        meds = {m: statistics.median(w for w, _ in v) for m, v in per[key].items()}
        path = next((p for v in per[key].values() for _, p in v if p), None)
        where = " > ".join(hop.split(":")[0] for hop in path) if path else ""
        text = ", ".join(f"{m} {w:.1f}" for m, w in meds.items())
        ctl, ff = meds.get("controller"), meds.get("fast-failover")
        ratio = f" (fast-failover/controller {ff / ctl:.2f}x)" if ctl and ff is not None else ""
        lines.append(f"  {key} [{where}]: {text}{ratio}")
    return lines


def table(results):
    """Per mode: the longest arrival gap of crossing flows (the headline, SONiC's
    longest disruption), lost sequences / pps, controller convergence, fidelity."""
    def fmt(st):
        return "-" if not st else f"{st['median']:>8.2f} {st['p95']:>8.2f} {st['max']:>8.2f}"
    lines = [f"{'mode':<14} {'longest gap ms':>26} {'lost / pps ms':>26} "
             f"{'controller conv ms':>26} {'stall ms':>8} {'calm ms':>8} {'others lost':>11} "
             f"{'dup':>5} {'reord':>5}  fidelity",
             f"{'':<14} {'median      p95      max':>26} {'median      p95      max':>26} "
             f"{'median      p95      max':>26} {'median':>8} {'median':>8}"]
    for res in results:
        sm = res["summary"]
        n = len(res["repeats"])
        bound = sm.get("emulator_bound_repeats", 0)
        lines.append(f"{res['mode']:<14} {fmt(sm['longest_gap_ms']):>26} "
                     f"{fmt(sm['loss_window_ms']):>26} "
                     f"{fmt(sm['controller_convergence_ms']):>26} "
                     f"{sm['stall_ms']['median'] if sm.get('stall_ms') else '-':>8} "
                     f"{sm['calm_ms']['median'] if sm.get('calm_ms') else '-':>8} "
                     f"{sm['non_crossing_lost_packets']:>11} {sm['duplicated_packets']:>5} "
                     f"{sm['reordered_packets']:>5}  "
                     + (f"EMULATOR-BOUND in {bound}/{n}" if bound else "faithful"))
    for res in results:
        sm = res["summary"]
        if sm.get("detection_ms"):
            rec = sm.get("recovery_after_detection_ms")
            lines.append(f"{res['mode']}: detected {sm['detection_ms']['median']:.1f} ms after "
                         f"the fault (median); controller done "
                         f"{sm['convergence_after_detection_ms']['median']:.1f} ms after "
                         "detection" + (f"; crossing flows' last loss "
                                        f"{rec['median']:.1f} ms (max {rec['max']:.1f}) after it"
                                        if rec else ""))
    lines += per_flow_lines(results)
    lines.append("longest gap: the longest arrival gap of a flow crossing the fault (what an "
                 "application sees); lost / pps: its lost sequences over its packet rate;\n"
                 "stall: the longest gap of the flows that do NOT cross it (they lose nothing) "
                 "during the fault; calm: theirs before it. Both are the emulator's, part of "
                 "every longest gap: no gap shorter than them can be resolved (docs/failover.md)")
    if any(r["summary"].get("emulator_bound_repeats") for r in results):
        lines.append("EMULATOR-BOUND repeats measured this machine's limits: see each "
                     "repeat's fidelity in drill.json")
    return "\n".join(lines)


def control_split(repeats):
    """Over ``repeats``: the loss windows of crossing flows whose own leaf is an end of
    the fault (local) and of the others (remote), detection, convergence, the BGP
    UPDATEs, and the lost packets of the flows that do not cross it: those none of
    whose equal-cost paths does (``untouched``, must be 0) and those a shrinking ECMP
    group may move (``exposed``, counted apart)."""
    flows = [f for r in repeats for f in r["flows"].values()]
    cross = [f for f in flows if f["crosses"]]
    bgp = [r["bgp"] for r in repeats if r.get("bgp")]
    last = [b["last_switch"] for b in bgp if b.get("last_switch")]
    return {
        "local_loss_ms": stats([f["loss_window_ms"] for f in cross if f.get("local")]),
        "remote_loss_ms": stats([f["loss_window_ms"] for f in cross if not f.get("local")]),
        "detection_ms": stats([r["controller"]["first_port_status_ms"] for r in repeats
                               if r.get("controller")]),
        "convergence_ms": stats([r["controller"]["convergence_ms"] for r in repeats
                                 if r.get("controller")]),
        "not_converged": sum(1 for r in repeats if not r.get("controller")),
        "last_switch": max(set(last), key=last.count) if last else None,
        "bgp_updates": stats([b["updates_sent"] for b in bgp]) if bgp else None,
        "hardware_fib_ms": stats([b["hardware_fib_ms"] for b in bgp
                                  if b.get("hardware_fib_ms") is not None]) if bgp else None,
        "untouched_flows": sum(1 for f in flows if not f["crosses"] and not f.get("exposed")),
        "untouched_lost": sum(f["fault_lost_packets"] for f in flows
                              if not f["crosses"] and not f.get("exposed")),
        "exposed_flows": sum(1 for f in flows if not f["crosses"] and f.get("exposed")),
        "exposed_lost": sum(f["fault_lost_packets"] for f in flows
                            if not f["crosses"] and f.get("exposed")),
        "emulator_bound": sum(1 for r in repeats if r.get("fidelity", {}).get(
            "verdict", "faithful") != "faithful"),
        "repeats": len(repeats)}


def control_table(results):
    """The control planes side by side (OpenFlow's controller, fast-failover, data-plane
    DLB, BGP with BFD): per mode the local and remote flows' loss windows (lost / pps,
    median and max), detection and convergence (median), BGP's UPDATEs per repeat,
    what the flows that do not cross the fault lost, fidelity."""
    def mm(st):
        return "-" if not st else f"{st['median']:.1f} / {st['max']:.1f}"

    def med(st):
        return "-" if not st else f"{st['median']:.1f}"
    lines = [f"{'mode':<26} {'local ms':>13} {'remote ms':>13} {'detect ms':>9} "
             f"{'converge ms':>11} {'last':>7} {'updates':>7} {'untouched':>9} "
             f"{'exposed':>9}  fidelity",
             f"{'':<26} {'median / max':>13} {'median / max':>13} {'median':>9} "
             f"{'median':>11} {'switch':>7} {'median':>7} {'lost':>9} {'lost':>9}"]
    for res in results:
        c = control_split(res["repeats"])
        res["summary"]["control"] = c
        upd = "-" if not c["bgp_updates"] else f"{c['bgp_updates']['median']:g}"
        conv = med(c["convergence_ms"]) + (f" ({c['not_converged']} never)"
                                           if c["not_converged"] else "")
        fid = (f"EMULATOR-BOUND in {c['emulator_bound']}/{c['repeats']}"
               if c["emulator_bound"] else "faithful")
        lines.append(f"{res['mode']:<26} {mm(c['local_loss_ms']):>13} "
                     f"{mm(c['remote_loss_ms']):>13} {med(c['detection_ms']):>9} "
                     f"{conv:>11} {c['last_switch'] or '-':>7} {upd:>7} "
                     f"{c['untouched_lost']:>4}/{c['untouched_flows']:<4} "
                     f"{c['exposed_lost']:>4}/{c['exposed_flows']:<4}  {fid}")
    lines.append("local: crossing flows whose own leaf is an end of the fault (it repairs "
                 "them itself); remote: the other crossing flows; untouched: lost packets / "
                 "flows none of whose equal-cost paths crosses the fault (must be 0); "
                 "exposed: those a shrinking ECMP group may move; BGP's convergence lasts "
                 "until no router's FIB routes through the fault (docs/bgp.md)")
    hw = [(res["mode"], res["summary"]["control"]["hardware_fib_ms"]) for res in results
          if res["summary"]["control"].get("hardware_fib_ms")]
    for mode, st in hw:
        lines.append(f"{mode}: with a hardware FIB (200 route changes/s, the switch-agent "
                     f"model's table rate) convergence would be {st['median']:.1f} ms "
                     "(median)")
    return "\n".join(lines)


# ---- drills under a collective or a training job ------------------------------

def disturbed(rows, t_fault_ns):
    """Index of the call whose [start, start + time] holds ``t_fault_ns`` (or the
    first call that started after it), None if the fault came after every call."""
    for i, r in enumerate(rows):
        if r["t_start_ns"] <= t_fault_ns <= r["t_start_ns"] + r["time_s"] * 1e9:
            return i
    later = [i for i, r in enumerate(rows) if r["t_start_ns"] > t_fault_ns]
    return later[0] if later else None


def collective_verdict(ranks, t_fault_ns):
    """One repeat of a drill under a collective, judged from the rank results."""
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


def training_verdict(t, t_fault_ns):
    """One repeat of a drill under a training job, judged from its ``training`` document."""
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


def workload_summary(reps):
    """A drill's mode under a workload over its repeats: slowdowns, retransmissions, deaths."""
    slow = sorted(r["slowdown"] for r in reps if r["slowdown"] is not None)
    return {"repeats": len(reps),
            "slowdown_median": slow[len(slow) // 2] if slow else None,
            "slowdown_max": slow[-1] if slow else None,
            "retransmitted_median": sorted(r["retransmitted"] for r in reps)[len(reps) // 2],
            "timeouts_median": sorted(r["timeouts"] for r in reps)[len(reps) // 2],
            "jobs_died": sum(r["job_died"] for r in reps),
            "wrong": sum(r["wrong"] for r in reps),
            "faithful": sum(r["fidelity"] == "faithful" for r in reps)}
