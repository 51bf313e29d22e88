"""``emulator compare``: one collective, one fabric, every load-balancing mode.

Model.  For each mode (``ecmp|flowlet|dlb|spray``, controller/lb.py) and each
repetition, a fresh Session is built with ``Session(lb=mode)`` (the
controller is told on its command line) and one hash seed for every switch
(``seed0 + repetition``: another draw of ECMP's hash), the collective runs
with the NIC entropy the mode needs (traffic.nic.entropy: ``spray`` for spray,
``flowlet`` for flowlet, the QP's port otherwise), and a sampler reads the
switch interface counters every ``SAMPLE_S`` while it runs.  Then:

* busbw and efficiency (busbw / host link rate) of the largest size;
* per-uplink utilisation (leaf -> spine, over the active window): max/mean
  and Jain's fairness index (sum x)^2 / (n sum x^2);
* packets the receivers counted reordered, and #wrong (lost chunks);
* the spread over repetitions (min..max of the load-bound efficiency).

ECMP's efficiency is set beside its balls-into-bins expectation for the same
flows and paths (``ecmp_expectation``): every QP of every cross-leaf ring hop
hashes onto one of the leaf's uplinks; a ring runs at the pace of its most
loaded link, so the efficiency is 1 / max(1, max link load / QPs).

Collision model (docs/load-balancing.md): every link is shaped (TBF on both
ends) and compare runs with deep egress queues (``--queue-ms``, default
2000 ms) as a stand-in for the lossless (PFC) fabric RoCE runs on: two flows
hashed onto one uplink share its rate, their ring steps take twice as long,
and the measured busbw falls -- nothing is lost, nothing is computed.
``load_bound_eff = efficiency / max(1, max per-uplink utilisation)`` stays
in the output as a cross-check (with shaped links it equals the measured
efficiency up to noise).

The sweeps (``--sweep-qps``, ``--sweep-rings``) run under ECMP only.
Everything goes to ``<results>/compare-<time>/``: compare.json, compare.png.

``--planes`` compares fabrics instead of modes: HPN dual-plane against the
single-plane fabric on the same hosts and workload, with one shared hash seed
and with per-switch seeds (emulator/experiments/compare/planes.py).
"""

import os
import statistics

from emulator.dataplane.observe import run_yaml
from emulator.dataplane.routed.setup import LB_UNDER_BGP
from emulator.dataplane.session import make_results_dir, write_json
from emulator.errors import ConfigError
from emulator.experiments import calibrate
from emulator.experiments.compare import lossless as lossless_cmp
from emulator.experiments.compare import stream as stream_cmp
from emulator.experiments.compare import training as training_cmp
from emulator.experiments.compare.stream import cut_times, during
from emulator.experiments.measure import budget
from emulator.experiments.measure.paths import ring_draw
from emulator.experiments.measure.uplinks import (
    RINGS,
    SAMPLE_S,
    collisions,
    ecmp_expectation,
    load_bound,
    ring_connections,
    ring_hops,
    ring_indices,
    spread,
    uplink_series,
    uplinks,
)
from emulator.experiments.measure.watch import CounterSampler
from emulator.experiments.repeat import Mode, each_mode
from emulator.experiments.spec.build import check as check_spec
from emulator.experiments.spec.build import (
    command_doc,
    parse_variant,
    transport_changes,
    variant_label,
)
from emulator.experiments.spec.fabric import add_fabric_args
from emulator.experiments.spec.options import (
    add_adaptive_args,
    add_capture_arg,
    add_cc_param_arg,
    add_control_args,
    add_ecn_at_arg,
    add_fidelity_args,
    add_job_seed_arg,
    add_training_args,
    add_uet_args,
    compare_defaults,
    nic_lb,
    parse_controls,
    rank_transport,
    workload_choice,
)
from emulator.experiments.ui.live import attached
from emulator.experiments.workloads import collective
from emulator.experiments.workloads.collective import parse_sizes
from emulator.fabric import addressing
from emulator.report.files import pyplot
from lab.modes import LB, Entropy, Failover, Transport
from traffic.roce.frames import frame_len_for_mtu

MODES = LB.names()
DEFAULT_MODES = (LB.ECMP, LB.FLOWLET, LB.DLB, LB.SPRAY)


class Repetition(Mode):
    """One repetition of a mode: a fresh fabric balancing with it, one collective, the
    uplinks' spread; with ``disturb`` ("stream", (src, dst)) or ("cut", link) during
    the collective (compare.stream)."""

    def __init__(self, s, mode, spec, ring, qps, sizes, args, progress, hosts=None,
                 disturb=None, warmup=1):
        super().__init__(s, mode)
        self.spec, self.ring, self.qps, self.sizes, self.args = spec, ring, qps, sizes, args
        self.progress, self.hosts, self.disturb, self.warmup = progress, hosts, disturb, warmup
        self.page = attached.of(args, s, f"lb={mode}").__enter__()   # report.html, --ui

    def repeat(self, r):
        s, spec, hosts, args = self.s, self.s.spec, self.hosts, self.args
        ranks = dict(s.topo, hosts=[h for h in s.topo["hosts"] if hosts is None
                                    or h["name"] in hosts])
        order = ring_indices(ranks, self.ring)
        extra = {**rank_transport(spec), **nic_lb(spec.lb),
                 "flowlet_gap_ms": args.flowlet_gap_ms, "qpn_seed": spec.job_seed}
        sampler = CounterSampler(s.net, SAMPLE_S)
        sampler.start()
        try:
            with during(s, self.disturb, spec.workload, self.sizes, hosts,
                        getattr(args, "cut_for", None)) as competing:
                rep = collective.run_collective(
                    s, spec.workload, self.sizes, qps=self.qps, ring=order, rank_extra=extra,
                    warmup=self.warmup, hosts=hosts,
                    faulted=competing.faulted() if competing else ())
        finally:
            sampler.stop()
        series = uplink_series(s.topo, sampler.samples)
        row = rep["rows"][-1]
        mode = f"{spec.control}/{self.mode}" if spec.control.routed else self.mode
        out = {"mode": mode, "transport": str(spec.transport), "lb": str(spec.lb),
               "seed": spec.hash_seed, "job_seed": spec.job_seed,
               "ring": self.ring, "qps": self.qps, "dir": s.dir,
               "busbw_Mbps": row["busbw_Mbps"], "efficiency": row["efficiency"],
               "time_s": row["time_s"], "wrong": sum(r["wrong"] for r in rep["rows"]),
               "reordered": collective.rank_totals(os.path.join(s.dir, "collective")),
               "series": series, "table": rep["table"], "fidelity": rep["fidelity"]}
        out.update({k: v for k, v in spread(series).items()}, **(
            {self.disturb[0]: competing.result()} if competing else {}))
        if out.get("cut", {}).get("happened"):
            out["cut"].update(cut_times(competing, s.dir))
        out["load_bound_eff"] = load_bound(out["efficiency"], out.get("per_uplink"))
        spines = len({p[3] for p in uplinks(s.topo)})
        out["transport_counts"] = rep.get("transport")
        out["failed_qps"] = len(rep.get("failed_qps") or ())
        if rep.get("uet"):
            out["uet"] = rep["uet"]
        if spec.lb == LB.ECMP and spec.transport != Transport.UET:
            exp = ecmp_expectation(ring_connections(ranks, order), spines, self.qps)
            out["expected"] = round(exp["efficiency"], 3)
            out["p_no_collision"] = round(exp["p_no_collision"], 3)
            # the draw the switches' hash made for this job's QPs, traced
            load, out["collided"] = collisions(
                ring_draw(s, ranks, ring_hops(ranks, order), self.qps, spec.job_seed),
                self.qps)
            out["draw"] = load
        return out

    def close(self):
        self.page.__exit__(None, None, None)

    def torn_down(self, out):
        """What the session's teardown found: handler exceptions or OpenFlow errors."""
        s = self.s
        out["controller_problems"] = s.results.get("controller", {}).get("problems", [])
        out["adaptive"] = s.results.get("adaptive")
        if s.results.get("captures"):
            out["captures"] = s.results["captures"]
            self.progress(f"... {out['mode']}: captures in {s.dir}: "
                          + ", ".join(sorted(out["captures"])))
        self.progress(f"... {out['mode']:8s} ring {self.ring} qps {self.qps} seed "
                      f"{out['seed']} job {out['job_seed']}: busbw {out['busbw_Mbps']:.2f} "
                      f"Mb/s, efficiency {out['efficiency']:.3f}, uplink max/mean "
                      f"{out.get('max_over_mean')}, reordered {out['reordered']}, "
                      f"#wrong {out['wrong']}, {out['fidelity']['verdict']}")
        return out

    def again(self, out, attempt):
        """Measured again with the same seeds (up to ``--retries`` times) while the
        machine, not the links, set its pace (lb_table.should_repeat)."""
        self.disturbed = getattr(self, "disturbed", [])
        if not should_repeat(out, attempt, self.args.retries):
            out["disturbed_attempts"] = self.disturbed
            return False
        self.disturbed.append(disturbed_attempt(out))
        self.progress(f"... {out['mode']} seed {out['seed']} job {out['job_seed']}: "
                      f"{out['fidelity']['verdict']} "
                      f"({'; '.join(out['fidelity'].get('reasons', []))[:160]}): the "
                      "machine's pace, not the fabric's; repeating with the same seeds")
        return True

    def finish(self, verdicts):
        return verdicts


def seeds(spec, r):
    """Repetition ``r``'s seeds: another draw of ECMP's hash and of the job's QPs."""
    return {"hash_seed": None if spec.hash_seed is None else spec.hash_seed + r,
            "job_seed": None if spec.job_seed is None else spec.job_seed + r}


def repetitions(spec, plan, sizes, args, out, **kw):
    """Every (mode, ring, qps[, disturbance]) of ``plan``, ``args.reps`` repetitions
    each (hash seed ``spec.hash_seed + r``, job seed ``spec.job_seed + r``): their
    measurements."""
    def make(s, key):
        mode, ring, qps, *disturb = key
        extra = dict(kw, disturb=disturb[0]) if disturb else kw
        return Repetition(s, mode, spec, ring, qps, sizes, args, out, **extra)
    def vary(key):
        transport, mode = parse_variant(key[0])
        return {"lb": mode, **transport_changes(spec, transport)}
    docs = each_mode(spec, vary, plan, args.reps, make, out,
                     per_repeat=lambda r: seeds(spec, r),
                     label=lambda key: key[0])
    return [r for doc in docs for r in doc]


# ---- the table: one row per (mode, ring, qps) over its repetitions --------------
#
# Efficiency is given as the mean and the median over the repetitions, with their
# range.  A repetition whose fidelity verdict was not *faithful* (the machine, not
# the links, set the collective's pace) is run again with the same hash seed and
# job seed, so the same ECMP draw (``--retries``, default once); the disturbed
# attempts stay in compare.json (``disturbed_attempts``) and the table counts the
# repetitions that were repeated.  A repetition with ``#wrong`` chunks is never
# repeated: that is an error of the fabric or the transport, not noise.

def plot(runs, path):
    """Per-uplink utilisation over time, one panel per mode (first repetition)."""
    plt = pyplot()
    firsts = {}
    for r in runs:
        firsts.setdefault((r["mode"], str(r["ring"]), r["qps"]), r)
    fig, axes = plt.subplots(len(firsts), 1, figsize=(9, 2.3 * len(firsts)), squeeze=False,
                             sharex=True)
    for ax, ((mode, ring, qps), r) in zip(axes[:, 0], firsts.items()):
        for name, s in sorted(r["series"].items()):
            ax.plot([i * SAMPLE_S for i in range(len(s))], s, lw=0.8, label=name)
        ax.set_title(f"{mode}, ring {ring}, {qps} QP(s): efficiency {r['efficiency']:.2f}",
                     fontsize=9)
        ax.set_ylabel("uplink util")
        ax.set_ylim(0, 1.3)
    axes[-1, 0].set_xlabel("s (samples every 100 ms)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def add_arguments(p):
    """``emulator compare``'s options, its sub-commands' included."""
    add_fabric_args(p)
    add_control_args(p, several=True)
    p.add_argument("--planes", action="store_true",
                   help="instead of modes: HPN dual-plane vs the single-plane fabric (preset "
                        "dual-plane, planes=2 vs planes=1), same hosts and workload, one shared "
                        "hash seed and per-switch seeds: busbw, per-link byte spread, egress "
                        "queue backlog per tier (emulator/experiments/compare/planes.py)")
    lossless_cmp.add_arguments(p)
    p.add_argument("--cc", default=None, metavar="none,dcqcn,dcqcn+nscc",
                   help="instead of modes: congestion control at the senders on an incast "
                        "(or alltoall), ECN marking from --ecn: bottleneck queue, "
                        "utilisation, Jain fairness, CNPs, marks; nscc and rccc ride UET; "
                        "A+B: the senders take A and B in turn (RoCE and UET NICs sharing "
                        "the fabric), each kind's share (experiments/compare/congestion.py)")
    p.add_argument("--ecn", default=None, metavar="K|KMIN:KMAX:PMAX",
                   help="--cc: ECN marking at every switch port (default 100KB:400KB:1, scaled down to fit shallow --queue-ms: Kmax at most half a queue)")
    add_ecn_at_arg(p)
    add_cc_param_arg(p)
    p.add_argument("--hosts", default=None,
                   help="--cc: comma-separated hosts (incast: the first is the root)")
    p.add_argument("--modes", default=",".join(DEFAULT_MODES),
                   help="comma list of " + "|".join(MODES) + " (default "
                        + ",".join(DEFAULT_MODES) + ")")
    p.add_argument("--transport", dest="transports", default=None, metavar="rc,uet",
                   help="transports side by side: every mode of --modes over each (uet "
                        "sprays by itself: with it the NICs' spray and flowlet modes are "
                        "left out); --cc dcqcn+nscc shares one fabric between them "
                        "(docs/uet.md)")
    add_uet_args(p)
    add_adaptive_args(p)
    p.add_argument("--stream", default=None, metavar="SRC:DST",
                   help="each mode with and without a competing best-effort stream from "
                        "SRC to DST at an uplink's full rate, from a quarter into the "
                        "collective for half of it (SRC, DST are not ranks)")
    p.add_argument("--cut", default=None, metavar="LINK",
                   help="each mode with and without LINK cut from a quarter into the "
                        "collective for half of it (1 ms modelled detection)")
    p.add_argument("--cut-for", type=float, default=None, metavar="S",
                   help="--cut: how long the link stays down (default half the "
                        "collective's ideal time), then it is restored")
    p.add_argument("--workload", default=None, type=workload_choice,
                   metavar="{allreduce,allgather,reducescatter,alltoall,incast,simai:FILE}",
                   help="collective (default allreduce; alltoall with --planes; incast "
                        "with --cc), or a training job: simai:FILE (each mode's iteration "
                        "time; experiments/compare/training_cmp.py)")
    add_training_args(p)
    p.add_argument("--sizes", default=None, help="collective sizes (the largest is reported; "
                                                "default 2M)")
    p.add_argument("--reps", type=int, default=3, help="repetitions per mode (seeds)")
    p.add_argument("--seed", "--hash-seed", dest="hash_seed", type=int, default=None,
                   help="ECMP hash seed of the first repetition, one for every switch "
                        "(default 1; 101 with --planes, above the hosts' bond seeds)")
    add_job_seed_arg(p)
    p.add_argument("--failover", choices=Failover.names(),
                   default=Failover.default(), help="repair mode (default fast-failover)")
    p.add_argument("--ring", default="strided", choices=RINGS,
                   help="ring order of the mode comparison (default strided: every hop "
                        "crosses the spines)")
    p.add_argument("--qps", type=int, default=None,
                   help="QPs per connection (default 1, 8 with --planes)")
    p.add_argument("--seedings", default="shared,per-switch",
                   help="--planes: hash seedings to run, comma list of shared|per-switch")
    p.add_argument("--sample-ms", type=float, default=20.0,
                   help="--planes, --cc: interval of the egress-queue sampler (ms)")
    p.add_argument("--retries", type=int, default=1,
                   help="run a repetition again with the same seeds, up to this many "
                        "times, when the machine set its pace (not faithful) or, with "
                        "--planes, it lost packets outside the switch queues")
    p.add_argument("--sweep-qps", default="", help="ECMP QP sweep, e.g. 1,2,4,8")
    p.add_argument("--sweep-rings", default="", help="ECMP ring sweep, e.g. topology,strided")
    p.add_argument("--flowlet-gap-ms", type=float, default=25.0,
                   help="NIC idle gap that starts a new flowlet (ms)")
    p.add_argument("--queue-ms", type=float, default=None,
                   help="egress queue per link, ms at link rate (default 2000: a deep, "
                        "lossless stand-in for PFC, so collisions slow flows, not drop them; "
                        "30 with --lossless, where the lossy fabric drops)")
    p.add_argument("--results", default="results", metavar="DIR")
    add_fidelity_args(p)
    add_capture_arg(p)


def prepare(args):
    """What a comparison of modes implies before its spec is built (spec.options): an
    AllReduce unless a workload is named."""
    args.hash_seed_given = args.hash_seed is not None
    compare_defaults(args, workload="allreduce")


def main(spec, args, out=print):
    """``emulator compare``: the load-balancing modes side by side; the exit status."""
    fabric = spec.fabric
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ConfigError("--modes", f"unknown mode {bad[0]!r}" if bad else "no mode given")
    if args.reps < 1:
        raise ConfigError("--reps", "at least 1")
    modes = variants(parse_transports(args.transports, spec), modes)
    if spec.workload.startswith("simai:"):
        return training_cmp.main(spec, args, modes, out)
    if spec.workload == "alltoall":
        raise ConfigError("--workload", "alltoall only with --planes (the modes' ECMP "
                                        "expectation models a ring)")
    qps = args.qps or 1
    if args.retries < 0:
        raise ConfigError("--retries", "0 or more")
    sizes = parse_sizes(args.sizes or "2M")
    if args.stream or args.cut:
        return stream_cmp.main(spec, args, modes, sizes, repetitions, out)
    plan = [(m, args.ring, qps) for m in modes]
    plan += [("ecmp", args.ring, int(q)) for q in args.sweep_qps.split(",") if q.strip()
             and ("ecmp", args.ring, int(q)) not in plan]
    plan += [("ecmp", r.strip(), qps) for r in args.sweep_rings.split(",") if r.strip()
             and ("ecmp", r.strip(), qps) not in plan]
    frame_len = frame_len_for_mtu(spec.mtu)
    calibrate.say_load(budget.collective_streams(addressing.plan(fabric), frame_len), frame_len,
                       "auto", out, fabric)
    base = make_results_dir(spec.results, "compare")
    run_yaml.write(base, spec, command=command_doc("compare", args))
    spec = spec.replace(results=base)       # every session's directory goes inside
    job0 = spec.job_seed
    out(f"... job seeds {job0}..{job0 + args.reps - 1} (QP numbers of each repetition's job; "
        f"--job-seed {job0} replays them)")
    runs = []
    for control, spec_c, plan_c in control_plans(spec, plan, args, out):
        runs += repetitions(spec_c, plan_c, sizes, args, out)
    rows = summarize(runs)
    text = table(rows)
    write_json(os.path.join(base, "compare.json"),
               {"fabric": fabric.name, "workload": spec.workload, "sizes": sizes,
                "queue_ms": spec.queue_ms, "flowlet_gap_ms": args.flowlet_gap_ms,
                "rows": rows, "runs": runs})
    plot(runs, os.path.join(base, "compare.png"))
    out(f"# {spec.workload} {args.sizes or '2M'} on {fabric.name}; results in {base}")
    out(text)
    if any(r["wrong"] for r in rows):
        return 1
    if spec.strict and any(r["emulator_bound"] for r in rows):
        out("--strict: some runs were emulator-bound; exit status 3")
        return 3
    return 0


def control_plans(spec, plan, args, out):
    """[(control plane, its spec, its plan)] of ``--control`` (one or a comma list).
    Under BGP the routers' kernels hash (ecmp; the NICs may still spray): the other
    modes are left out, said so; each router hashes with its own seed (the plan's
    per-switch seeds) unless ``--hash-seed`` named one, and the repetitions' draws
    differ by their jobs' QP numbers."""
    out_plans = []
    for c in [c or spec.control for c in parse_controls(args.control)]:
        spec_c, plan_c = spec.replace(control=c), plan
        if c.routed:
            plan_c = [k for k in plan if parse_variant(k[0])[1] in LB_UNDER_BGP]
            left = sorted({k[0] for k in plan} - {k[0] for k in plan_c})
            if left:
                out(f"... {c}: {', '.join(left)} left out (the routers' kernels hash the "
                    "five-tuple: ecmp, or spray from the NICs)")
            if not getattr(args, "hash_seed_given", True):
                spec_c = spec_c.replace(hash_seed=None)
            check_spec(spec_c)
        if plan_c:
            out_plans.append((c, spec_c, plan_c))
    if not out_plans:
        raise ConfigError("--modes", "nothing to compare under these control planes")
    return out_plans


def parse_transports(text, spec):
    """``--transport rc,uet``: the transports compared (default: the spec's)."""
    if not text:
        return [spec.transport]
    out = []
    for t in (x.strip() for x in text.split(",") if x.strip()):
        if t not in Transport.names() or Transport(t) == Transport.NONE:
            raise ConfigError("--transport", f"{t!r}: a comma list of rc, uet")
        out.append(Transport(t))
    return list(dict.fromkeys(out)) or [spec.transport]


def variants(transports, modes):
    """Every mode over every transport (``uet/ecmp``; RC's alone as before), less what
    the NICs of UET decide by themselves (their spraying, their flowlets)."""
    return [variant_label(t, m) for t in transports for m in modes
            if t != Transport.UET or LB(m).entropy == Entropy.QP]


def summarize(runs):
    """One table row per (mode, ring, qps) from the repetitions' run dicts."""
    groups = {}
    for r in runs:
        groups.setdefault((r["mode"], str(r["ring"]), r["qps"]), []).append(r)
    rows = []
    for (mode, ring, qps), rs in groups.items():
        eff = [r["efficiency"] for r in rs]

        def mean(key):
            vals = [r[key] for r in rs if r.get(key) is not None]
            return sum(vals) / len(vals) if vals else None
        rows.append({"mode": mode, "ring": ring, "qps": qps, "reps": len(rs),
                     "busbw_Mbps": mean("busbw_Mbps"), "efficiency": mean("efficiency"),
                     "eff_median": statistics.median(eff),
                     "load_bound_eff": mean("load_bound_eff"),
                     "lb_min": min(r["load_bound_eff"] for r in rs),
                     "lb_max": max(r["load_bound_eff"] for r in rs),
                     "eff_min": min(eff), "eff_max": max(eff),
                     "expected": rs[0].get("expected"),
                     "max_over_mean": mean("max_over_mean"), "jain": mean("jain"),
                     "reordered": sum(r["reordered"] for r in rs),
                     "wrong": sum(r["wrong"] for r in rs),
                     "repeated": sum(1 for r in rs if r.get("disturbed_attempts")),
                     "no_collision": sum(1 for r in rs if r.get("collided") is False),
                     "p_no_collision": rs[0].get("p_no_collision"),
                     "transport": rs[0].get("transport", "rc"),
                     "transport_counts": _sum_counts(r.get("transport_counts") for r in rs),
                     "emulator_bound": sum(1 for r in rs if r.get("fidelity", {})
                                           .get("verdict", "faithful") != "faithful")})
    return rows


def _sum_counts(docs):
    out = {}
    for d in docs:
        for k, v in (d or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
    return out


def transport_lines(rows):
    """Under the table, per UET row: its retransmissions by cause, its packets placed
    out of order, the EVs its senders retired (summed over the repetitions)."""
    lines = []
    for r in rows:
        c = r.get("transport_counts") or {}
        if r.get("transport") == Transport.UET and c:
            lines.append(f"{r['mode']}: {c.get('retransmitted_packets', 0)} retransmitted "
                         f"({c.get('retransmitted_by_nack', 0)} by NACK, "
                         f"{c.get('retransmitted_by_trim', 0)} by trim, "
                         f"{c.get('retransmitted_by_timeout', 0)} by timeout), "
                         f"{c.get('placed_out_of_order', 0)} placed out of order, "
                         f"{c.get('evs_retired', 0)} EVs retired, over {r['reps']} repetitions")
    return lines


def fidelity_cell(row):
    out = (f"EMULATOR-BOUND in {row['emulator_bound']}/{row['reps']}"
           if row.get("emulator_bound") else "faithful")
    if row.get("repeated"):
        out += f" ({row['repeated']} repeated)"
    return out


def table(rows):
    """The comparison as text."""
    head = (f"{'mode':8s} {'ring':9s} {'qps':>3s} {'busbw Mb/s':>10s} {'effic':>6s} "
            f"{'median':>6s} {'load-bound':>10s} {'min..max':>11s} {'ECMP exp':>8s} "
            f"{'up max/mean':>11s} {'Jain':>6s} {'reordered':>9s} {'#wrong':>6s} "
            f"{'reps':>4s} fidelity")
    lines = [head]

    def f(x, fmt):
        return format(x, fmt) if x is not None else "-"
    for r in rows:
        exp = f(r["expected"], ".3f") if r["expected"] is not None else "-"
        lines.append(
            f"{r['mode']:8s} {r['ring']:9s} {r['qps']:3d} {f(r['busbw_Mbps'], '10.2f')} "
            f"{f(r['efficiency'], '6.3f')} {f(r.get('eff_median'), '6.3f')} "
            f"{f(r['load_bound_eff'], '10.3f')} "
            f"{r['lb_min']:5.3f}..{r['lb_max']:5.3f} "
            f"{exp:>8s} {f(r['max_over_mean'], '11.3f')} {f(r['jain'], '6.3f')} "
            f"{r['reordered']:9d} {r['wrong']:6d} {r['reps']:4d} " + fidelity_cell(r))
    for r in rows:
        if r.get("p_no_collision") is not None:
            lines.append(draws_line(r))
    lines += transport_lines(rows)
    if any(r.get("emulator_bound") for r in rows):
        lines.append("EMULATOR-BOUND rows measured this machine's CPU, not load balancing: "
                     "see each run's fidelity in compare.json")
    if any(r.get("repeated") for r in rows):
        lines.append("repeated: a repetition the machine set the pace of was run again with "
                     "the same seeds (its attempts: disturbed_attempts in compare.json)")
    return "\n".join(lines)


def draws_line(row):
    """ECMP's draws against balls into bins: repetitions whose traced paths put no two
    connections on one link, and the expectation with its binomial spread."""
    n, p = row["reps"], row["p_no_collision"]
    sd = (n * p * (1 - p)) ** 0.5
    return (f"{row['mode']}: {row['no_collision']} of {n} draws put no two connections on "
            f"one link (balls into bins: {n * p:.1f} +- {sd:.1f})")


def disturbed_attempt(run):
    """What compare.json keeps of an attempt that was run again."""
    fid = run.get("fidelity", {})
    return {"efficiency": run["efficiency"], "busbw_Mbps": run["busbw_Mbps"],
            "dir": run.get("dir"), "verdict": fid.get("verdict"),
            "reasons": fid.get("reasons", [])}


def should_repeat(run, attempt, retries):
    """A repetition is run again when the machine set its pace (not faithful), it
    lost no chunk, and ``retries`` allows another attempt."""
    return (attempt < retries and run["wrong"] == 0
            and run.get("fidelity", {}).get("verdict", "faithful") != "faithful")
