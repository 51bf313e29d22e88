"""Training jobs on the fabric: ``run --workload simai:FILE``.

Model.  A SimAI/AICB workload file (``simai``) is placed on the fabric's
hosts and turned into one op program per rank (``job``: groups, NVLink,
scaling, SimAI's order).  Every rank of the job runs in ONE traffic process
(``python -m traffic job``): it enters each host's namespace for that
host's NIC, and its one loop serves every rank's compute timers and every
collective's frames, with the RC transport, DCQCN and counters of a
collective run.  What comes back is timed here:

- an *iteration* ends when the last rank finished the last op of it (its
  ops carry ``it<k>.`` ids); its time runs from the previous iteration's
  end (the job's start for the first);
- *compute on the critical path*: the compute of the rank that finished
  the iteration last; *exposed communication*: the iteration's time minus
  that compute (what the network added behind it);
- real-equivalent times divide by the job's stretch r/s (``job``: sizes
  divided by s, compute stretched by r/s, so every ratio of the real job is
  kept and the emulated job runs r/s times slower).

``results.json`` gets ``training`` (``document``) and the run's directory
``EndToEnd.csv`` in SimAI's per-layer columns (``end_to_end``), in
real-equivalent microseconds.
"""

import csv
import json
import os
import re
import statistics
import sys
import time

from emulator.dataplane.links.impair import fault_names
from emulator.dataplane.session import REPO
from emulator.dataplane.system.proc import STDOUT, Child, TimedOut
from emulator.errors import ConfigError, RunFailed
from emulator.experiments.measure.watch import Watch
from emulator.experiments.training import job as jobs
from emulator.experiments.training import simai
from emulator.fabric.units import parse_rate

PREFIX = "simai:"
_IT = re.compile(r"^(?:it)(\d+)\.")
_ROW = re.compile(r"\.L(\d+)\.(r?fwd|ig|wg)\.")


def workload_path(text):
    """The file of ``--workload simai:FILE``, or None for another workload."""
    if not text.startswith(PREFIX):
        return None
    path = text[len(PREFIX):]
    if not path:
        raise ConfigError("--workload", "simai: needs a file: --workload simai:FILE")
    if not os.path.isfile(path):
        raise ConfigError("--workload", f"{path}: no such file")
    return path


def prepare(path, topo, args, mtu):
    """Parse ``path`` and place it on ``topo`` (nothing is built yet): the ``Job``."""
    wl = simai.parse(path)
    try:
        real = parse_rate(args.real_rate)
        nvlink = parse_rate(args.nvlink_rate) if args.nvlink_rate else None
    except ValueError as e:
        raise ConfigError("--real-rate/--nvlink-rate", str(e))
    hosts = jobs.fabric_hosts(topo)
    k = args.gpus_per_host or max(len(nics) for _, nics in hosts)
    opts = jobs.JobOptions(gpus_per_host=k, iterations=args.iterations,
                           real_rate_bps=real, nvlink_rate_bps=nvlink,
                           scale=args.size_scale, mtu=mtu)
    return jobs.build_job(wl, hosts, opts)


def job_config(session, job, extra):
    """The ``traffic.jobs.config`` document of ``job`` on ``session``'s fabric."""
    doc = jobs.job_document(job)
    by_host = {h["name"]: h for h in session.topo["hosts"]}
    endpoints = []
    for ep in doc["endpoints"]:
        h = by_host[ep["host"]]
        port = next(p for p in h["ports"] if p["port"] == ep["port"])
        endpoints.append({"netns": f"/proc/{session.net.hosts[h['name']].pid}/ns/net",
                          "intf": port["port"], "ip": port["ip"], "mac": port["mac"],
                          "name": h["name"] if len(h["ports"]) == 1
                          else f"{h['name']}:{port['port']}",
                          "rate_bps": ep["rate_bps"]})
    cfg = {"endpoints": endpoints, "ranks": doc["ranks"], "programs": doc["programs"],
           "mtu": job.options.mtu, "time_scale": job.stretch}
    cfg.update({k: v for k, v in extra.items() if v is not None})
    return cfg



def run_engine(cfg_path, res_path, out_dir, timeout, what):
    """The job engine (``python -m traffic job``) on ``cfg_path``, writing
    ``res_path``, its log in ``out_dir``/job.log; returns its exit status.
    RunFailed (the engine killed) past ``timeout`` seconds; ``what`` names it."""
    with open(os.path.join(out_dir, "job.log"), "w") as log:
        p = Child.start([sys.executable, "-m", "traffic", "job", "--config", cfg_path,
                         "--out", res_path], f"the {what}", cwd=REPO, stdout=log,
                        stderr=STDOUT)
        try:
            p.wait(timeout=timeout)
        except TimedOut:
            raise RunFailed(f"the {what} did not finish within {timeout:.0f}s "
                            f"(log: {out_dir}/job.log)")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    return p.returncode

def run_job(session, job, extra, progress=print, faulted=()):
    """Run ``job`` on ``session``'s fabric; returns the ``training`` document.
    ``faulted``: link names ('a->b') that faults take down meanwhile (a drill)."""
    out_dir = os.path.join(session.dir, "training")
    os.makedirs(out_dir, exist_ok=True)
    cfg = job_config(session, job, extra)
    cfg_path = os.path.join(out_dir, "job.config.json")
    res_path = os.path.join(out_dir, "job.result.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    est = jobs.estimate(job)
    timeout = 120 + 4 * est["total_s"]
    progress(f"training job: {len(job.placement)} ranks on {len(cfg['endpoints'])} NICs, "
             f"{len(job.workload.layers)} layers, {job.options.iterations} iteration(s); "
             f"sizes / {job.scale:g}, compute x {job.stretch:g}; estimated "
             f"{est['iteration_s']:.1f}s per iteration")
    watch = Watch(session).start()
    t0 = time.monotonic()
    rc = run_engine(cfg_path, res_path, out_dir, timeout, "training job")
    watch.stop()
    if rc not in (0, 1) or not os.path.exists(res_path):
        raise RunFailed(f"the training job failed (exit {rc}); log: "
                        f"{out_dir}/job.log")
    with open(res_path) as f:
        result = json.load(f)
    doc = document(job, result, est)
    doc["fidelity"] = job_fidelity(watch, result, (t0, time.monotonic()), faulted)
    end_to_end(job, result, os.path.join(session.dir, "EndToEnd.csv"))
    return doc


def job_fidelity(watch, result, within, faulted=()):
    """The verdict: the job engine's drops and lateness, the switches', the CPU."""
    eps = result["endpoints"]
    sent = sum(e["data_frames_sent"] for e in eps)
    lost = max(0, sent - sum(e["data_frames_received"] for e in eps))
    eng = result["engine"]
    return watch.verdict(sent, lost=lost, timing=True,
                         engine={"socket_drops": eng["socket_drops"],
                                 "cpu_share": eng["cpu_share"]},
                         faulted=set(faulted) | fault_names(watch.session.topo),
                         within=within)


def iterations_of(result, count):
    """[(start_ns, end_ns, the rank that ended it last)] per iteration (ns since the
    job's start, as the engine's op records count)."""
    ends = [[0] * len(result["ranks"]) for _ in range(count)]
    for r in result["ranks"]:
        for rec in r["ops"]:
            ids = [rec["id"]] if "id" in rec else rec.get("ids", ())
            for i in ids:
                m = _IT.match(i)
                if m and rec.get("end_ns") is not None:
                    k = int(m.group(1))
                    ends[k][r["rank"]] = max(ends[k][r["rank"]], rec["end_ns"])
    out, start = [], 0                 # op times count from the job's start
    for k in range(count):
        last = max(range(len(ends[k])), key=lambda r: ends[k][r])
        out.append((start, ends[k][last], last))
        start = ends[k][last]
    return out


def compute_between(rank, start, end):
    """Nanoseconds of ``rank``'s compute ops within [start, end)."""
    return sum(min(rec["end_ns"], end) - max(rec["start_ns"], start)
               for rec in rank["ops"] if rec["op"] == "compute" and rec["end_ns"] is not None
               and rec["end_ns"] > start and rec["start_ns"] < end)


def document(job, result, est):
    """The ``training`` object of results.json."""
    its = iterations_of(result, job.options.iterations)
    ranks = {r["rank"]: r for r in result["ranks"]}
    times = [(e - s) / 1e9 for s, e, _ in its]
    compute = [compute_between(ranks[last], s, e) / 1e9 for s, e, last in its]
    exposed = [t - c for t, c in zip(times, compute)]
    busbw = {}
    for c in result["collectives"]:
        if c.get("busbw_Mbps"):
            busbw.setdefault(c["group"], []).append(c["busbw_Mbps"])
    table = {}
    for kind in jobs.GROUP_KINDS:
        g = job.summary.get(kind) or {}
        if g.get("collectives"):
            bws = busbw.get(kind)
            table[kind] = {"collectives": g["collectives"], "real_bytes": g["bytes"],
                           "bytes": g["scaled_bytes"], "fabric": g["fabric"],
                           "local": g["local"],
                           "busbw_Mbps": round(statistics.median(bws), 3) if bws else None}
    median = statistics.median(times)
    return {"workload": job.workload.path, "policy": job.workload.policy,
            "parallel": dict(job.workload.parallel), "ranks": len(job.placement),
            "endpoints": len(result["endpoints"]), "layers": len(job.workload.layers),
            "iterations": [round(t, 4) for t in times], "iteration_s": round(median, 4),
            "compute_s": round(statistics.median(compute), 4),
            "exposed_comm_s": round(statistics.median(exposed), 4),
            "per_iteration": [{"time_s": round(t, 4), "compute_s": round(c, 4),
                               "exposed_comm_s": round(x, 4), "start_ns": w[0],
                               "end_ns": w[1]}
                              for t, c, x, w in zip(times, compute, exposed, its)],
            "t0_ns": result["job"]["t0_ns"],     # CLOCK_MONOTONIC: the op times' zero
            "transport": transport_totals(result),
            "real_iteration_s": round(median / job.stretch, 6),
            "real_compute_s": round(statistics.median(compute) / job.stretch, 6),
            "real_exposed_comm_s": round(statistics.median(exposed) / job.stretch, 6),
            "size_scale": job.scale, "compute_scale": job.stretch,
            "rate_ratio": job.rate_ratio,
            "estimate": {"iteration_s": round(est["iteration_s"], 4),
                         "compute_s": round(est["compute_s"] / job.options.iterations, 4),
                         "exposed_comm_s": round(est["exposed_s"] / job.options.iterations,
                                                 4)},
            "groups": table, "unknown_rows": len(job.workload.unknown_rows),
            "unknown": [str(u) for u in job.workload.unknown][:20],
            "latency_bound": list(job.latency_bound)[:50],
            "latency_bound_count": len(job.latency_bound),
            "wrong": result["job"]["wrong"], "aborted": result["job"]["aborted"],
            "failed_qps": result["job"]["failed_qps"], "engine": result["engine"]}


def transport_totals(result):
    """The RC transport's counters summed over the job's NICs."""
    out = {}
    for e in result["endpoints"]:
        for k, v in (e.get("transport") or {}).items():
            if isinstance(v, (int, float)):
                out[k] = out.get(k, 0) + v
    return out


def end_to_end(job, result, path):
    """EndToEnd.csv as SimAI writes it: per layer the compute, exposed and total
    communication of each phase (real-equivalent microseconds, the rank that ended
    the job last), algbw and busbw (GB/s, real-equivalent); a SUM row last."""
    last = max(result["ranks"], key=lambda r: r["end_ns"] or 0)
    coll = {c["id"]: c for c in result["collectives"]}
    rows = {i: {"fwd": [0, 0, 0, []], "wg": [0, 0, 0, []], "ig": [0, 0, 0, []]}
            for i in range(len(job.workload.layers))}
    pending_row = None
    us = 1e3 * job.stretch               # emulated ns -> real-equivalent us
    for rec in last["ops"]:
        span = (rec["end_ns"] or rec["start_ns"]) - rec["start_ns"]
        if rec["op"] == "compute":
            pending_row = span          # charged to the next collective's row and phase
            continue
        for cid in ([rec["id"]] if "id" in rec else rec.get("ids", ())):
            m = _ROW.search(cid)
            if not m or int(m.group(1)) not in rows:
                continue
            phase = "fwd" if m.group(2).endswith("fwd") else m.group(2)
            cell = rows[int(m.group(1))][phase]
            if rec["op"] == "coll" and pending_row is not None:
                cell[0] += pending_row
                pending_row = None
            if rec["op"] in ("coll", "wait"):
                cell[1] += span          # the rank waited on it: exposed
            c = coll.get(cid)
            if c and rec["op"] == "coll" and c.get("time_s"):
                cell[2] += c["time_s"] * 1e9
                if c.get("busbw_Mbps"):
                    cell[3].append(c)
    header = ["layer_name", "run", "fwd compute", "wg compute", "ig compute",
              "fwd exposed comm", "wg exposed comm", "ig exposed comm",
              "fwd total comm", "algbw", "busbw", "wg total comm", "algbw", "busbw",
              "ig total comm", "algbw", "busbw"]
    total = [0.0] * 15
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for i, layer in enumerate(job.workload.layers):
            r = rows[i]
            vals = [r["fwd"][0] / us, r["wg"][0] / us, r["ig"][0] / us,
                    r["fwd"][1] / us, r["wg"][1] / us, r["ig"][1] / us]
            for ph in ("fwd", "wg", "ig"):
                vals += [r[ph][2] / us, *_bws(r[ph][3], job)]
            total = [a + b for a, b in zip(total, vals)]
            w.writerow([layer.name, "fabric-lab", *(round(v, 3) for v in vals)])
        # the SUM row adds the times; a bandwidth column keeps its layers' mean
        bw_cols = {7, 8, 10, 11, 13, 14}
        n = max(1, len(job.workload.layers))
        w.writerow(["SUM", "fabric-lab", *(round(v / n if i in bw_cols else v, 3)
                                           for i, v in enumerate(total))])


def _bws(colls, job):
    """(algbw, busbw) in real-equivalent GB/s: the emulated figures x r (sizes / s,
    time x r/s)."""
    if not colls:
        return 0.0, 0.0
    bus = statistics.median(c["busbw_Mbps"] for c in colls) * 1e6 / 8 / 1e9 * job.rate_ratio
    alg = statistics.median(c["bytes"] / c["time_s"] for c in colls) / 1e9 * job.rate_ratio
    return alg, bus
