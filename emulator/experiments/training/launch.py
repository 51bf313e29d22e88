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
  kept and the emulated job runs r/s times slower), except the hops:
  ``real_iteration_s`` is a bandwidth part and a latency part (``hops``:
  the emulated hop latency measured before the job, the ring steps the
  iteration waited through, a real hop latency).

``results.json`` gets ``training`` (``document``); the run's directory
gets ``EndToEnd.csv`` in SimAI's format and ``layers.csv`` (per-iteration
medians, byte-weighted bandwidths), both from ``accounts`` (``reports``).
"""

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
from emulator.experiments.training import accounts, hops, simai
from emulator.experiments.training import job as jobs
from emulator.fabric.units import parse_duration, parse_rate
from emulator.report.training import write_end_to_end, write_layers

PREFIX = "simai:"
_IT = re.compile(r"^(?:it)(\d+)\.")
RUN_NAME = "fabric-lab"              # EndToEnd.csv's run column (SimAI's run_name)


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
    try:
        hop = parse_duration(args.real_hop_latency)
    except ValueError as e:
        raise ConfigError("--real-hop-latency", str(e))
    hosts = jobs.fabric_hosts(topo)
    k = args.gpus_per_host or max(len(nics) for _, nics in hosts)
    opts = jobs.JobOptions(gpus_per_host=k, iterations=args.iterations,
                           real_rate_bps=real, nvlink_rate_bps=nvlink,
                           scale=args.size_scale, mtu=mtu, real_hop_s=hop)
    return jobs.build_job(wl, hosts, opts)


def job_config(session, job, extra):
    """The ``traffic.jobs.config`` document of ``job`` on ``session``'s fabric."""
    doc = jobs.job_document(job)
    endpoints = endpoint_configs(session, doc["endpoints"])
    cal = hops.calibration(job.placement, job.options.mtu)
    programs = [c + p for c, p in zip(cal, doc["programs"])]
    cfg = {"endpoints": endpoints, "ranks": doc["ranks"], "programs": programs,
           "mtu": job.options.mtu, "time_scale": job.stretch}
    cfg.update({k: v for k, v in extra.items() if v is not None})
    return cfg



def endpoint_configs(session, endpoints):
    """The job engine's endpoints of ``endpoints`` ([{"host", "port", "rate_bps"}]) on
    ``session``'s fabric: each NIC's namespace, interface, addresses and name (the
    host's, or host:port on a host with several NICs)."""
    by_host = {h["name"]: h for h in session.topo["hosts"]}
    out = []
    for ep in endpoints:
        h = by_host[ep["host"]]
        port = next(p for p in h["ports"] if p["port"] == ep["port"])
        out.append({"netns": f"/proc/{session.net.hosts[h['name']].pid}/ns/net",
                    "intf": port["port"], "ip": port["ip"], "mac": port["mac"],
                    "name": endpoint_name(h, port["port"]), "rate_bps": ep["rate_bps"]})
    return out


def endpoint_name(host, port):
    """An endpoint's name in the engine's result: the host, or host:port (several NICs)."""
    return host["name"] if len(host["ports"]) == 1 else f"{host['name']}:{port}"


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
    reports(job, result, session.dir)
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
    out, start = [], hops.prologue_end(result)    # after the calibration
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
        bw = c.get("busbw_Mbps")
        if c["kind"] == "p2p" and c.get("network") and c.get("network_s"):
            bw = c["bytes"] * 8 / c["network_s"] / 1e6     # a transfer: its rate
        if bw:
            busbw.setdefault(c["group"], []).append(bw)
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
    hop, samples = hops.hop_latency(result, min(p.nic.rate_bps for p in job.placement))
    steps = [hops.ring_steps(result, ranks[last], k) for k, (_, _, last) in enumerate(its)]
    n = statistics.median(steps) if steps else 0
    bw, lat = hops.split(median, job.stretch, n, hop, job.options.real_hop_s)
    real_compute = statistics.median(compute) / job.stretch
    return {"workload": job.workload.path, "policy": job.workload.policy,
            "parallel": dict(job.workload.parallel), "ranks": len(job.placement),
            "endpoints": len(result["endpoints"]), "layers": len(job.workload.layers),
            "layout": job.summary.get("layout"),
            "iterations": [round(t, 4) for t in times], "iteration_s": round(median, 4),
            "compute_s": round(statistics.median(compute), 4),
            "exposed_comm_s": round(statistics.median(exposed), 4),
            "per_iteration": [{"time_s": round(t, 4), "compute_s": round(c, 4),
                               "exposed_comm_s": round(x, 4), "ring_steps": k,
                               "start_ns": w[0], "end_ns": w[1]}
                              for t, c, x, k, w in zip(times, compute, exposed, steps, its)],
            "t0_ns": result["job"]["t0_ns"],     # CLOCK_MONOTONIC: the op times' zero
            "transport": transport_totals(result),
            "real_iteration_s": round(bw + lat, 9),
            "real_bandwidth_s": round(bw, 9), "real_latency_s": round(lat, 9),
            "real_compute_s": round(real_compute, 9),
            "real_exposed_comm_s": round(bw + lat - real_compute, 9),
            "ring_steps": n,
            "hop": {"emulated_s": hop, "samples_s": samples,
                    "real_s": job.options.real_hop_s},
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


def reports(job, result, out_dir):
    """EndToEnd.csv and layers.csv of the job in ``out_dir`` (``accounts``): times in
    microseconds real-equivalent (emulated / r/s, hops included: ``real_iteration_s``
    separates them), bandwidths in GB/s (2^30 B/s) real-equivalent; returns the
    ``Accounts``."""
    acc = accounts.account(job, result)
    us = 1e3 * job.stretch                   # emulated ns -> real-equivalent us
    names = [layer.name for layer in job.workload.layers]
    tot = accounts.totals(acc)
    empty = accounts.Cell()
    finished = (acc.end_ns - acc.start_ns) / us
    rows = []
    for key in acc.rows(names):
        cells = [tot.get((key, ph), empty) for ph in accounts.PHASES]
        vals = [c.compute / us for c in cells] + [c.exposed / us for c in cells]
        for c in cells:
            vals += [c.total / us, *accounts.bandwidths(c, job.stretch, "total")]
        rows.append((names[key] if key != accounts.PIPELINE else key, vals, finished))
    compute = sum(c.compute for c in tot.values()) / us
    write_end_to_end(os.path.join(out_dir, "EndToEnd.csv"), RUN_NAME, rows, compute,
                     finished)
    med = accounts.medians(acc)
    zero = {f: 0 for f in accounts.FIELDS}
    layer_rows = []
    for key in [*acc.rows(names), "SUM"]:
        cells = [med.get((key, ph), zero) for ph in accounts.PHASES]
        vals = [c["compute"] / us for c in cells] + [c["exposed"] / us for c in cells]
        for ph, c in zip(accounts.PHASES, cells):
            run = (accounts.summed(x for (_, p), x in tot.items() if p == ph)
                   if key == "SUM" else tot.get((key, ph), empty))
            vals += [c["total"] / us, c["bytes"], *accounts.bandwidths(run, job.stretch)]
        layer_rows.append((names[key] if isinstance(key, int) else key, vals))
    write_layers(os.path.join(out_dir, "layers.csv"), layer_rows)
    return acc
