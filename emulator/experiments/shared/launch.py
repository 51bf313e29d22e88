"""A shared cluster on the fabric: ``run --workload jobs:FILE`` (or simai:A,simai:B).

Model.  ``prepare`` (before anything is built) reads the jobs file, parses
every job's workload file, places the jobs (``placement``), builds each
job's programs at its own scale (``training.job``), schedules the background
flows (``background``) and merges it all into one job-engine document
(``merge``); every problem is one ``ConfigError`` naming the file's line.
``run_shared`` runs that document once with every job and flow *together*
(one engine process, one fidelity verdict over all of it); with
``--baseline`` then each job *alone*: the same document with only that
job's programs, so the same placement, QP numbers and paths, on the same
fabric, run by the same command.  Per job:

- its training document (``training.launch.document``: iterations, compute,
  exposed communication, groups' busbw, the hop calibration) from its part
  of the engine's result (``merge.split``), and its EndToEnd.csv and
  layers.csv under ``shared/<job>/``;
- ``contended``: the iterations that ran (90 % of their time at least)
  while every other job was between its first iteration's start and its
  last one's end; *together* is the median of those (of all, if none was),
  *alone* the median of the baseline's, and the *slowdown* together / alone;
- its retransmitted bytes and #wrong;
- ``crowding``: how many times longer its bytes take to cross its links shared
  fairly than alone (``shares.crowding``), and
  ``fair_share_slowdown``: what fair sharing of that link predicts from the
  link counts and the job alone (``shares.fair_share_slowdown``), the figure
  the measured slowdown is held against.

The uplinks (``shares``): every inter-switch link's bytes over the together
run from its interface counters, each job's and flow's share of them from
the links' per-flow counters joined with the NICs' per-owner counts, held
(under per-flow hashing) against the flows' traced paths; the links two
jobs share are named.
"""

import json
import os
import statistics
import time

from emulator.dataplane.observe.flows import FlowCounters
from emulator.errors import ConfigError, EnvironmentProblem, RunFailed
from emulator.experiments.measure.paths import trace_path
from emulator.experiments.measure.watch import Watch
from emulator.experiments.shared import background, jobsfile, merge, placement, shares
from emulator.experiments.training import hops, simai
from emulator.experiments.training import job as jobs
from emulator.experiments.training import launch as training
from emulator.fabric import addressing
from emulator.fabric.lossless import BEST_EFFORT_DSCP, LOSSLESS_DSCP
from emulator.fabric.units import parse_duration, parse_rate
from lab.modes import LB, Entropy, FlowControl, Placement, TrafficClass, Transport
from traffic.ranks.config import qpn
from traffic.roce.frames import udp_sport

HORIZON_FACTOR = 3.0       # background schedules run to 3x the jobs' estimated end + 60 s
CONTENDED = 0.9            # an iteration 90 % inside every other job's run is contended


class Shared:
    """A shared run prepared: plan, jobs, placements, flows, the merged document."""

    def __init__(self, plan, jobs_, placed, flows, doc, notes, mtu, policy=None):
        self.plan, self.jobs, self.placed, self.policy = plan, jobs_, placed, policy
        self.flows, self.doc, self.notes, self.mtu = flows, doc, notes, mtu
        self.estimates = {n: jobs.estimate(j) for n, j in jobs_.items()}

    def horizon_s(self):
        return max(j.start_s + self.estimates[j.name]["total_s"] for j in self.plan.jobs)


def load_plan(spec):
    """The jobs file's plan of ``spec``: the file's (its errors name its lines) while it
    says what the spec's copy says, else the copy (run.yaml's, for a rerun)."""
    w = spec.workload
    if w.startswith(jobsfile.PREFIX):
        path = w[len(jobsfile.PREFIX):]
        if path and os.path.isfile(path):
            plan = jobsfile.load_file(path)
            if spec.jobs is None or plan.document == spec.jobs:
                return plan
        elif spec.jobs is None:
            raise ConfigError("--workload", f"{path or 'jobs:'}: no such jobs file")
        return jobsfile.parse(spec.jobs, "run.yaml jobs", ".")
    return jobsfile.from_workloads(w)


def prepare(spec, topo=None):
    """Everything of a shared run that can be known before the fabric is built."""
    plan = load_plan(spec)
    topo = topo or addressing.plan(spec.fabric)
    src = plan.source
    workloads = {j.name: simai.parse(j.workload) for j in plan.jobs}
    counts = {j.name: placement.ranks_of(j, workloads[j.name], j.where("ranks"), src)
              for j in plan.jobs}
    placed = placement.place_jobs(plan, topo, counts, spec.gpus_per_host,
                                  spec.job_placement)
    try:
        real = parse_rate(spec.real_rate)
        nvlink = parse_rate(spec.nvlink_rate) if spec.nvlink_rate else None
        hop = parse_duration(spec.real_hop_latency)
    except ValueError as e:
        raise ConfigError("--real-rate/--nvlink-rate/--real-hop-latency", str(e))
    hosts = jobs.fabric_hosts(topo)
    built = {}
    for j in plan.jobs:
        opts = jobs.JobOptions(gpus_per_host=max(len(p) for p in _per_host(placed[j.name])),
                               iterations=j.iterations or spec.iterations,
                               real_rate_bps=real, nvlink_rate_bps=nvlink,
                               scale=spec.size_scale, mtu=spec.mtu, real_hop_s=hop)
        try:
            built[j.name] = jobs.build_job(workloads[j.name], hosts, opts,
                                           placement=placed[j.name].ranks)
        except ConfigError as e:
            raise ConfigError(j.where(), f"job {j.name}: {e}", src) from None
    owner_dscp, notes = classes(plan, spec.fabric.flow_control)
    names = {h["name"] for h in topo["hosts"]}
    by_host = {h["name"]: h for h in topo["hosts"]}
    m = merge.Merger()
    for j in plan.jobs:
        job = built[j.name]
        m.add_job(j.name, jobs.job_document(job), job.placement,
                  hops.calibration(job.placement, spec.mtu), round(j.start_s * 1e9))
    shared = Shared(plan, built, placed, [], None, notes, spec.mtu, spec.job_placement)
    horizon = HORIZON_FACTOR * shared.horizon_s() + 60
    for f in plan.background:
        background.check_hosts(f, names, src)
        pairs = background.endpoints_pairs(f, placed)
        if not pairs:
            raise ConfigError(f.where(), f"flow {f.name} has no pair of distinct hosts", src)
        plan_ = background.schedule(f, horizon, spec.mtu)
        ends = [(_nic(by_host[a]), _nic(by_host[b]), plan_) for a, b in pairs]
        m.add_flow(f.name, f.kind, ends)
        shared.flows.append((f, pairs, plan_))
    shared.doc = dict(m.document(), owner_dscp=owner_dscp)
    return shared


def _per_host(placed):
    out = {}
    for p in placed.ranks:
        out.setdefault(p.host, []).append(p)
    return out.values()


def _nic(host):
    """(host, port, rate) of a host's first NIC: where its background flows go."""
    p = host["ports"][0]
    return (host["name"], p["port"], float(p["rate_bps"]))


def classes(plan, flow_control):
    """({owner: DSCP} of the owners that ask for best effort where the links have
    classes, notes on what the classes do): on one-queue lossy links nothing (a
    note); on a lossless fabric best effort is DSCP 0, the class below the lossless
    one (strict priority, not paused: a full queue drops, and RC resends)."""
    asked = [(x, x.traffic_class) for x in (*plan.jobs, *plan.background)]
    best = [x.name for x, c in asked if c == TrafficClass.BEST_EFFORT]
    if flow_control == FlowControl.NONE:
        if not asked:
            return {}, []
        said = f" ({', '.join(best)} asked for best effort)" if best else ""
        return {}, ["traffic class: this fabric's links have one queue (lossy, no "
                    f"classes): every job and flow shares it, whatever its class column "
                    f"says{said}; the classes have no effect here"]
    rest = [x.name for x, c in asked if c != TrafficClass.BEST_EFFORT]
    notes = [f"traffic class: {', '.join(rest) or 'none'} in the {flow_control} fabric's "
             f"lossless class (DSCP {LOSSLESS_DSCP})"]
    if best:
        notes.append(f"traffic class: {', '.join(best)} best effort (DSCP "
                     f"{BEST_EFFORT_DSCP}: below the lossless class, never paused, a full "
                     "queue drops; QPs of their own)")
    return {name: BEST_EFFORT_DSCP for name in best}, notes


def engine_config(session, doc, extra):
    """The engine's config of a merged document on ``session``'s fabric."""
    cfg = {k: v for k, v in doc.items() if k != "owners"}
    cfg["endpoints"] = training.endpoint_configs(session, doc["endpoints"])
    cfg.update({k: v for k, v in extra.items() if v is not None})
    return cfg


def run_once(session, shared, doc, extra, tag, progress, faulted=(), count=False):
    """One engine run of ``doc``: (result, fidelity, {link: bytes}, seconds, the links'
    per-flow counts or None); ``count``: with the links' flow counters on
    (``dataplane.observe.flows``; None if this machine cannot attach them)."""
    out_dir = os.path.join(session.dir, "shared")
    os.makedirs(out_dir, exist_ok=True)
    cfg = engine_config(session, doc, dict(extra, mtu=shared.mtu))
    cfg_path = os.path.join(out_dir, f"{tag}.config.json")
    res_path = os.path.join(out_dir, f"{tag}.result.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    busy = [n for n, o in doc["owners"].items() if any(doc["programs"][r] for r in o["ranks"])]
    timeout = 120 + 4 * max(j.start_s + shared.estimates[j.name]["total_s"]
                            for j in shared.plan.jobs if j.name in busy)
    progress(f"{tag}: {', '.join(busy)} in one job engine: "
             f"{sum(bool(p) for p in doc['programs'])} ranks on "
             f"{len(cfg['endpoints'])} NICs")
    counters, counts = None, None
    if count:
        try:
            counters = FlowCounters.for_session(session).start()
        except EnvironmentProblem as e:
            progress(f"no per-flow link counters ({e}); shares from traced paths only")
    try:
        before = session.net.intf_counters()
        watch = Watch(session).start()
        t0 = time.monotonic()
        rc = training.run_engine(cfg_path, res_path, out_dir, timeout, f"shared run ({tag})")
        t1 = time.monotonic()
        watch.stop()
        after = session.net.intf_counters()
        if counters is not None:
            counts = counters.read()
    finally:
        if counters is not None:
            session.teardown_errors += [f"flow counters: {e}" for e in counters.remove()]
    if rc not in (0, 1) or not os.path.exists(res_path):
        raise RunFailed(f"the shared run ({tag}) failed (exit {rc}); log: {out_dir}/job.log")
    os.replace(os.path.join(out_dir, "job.log"), os.path.join(out_dir, f"{tag}.log"))
    with open(res_path) as f:
        result = json.load(f)
    fid = training.job_fidelity(watch, result, (t0, t1), faulted)
    return result, fid, shares.measured_bytes(before, after, session.topo), t1 - t0, counts


def job_part(session, shared, name, result, report_dir=None):
    """Job ``name``'s training document from a merged run's result (``merge.split``)."""
    job = shared.jobs[name]
    part = merge.split(result, name, shared.doc["owners"][name]["ranks"])
    doc = training.document(job, part, shared.estimates[name])
    if report_dir:
        os.makedirs(report_dir, exist_ok=True)
        training.reports(job, part, report_dir)
    doc["retransmitted_bytes"] = sum(c.get("retransmitted_bytes") or 0
                                     for c in part["collectives"])
    doc["bytes_sent"] = sum(c.get("bytes_sent") or 0 for c in part["collectives"])
    return doc


def contended(docs, share=CONTENDED):
    """{job: [bool per iteration]}: whether at least ``share`` of the iteration ran while
    every other job was between its first iteration's start and its last one's end."""
    span = {n: (d["per_iteration"][0]["start_ns"], d["per_iteration"][-1]["end_ns"])
            for n, d in docs.items() if d["per_iteration"]}
    out = {}
    for n, d in docs.items():
        out[n] = []
        for it in d["per_iteration"]:
            s, e = it["start_ns"], it["end_ns"]
            out[n].append(all(min(e, span[o][1]) - max(s, span[o][0]) >= share * (e - s)
                              for o in span if o != n))
    return out


def paths_of(session, shared, result, seed):
    """{(src endpoint, dst endpoint, qp): traced path} of every flow that sent."""
    by_host = {h["name"]: h for h in session.topo["hosts"]}
    eps = shared.doc["endpoints"]
    out = {}
    for i, dst, q in sorted(shares.flow_keys(result["endpoints"])):
        a, b = eps[i], eps[dst]
        hp = next(p for p in by_host[a["host"]]["ports"] if p["port"] == a["port"])
        dp = next(p for p in by_host[b["host"]]["ports"] if p["port"] == b["port"])
        n = qpn(i, dst, q, seed)
        out[(i, dst, q)] = trace_path(session.topo, a["host"], hp, dp, udp_sport(n, n),
                                      session.net)
    return out


def per_flow_paths(spec):
    """Whether every byte of a flow takes one path (per-flow hashing): it can be traced.
    Not under UET: its senders give each packet an entropy value of their own."""
    return (not spec.adaptive and LB(spec.lb).entropy == Entropy.QP
            and spec.transport != Transport.UET)


def _ip(topo, endpoint):
    host = next(h for h in topo["hosts"] if h["name"] == endpoint["host"])
    return next(p["ip"] for p in host["ports"] if p["port"] == endpoint["port"])


def run_shared(session, shared, extra, progress=print, baseline=False, faulted=()):
    """Together, then (``baseline``) each job alone; the ``shared`` document."""
    spec = session.spec
    result, fid, measured, seconds, counts = run_once(session, shared, shared.doc, extra,
                                                      "together", progress, faulted, True)
    names = [j.name for j in shared.plan.jobs]
    docs = {n: job_part(session, shared, n, result, os.path.join(session.dir, "shared", n))
            for n in names}
    busy = contended(docs)
    end_ns = max((d["per_iteration"][-1]["end_ns"] for d in docs.values()
                  if d["per_iteration"]), default=result["job"]["end_ns"])
    flows = [background.flow_report(f, result, end_ns, shared.mtu, sched)
             for f, _, sched in shared.flows]
    kinds = {n: o["kind"] for n, o in shared.doc["owners"].items()}
    traced = shares.attribute(result["endpoints"], paths_of(
        session, shared, result, extra.get("qpn_seed")), session.topo) \
        if per_flow_paths(spec) else None
    control = None
    if counts is not None:
        ip_index = {_ip(session.topo, e): i for i, e in enumerate(shared.doc["endpoints"])}
        attributed, control = shares.counted(counts, ip_index,
                                             shares.pair_owners(result["endpoints"]))
    else:
        attributed = traced or {}
    can = counts is not None or traced is not None
    top, rows = shares.uplinks(attributed, measured, session.topo, kinds,
                               shares.link_rates(session.topo), seconds, can, control=control)
    out = {"jobs": [], "background": flows, "notes": list(shared.notes),
           "uplinks": top, "shared_links": shares.shared_links(rows) if can else None,
           "attributable": can, "shares_from": "switch counters" if counts is not None
           else "traced paths" if traced is not None else None,
           "traced_agreement": shares.agreement(traced, attributed, [r["link"] for r in top])
           if traced is not None and counts is not None else None,
           "background_beside_jobs": shares.beside_jobs(rows, kinds) if can else None,
           "fidelity": fid, "baseline": baseline,
           "share_hosts": shared.plan.share_hosts, "job_seed": extra.get("qpn_seed"),
           "engine": result["engine"], "aborted": result["job"]["aborted"],
           "wrong": result["job"]["wrong"]}
    alone = {}
    if baseline:
        for n in names:
            r, f, _, _, _ = run_once(session, shared, merge.alone(shared.doc, n), extra,
                                     f"alone-{n}", progress, faulted)
            alone[n] = (job_part(session, shared, n, r), f, r["job"]["aborted"])
    for j in shared.plan.jobs:
        out["jobs"].append(job_row(j, shared, docs[j.name], busy[j.name], alone.get(j.name),
                                   shares.crowding(rows, j.name) if can else (None, None)))
    out["verdicts"] = [fid["verdict"]] + [a[1]["verdict"] for a in alone.values()]
    out["verdict"] = next((v for v in out["verdicts"] if v != "faithful"), "faithful")
    return out


def job_row(j, shared, doc, busy, alone, crowd=(None, None)):
    """One job's line of the ``shared`` document (module docstring); ``crowd``: its
    most crowded link (``shares.crowding``)."""
    its = doc["iterations"]
    hot = [t for t, b in zip(its, busy) if b]
    together = statistics.median(hot or its)
    pl = shared.placed[j.name]
    row = {"name": j.name, "workload": j.workload, "ranks": doc["ranks"],
           "placement": str(j.placement if j.placement == Placement.EXPLICIT
                            or shared.policy is None else shared.policy),
           "hosts": list(pl.hosts),
           "leaves": sorted(set(pl.leaves)), "start_s": j.start_s,
           "class": str(j.traffic_class), "iterations": its, "contended": busy,
           "iteration_s": round(together, 4), "iteration_all_s": doc["iteration_s"],
           "retransmitted_bytes": doc["retransmitted_bytes"],
           "bytes_sent": doc["bytes_sent"],
           "loss": round(doc["retransmitted_bytes"] / doc["bytes_sent"], 6)
           if doc["bytes_sent"] else 0.0, "wrong": doc["wrong"],
           "aborted": doc["aborted"], "training": doc,
           "crowding": crowd[0], "crowded_link": crowd[1]}
    if alone is not None:
        adoc, fid, aborted = alone
        row.update({"alone_iterations": adoc["iterations"],
                    "alone_s": adoc["iteration_s"],
                    "slowdown": round(together / adoc["iteration_s"], 4)
                    if adoc["iteration_s"] else None,
                    "alone_fidelity": fid["verdict"], "alone_fidelity_detail": fid,
                    "alone_wrong": adoc["wrong"],
                    "alone_aborted": aborted,
                    "alone_retransmitted_bytes": adoc["retransmitted_bytes"],
                    "fair_share_slowdown": shares.fair_share_slowdown(
                        crowd[0], adoc["iteration_s"], adoc["compute_s"])})
    return row
