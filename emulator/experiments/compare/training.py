"""Load-balancing modes under a training job: ``compare --workload simai:FILE``.

Model.  For each mode of ``--modes`` (ecmp, flowlet, dlb, spray; the
controller's balancing and the NICs' entropy, as ``compare`` runs a
collective) and each repetition (ECMP hash seed ``--seed + rep``, QP
numbers ``--job-seed + rep``), a fresh fabric runs the same training job
(``workloads.training``) and reports its iteration time, exposed
communication and the busbw of each group kind.  ``--ring`` orders the
hosts the job is placed on, and so every group's ring: ``topology`` keeps
a leaf's hosts together (the aggregation-group aware placement: a DP ring
crosses the spines once per leaf), ``strided`` alternates leaves (every DP
hop crosses the spines), ``naive`` keeps the fabric's host order.
"""

import os
import statistics

from emulator.dataplane.observe import run_yaml
from emulator.dataplane.session import make_results_dir, write_json
from emulator.errors import ConfigError
from emulator.experiments.compare.congestion import exit_status
from emulator.experiments.repeat import Mode, each_mode
from emulator.experiments.spec.build import command_doc, parse_variant, transport_changes
from emulator.experiments.spec.options import nic_lb, rank_transport
from emulator.experiments.training import launch as training
from emulator.experiments.workloads.collective import default_timeout_exp
from emulator.fabric import addressing
from emulator.fabric.addressing import home_leaf


def ordered_topo(topo, ring):
    """``topo`` with its hosts in the order ``ring`` places ranks on them."""
    hosts = list(topo["hosts"])
    if ring == "topology":
        leaves = list(dict.fromkeys(home_leaf(h) for h in hosts))
        hosts.sort(key=lambda h: leaves.index(home_leaf(h)))
    elif ring == "strided":
        by_leaf = {}
        for h in hosts:
            by_leaf.setdefault(home_leaf(h), []).append(h)
        columns = list(by_leaf.values())
        hosts = [col[i] for i in range(max(map(len, columns))) for col in columns
                 if i < len(col)]
    elif ring != "naive":
        raise ConfigError("--ring", f"{ring!r}: naive, topology or strided")
    return dict(topo, hosts=hosts)


class JobRepetition(Mode):
    """One repetition of a mode under a training job: a fresh fabric, one job."""

    def __init__(self, s, mode, job, args, progress):
        super().__init__(s, mode)
        self.job, self.args, self.progress = job, args, progress

    def repeat(self, r):
        s, spec = self.s, self.s.spec
        extra = dict(rank_transport(spec), **nic_lb(spec.lb), qpn_seed=spec.job_seed,
                     flowlet_gap_ms=self.args.flowlet_gap_ms,
                     timeout_exp=spec.rc_timeout or default_timeout_exp(s.queue_ms))
        t = training.run_job(s, self.job, extra,
                             progress=lambda m: self.progress(f"... {self.mode}: {m}"))
        return {"mode": self.mode, "transport": str(spec.transport), "seed": spec.hash_seed,
                "dir": s.dir,
                "iteration_s": t["iteration_s"], "exposed_comm_s": t["exposed_comm_s"],
                "compute_s": t["compute_s"], "real_iteration_s": t["real_iteration_s"],
                "wrong": t["wrong"], "aborted": t["aborted"],
                "busbw_Mbps": {k: g["busbw_Mbps"] for k, g in t["groups"].items()},
                "retransmitted": t["transport"].get("retransmitted_packets", 0),
                "transport_counts": t["transport"], "fidelity": t["fidelity"]}

    def line(self, row):
        return (f"iteration {row['iteration_s']:.3f}s, exposed {row['exposed_comm_s']:.3f}s, "
                f"#wrong {row['wrong']}, {row['fidelity']['verdict']}")

    def finish(self, rows):
        return rows


def summarize(runs, modes):
    rows = []
    for mode in modes:
        mine = [r for r in runs if r["mode"] == mode]
        kinds = sorted({k for r in mine for k in r["busbw_Mbps"]})
        bw = {k: statistics.median(v for r in mine if (v := r["busbw_Mbps"].get(k)))
              if any(r["busbw_Mbps"].get(k) for r in mine) else None for k in kinds}
        rows.append({"mode": mode, "reps": len(mine),
                     "iteration_s": statistics.median(r["iteration_s"] for r in mine),
                     "iteration_min_s": min(r["iteration_s"] for r in mine),
                     "iteration_max_s": max(r["iteration_s"] for r in mine),
                     "exposed_comm_s": statistics.median(r["exposed_comm_s"] for r in mine),
                     "real_iteration_s": statistics.median(r["real_iteration_s"]
                                                           for r in mine),
                     "busbw_Mbps": bw, "wrong": sum(r["wrong"] for r in mine),
                     "faithful": sum(r["fidelity"]["verdict"] == "faithful" for r in mine)})
    return rows


def table(rows):
    lines = [f"{'mode':10s} {'iteration s':>11s} {'min..max':>15s} {'exposed s':>9s} "
             f"{'real ms':>9s} {'busbw Mb/s by group':24s} {'#wrong':>6s} faithful"]
    for r in rows:
        bw = " ".join(f"{k}:{v:.1f}" for k, v in r["busbw_Mbps"].items() if v) or "-"
        lines.append(f"{r['mode']:10s} {r['iteration_s']:11.3f} "
                     f"{r['iteration_min_s']:7.3f}..{r['iteration_max_s']:<7.3f} "
                     f"{r['exposed_comm_s']:9.3f} {r['real_iteration_s'] * 1e3:9.2f} "
                     f"{bw:24s} {r['wrong']:6d} {r['faithful']}/{r['reps']}")
    return "\n".join(lines)


def main(spec, args, modes, out=print):
    """``emulator compare --workload simai:FILE``: returns the exit status."""
    fabric = spec.fabric
    topo = ordered_topo(addressing.plan(fabric), args.ring)
    job = training.prepare(training.workload_path(spec.workload), topo, spec, spec.mtu)
    base = make_results_dir(spec.results, "compare")
    run_yaml.write(base, spec, command=command_doc("compare", args))
    spec = spec.replace(results=base)
    job0 = spec.job_seed
    out(f"... job seeds {job0}..{job0 + args.reps - 1}; ring {args.ring}")
    def vary(label):
        transport, mode = parse_variant(label)
        return {"lb": mode, **transport_changes(spec, transport)}
    docs = each_mode(spec, vary, modes, args.reps, lambda s, m: JobRepetition(s, m, job, args,
                                                                             out),
                     out, per_repeat=lambda r: {"hash_seed": spec.hash_seed + r,
                                                "job_seed": job0 + r})
    runs = [r for doc in docs for r in doc]
    rows = summarize(runs, modes)
    write_json(os.path.join(base, "compare.json"),
               {"fabric": fabric.name, "workload": spec.workload, "ring": args.ring,
                "sizes": {"size_scale": job.scale, "compute_scale": job.stretch},
                "queue_ms": spec.queue_ms, "rows": rows, "runs": runs})
    out(f"# {os.path.basename(spec.workload)} on {fabric.name}, ring {args.ring}; "
        f"results in {base}")
    out(table(rows))
    return exit_status(rows, spec, out)
