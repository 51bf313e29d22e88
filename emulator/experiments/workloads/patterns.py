"""A network's traffic patterns on a dragonfly: ``adversarial`` and ``permutation``.

Model.  Every host writes ``size`` bytes to one other host at once, paced
at its link rate over RoCE RC (one ``traffic job`` engine process runs every
host's NIC: a send and a receive per host): the hosts *inject at their link
rate* and the network accepts what it can.

* ``adversarial``: host k of group i -> host k of group i+1 (every flow of
  a group on the one global link to the next group under minimal routing);
* ``permutation``: a random permutation of the hosts drawn from ``seed``
  (no host to itself).

Measured (``goodput``, experiments.measure.goodput): each flow's saturated
goodput, in a window after a warm-up in which every sender still has data
queued, as a fraction of its injection rate; their mean and the lowest
flow, or the reason there is no window.  Beside it the completion-based
figure (``completion``: bytes over each transfer's own time, start to last
byte acknowledged).  The regime: open-loop on a lossless fabric without
congestion control (the senders are backlogged throughout, as a steady-state
simulator's sources), closed-loop otherwise (the transport's goodput).  Per
switch-to-switch link direction the utilisation over the run, summarised for
the local and the global links; the transport's counters (retransmitted
frames, timeouts, NAKs, CNPs).  Held against the pattern's LP bounds for each
path set (emulator.fabric.analysis.bounds) and, for the fixed splits, the
fair share (emulator.fabric.analysis.fluid).
"""

import json
import os
import re
import time

from emulator.errors import ConfigError, RunFailed
from emulator.experiments.measure import goodput
from emulator.experiments.measure.watch import Watch
from emulator.experiments.training.launch import job_fidelity, run_engine
from emulator.fabric.analysis import bounds, fluid
from lab.modes import CC, LB, Entropy, FlowControl, Routing
from traffic.roce.frames import frame_len_for_mtu

PATTERNS = ("adversarial", "permutation")


def pairs_for(fabric, pattern, seed=1):
    """[(src host, dst host)] of ``pattern`` on ``fabric``; ConfigError if it has no groups."""
    if pattern not in PATTERNS:
        raise ConfigError("--workload", f"unknown pattern {pattern!r} (one of {PATTERNS})")
    if not all(n.pod is not None for n in fabric.switches) or len(
            {n.pod for n in fabric.switches}) < 2:
        raise ConfigError("--workload", f"{pattern} needs a fabric of groups: run it on "
                                        "-p dragonfly or -p dragonfly-plus")
    if pattern == "adversarial":
        return fluid.adversarial(fabric)
    return fluid.permutation(fabric, seed)


def check_routing(fabric, routing):
    """``--routing`` other than minimal needs a fabric of groups (exit 2 otherwise)."""
    if routing != Routing.MINIMAL and not (all(n.pod is not None for n in fabric.switches)
                                     and len({n.pod for n in fabric.switches}) > 1):
        raise ConfigError("--routing", f"{routing} routing is a dragonfly's: run it on "
                                       "-p dragonfly or -p dragonfly-plus")


def entropy(lb, routing):
    """The NICs' entropy mode: the ``--lb`` one (lab.modes.LB.entropy), but per
    flowlet under Valiant routing with ECMP (each flowlet draws its own group)."""
    lb, routing = LB(lb), Routing(routing)
    return str(Entropy.FLOWLET if routing != Routing.MINIMAL and lb == LB.ECMP
               else lb.entropy)


def job_document(session, pairs, size, extra=None):
    """The ``traffic.jobs.config`` document: one rank per host, each sending ``size``
    bytes to its destination and receiving from its source (send first: eager)."""
    hosts = session.topo["hosts"]
    index = {h["name"]: i for i, h in enumerate(hosts)}
    src_of = {d: s for s, d in pairs}
    endpoints = [{"netns": f"/proc/{session.net.hosts[h['name']].pid}/ns/net",
                  "intf": h["ports"][0]["port"], "ip": h["ports"][0]["ip"],
                  "mac": h["ports"][0]["mac"], "name": h["name"],
                  "rate_bps": h["ports"][0]["rate_bps"]} for h in hosts]
    programs = [[] for _ in hosts]
    for s, d in pairs:
        programs[index[s]].append({"op": "send", "id": f"{s}>{d}", "peer": index[d],
                                   "bytes": size})
    for d, s in src_of.items():
        programs[index[d]].append({"op": "recv", "id": f"{s}>{d}", "peer": index[s],
                                   "bytes": size})
    doc = {"endpoints": endpoints, "ranks": list(range(len(hosts))), "programs": programs,
           "mtu": getattr(session, "mtu", 4096)}
    doc.update({k: v for k, v in (extra or {}).items() if v is not None})
    return doc


def fractions(pairs, result, link_bps):
    """[{host, dst, fraction}]: each flow's completion-based rate over the injection
    rate, from its transfer's network time in the job result (None: it never
    completed)."""
    by_id = {c["id"]: c for c in result["collectives"]}
    out = []
    for s, d in pairs:
        c = by_id.get(f"{s}>{d}", {})
        t = c.get("network_s")
        frac = None if not t or c.get("wrong") else round(
            min(1.0, c["bytes"] * 8 / t / link_bps), 4)
        out.append({"host": s, "dst": d, "fraction": frac,
                    "time_s": None if t is None else round(t, 4)})
    return out


def steady(pairs, result, rate_of, frame_bytes, open_loop):
    """The saturated goodput document (experiments.measure.goodput) of the pattern's
    flows, from the job's per-pair timelines; ``rate_of``: host -> injection bps;
    ``open_loop``: the network paces the senders (the short warm-up), else their
    congestion control (the long one)."""
    by_id = {c["id"]: c for c in result["collectives"]}
    flows = [dict(by_id.get(f"{s}>{d}", {}), rate_bps=rate_of[s]) for s, d in pairs]
    frame = goodput.frame_time_ns(frame_bytes, min(rate_of[s] for s, _ in pairs))
    doc = goodput.saturated(flows, frame, goodput.WARMUP_FRAMES if open_loop
                            else goodput.CLOSED_LOOP_WARMUP_FRAMES)
    if doc["per_flow"] is not None:
        doc["per_flow"] = dict(zip((s for s, _ in pairs), doc["per_flow"]))
    return doc


def transport(result):
    """The transport's totals over every NIC: data frames sent, retransmitted (and
    their share), go-backs by timeout and by NAK, CNPs, CE-marked arrivals, DCQCN
    cuts traced and the last alpha of each QP's reaction point."""
    eps = result["endpoints"]
    t = [e.get("transport", {}) for e in eps]
    sent = sum(e["data_frames_sent"] for e in eps)
    retx = sum(x.get("retransmitted_packets", 0) for x in t)
    return {"data_frames_sent": sent, "retransmitted_frames": retx,
            "retransmitted_share": round(retx / sent, 4) if sent else None,
            "timeouts": sum(x.get("timeouts", 0) for x in t),
            "naks_received": sum(x.get("naks_received", 0) for x in t),
            "cnps_sent": sum(x.get("cnps_sent", 0) for x in t),
            "ce_received": sum(x.get("ce_received", 0) for x in t),
            "dcqcn_cuts": sum(len(e.get("dcqcn_cuts", ())) for e in eps)}


def open_loop(lossless, cc):
    """The network's flow control alone paces the senders (no end-to-end control)."""
    return lossless and cc == CC.NONE


FABRIC_KIND = {True: "lossless", False: "lossy"}   # a regime's label of its fabric


def regime(lossless, cc):
    """``lossless, open-loop`` (no end-to-end rate control: every sender backlogged,
    the network's credits decide) or ``... closed-loop (...)`` (the transport's)."""
    if open_loop(lossless, cc):
        return "lossless, open-loop"
    return (f"{FABRIC_KIND[bool(lossless)]}, closed-loop "
            f"({'RC retransmission' if cc == CC.NONE else f'RC + {cc}'})")


def path_set(routing):
    """The path set a routing mode's bound is taken over (its name)."""
    return str(Routing(routing).path_set)


def utilisation(topo, before, after, seconds):
    """{"local": {...}, "global": {...}}: mean and max utilisation of the switch-to-switch
    link directions, a link being global when its ends' pods differ."""
    pod = {sw["name"]: sw.get("pod") for sw in topo["switches"]}
    got = {"local": [], "global": []}
    for sw in topo["switches"]:
        for p in sw["ports"]:
            if p["peer"] not in pod or not before.get(p["intf"]) or not after.get(p["intf"]):
                continue
            tx = after[p["intf"]][0] - before[p["intf"]][0]
            kind = "global" if pod[p["peer"]] != pod[sw["name"]] else "local"
            got[kind].append(tx * 8 / seconds / p["rate_bps"])
    return {k: {"links": len(v), "mean": round(sum(v) / len(v), 4) if v else None,
                "max": round(max(v), 4) if v else None} for k, v in got.items()}


VALIANT_GROUPS = (1 << 28, 1 << 30)     # controller.dragonfly's select groups' ids
STAMP = "set_field:02:df:00:"           # a bucket stamping an intermediate group


def bucket_bytes(groups_text, stats_text):
    """(stamped, all) bytes sent through the Valiant groups of one switch, from
    ``ovs-ofctl dump-groups`` (which buckets stamp) and ``dump-group-stats``."""
    stamped = set()
    for line in groups_text.splitlines():
        m = re.search(r"group_id=(\d+)", line)
        if not m or not VALIANT_GROUPS[0] <= int(m.group(1)) < VALIANT_GROUPS[1]:
            continue
        for part in line.split("bucket=bucket_id:")[1:]:
            if STAMP in part:
                stamped.add((int(m.group(1)), int(part.split(",", 1)[0])))
    mine = every = 0
    for line in stats_text.splitlines():
        m = re.search(r"group_id=(\d+)", line)
        if not m or not VALIANT_GROUPS[0] <= int(m.group(1)) < VALIANT_GROUPS[1]:
            continue
        for b, nbytes in re.findall(r"bucket(\d+):packet_count=\d+,byte_count=(\d+)", line):
            every += int(nbytes)
            mine += int(nbytes) * ((int(m.group(1)), int(b)) in stamped)
    return mine, every


def nonminimal_share(session):
    """Share of the bytes hosts sent that went through an intermediate group (None
    where no switch has Valiant groups: minimal routing sends nothing so)."""
    mine = every = 0
    for sw in session.topo["switches"]:
        try:
            ovs = session.net.ovs(sw["name"])
            a, b = bucket_bytes(ovs.ofctl("dump-groups", sw["bridge"], timeout=10),
                                ovs.ofctl("dump-group-stats", sw["bridge"], timeout=10))
        except RunFailed:
            continue
        mine, every = mine + a, every + b
    return round(mine / every, 4) if every else None





def ugal_share(session):
    """Share of the bytes hosts sent that the routers' UGAL sent through an
    intermediate group (its decisions' counters, dataplane.adaptive.ugal)."""
    stage = getattr(session, "adaptive", None)
    return stage.summary()["nonminimal_share"] if stage is not None else None


def summary(per_host):
    done = [p["fraction"] or 0.0 for p in per_host]
    return (round(sum(done) / len(done), 4) if done else 0.0,
            round(min(done), 4) if done else 0.0)


def run_pattern(session, pattern, size, seed=1, extra=None, progress=print):
    """Run ``pattern`` on the session's fabric (one job-engine process for every host);
    return its report (results.json ``pattern``)."""
    topo, net = session.topo, session.net
    pairs = pairs_for(session.fabric, pattern, seed)
    rate_of = {h["name"]: h["ports"][0]["rate_bps"] for h in topo["hosts"]}
    link = min(rate_of.values())
    out_dir = os.path.join(session.dir, "pattern")
    os.makedirs(out_dir, exist_ok=True)
    cfg_path, res_path = (os.path.join(out_dir, f"job.{x}.json") for x in ("config", "result"))
    doc = job_document(session, pairs, size, extra)
    doc["timelines"] = True
    with open(cfg_path, "w") as f:
        json.dump(doc, f)
    limits = {ps: bounds.bounds(session.fabric, pairs, ps) for ps in bounds.PATH_SETS}
    fair = fluid.fair_shares(session.fabric, pairs)
    low = max(0.05, limits["minimal"]["bound_min"] / 2)
    timeout = 120 + 4 * size * 8 / link / low
    progress(f"{pattern}: {len(pairs)} hosts each write {size} bytes to one host at "
             f"{link / 1e6:g} Mbit/s (one job engine)")
    before = net.intf_counters()
    watch = Watch(session).start()
    t0 = time.monotonic()
    rc = run_engine(cfg_path, res_path, out_dir, timeout, f"{pattern} job")
    watch.stop()
    t1 = time.monotonic()
    after = net.intf_counters()
    # CNPs the switch ports served ahead of the data (None: no CNP band, no DCQCN)
    band = net.cnp_band_packets() if getattr(net, "cnp_band", False) else None
    routing = session.routing
    share = ugal_share(session) if Routing(routing).adaptive else \
        nonminimal_share(session) if routing != Routing.MINIMAL else 0.0
    if rc not in (0, 1) or not os.path.exists(res_path):
        raise RunFailed(f"the {pattern} job failed (exit {rc}); log: "
                        f"{out_dir}/job.log")
    with open(res_path) as f:
        result = json.load(f)
    per_host = fractions(pairs, result, link)
    mean, lowest = summary(per_host)
    seconds = max((p["time_s"] or 0 for p in per_host), default=0) or (t1 - t0)
    lossless = session.fabric.flow_control != FlowControl.NONE
    cc = (extra or {}).get("cc", CC.NONE)
    return {"pattern": pattern, "seed": seed if pattern == "permutation" else None,
            "size": size, "link_bps": link, "hosts": len(pairs),
            "regime": regime(lossless, cc),
            "goodput": steady(pairs, result, rate_of, frame_len_for_mtu(doc["mtu"]),
                              open_loop(lossless, cc)),
            "completion": {"mean": mean, "min": lowest, "per_host": per_host},
            "utilisation": utilisation(topo, before, after, seconds),
            "nonminimal_share": share, "bounds": limits, "fair_share": fair,
            "transport": dict(transport(result), cnp_band_frames=band),
            "wrong": result["job"]["wrong"],
            "failed_qps": result["job"]["failed_qps"], "aborted": result["job"]["aborted"],
            "time_s": round(seconds, 3), "engine": result["engine"],
            "fidelity": job_fidelity(watch, result, (t0, t1))}


def lines(rep, routing=None):
    """Text lines of a pattern report."""
    mode = Routing(routing or Routing.MINIMAL)
    b = rep["bounds"][path_set(mode)]
    fair = rep["fair_share"].get(mode)
    g, c, u, t = rep["goodput"], rep["completion"], rep["utilisation"], rep["transport"]
    if g["window"] is not None:
        steady_text = (f"  saturated goodput / injection ({rep['regime']}): mean "
                       f"{g['mean']:.3f}, lowest flow {g['min']:.3f}, over "
                       f"{g['window']['seconds']:.2f} s ({g['window']['frames']:.0f} frame "
                       f"times after a warm-up of {g['warmup_frames']})")
    else:
        steady_text = f"  saturated goodput ({rep['regime']}): no steady window: {g['no_window']}"
    return [f"{rep['pattern']}" + (f" (seed {rep['seed']})" if rep["seed"] is not None else "")
            + f": {rep['hosts']} hosts x {rep['size']} bytes at {rep['link_bps'] / 1e6:g} "
              f"Mbit/s, {rep['time_s']:.2f} s",
            steady_text,
            f"  LP bounds over the {b['path_set']} paths: lowest flow {b['bound_min']:.3f}, "
            f"mean {b['bound_mean']:.3f}"
            + (f"; fair share of the fixed split: mean {fair['mean']:.3f}" if fair else ""),
            f"  completion-based (bytes / each transfer's own time): mean {c['mean']:.3f}, "
            f"lowest {c['min']:.3f}",
            f"  link utilisation: local mean {u['local']['mean']} max {u['local']['max']}; "
            f"global mean {u['global']['mean']} max {u['global']['max']}; sent "
            f"non-minimally: {rep.get('nonminimal_share')}",
            f"  transport: {t['retransmitted_frames']} of {t['data_frames_sent']} data frames "
            f"retransmitted, {t['timeouts']} timeouts, {t['naks_received']} NAKs, "
            f"{t['cnps_sent']} CNPs; failed QPs {len(rep['failed_qps'])}, wrong {rep['wrong']}",
            f"  fidelity: {rep['fidelity']['verdict']}"]
