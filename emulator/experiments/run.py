"""``emulator run``: a Session, then the workload, the fidelity verdict and the report.

Every argument is checked before anything is created; the load the run will
offer is held against this machine's measured budget (``budget``) before the
fabric is built; the workload is the default mix (``mix``) or a collective
(``collective``); ``--strict`` turns an emulator-bound verdict into exit 3.
"""

import os

from emulator.dataplane.session import Session, check_dependencies, require_root, write_json
from emulator.dataplane.system.signals import signals_as_exceptions
from emulator.errors import ConfigError
from emulator.experiments import calibrate
from emulator.experiments.cli import FabricCLI
from emulator.experiments.measure import budget
from emulator.experiments.shared import jobsfile
from emulator.experiments.shared import launch as shared_launch
from emulator.experiments.shared import report as shared_report
from emulator.experiments.spec.fabric import add_fabric_args, parse_controller
from emulator.experiments.spec.options import (
    WORKLOADS,
    add_adaptive_args,
    add_capture_arg,
    add_control_args,
    add_fidelity_args,
    add_shared_args,
    add_switch_agent_arg,
    add_training_args,
    add_transport_args,
    nic_lb,
    parse_seed,
    parse_workload,
    rank_transport,
)
from emulator.experiments.training import launch as training
from emulator.experiments.ui import live
from emulator.experiments.workloads import background as bg
from emulator.experiments.workloads import collective, mix, patterns, workload
from emulator.fabric import addressing
from emulator.report import files as reports
from emulator.report import summary as report
from lab.modes import LB, Failover, Routing
from traffic.roce.frames import frame_len_for_mtu


def add_arguments(p):
    """``emulator run``'s options: every field of its RunSpec (``--spec FILE`` reads them)."""
    g = p.add_argument_group("fabric")
    add_fabric_args(g)
    g.add_argument("--datapath", choices=("auto", "kernel", "user"), default="auto",
                   help="OVS datapath; auto uses the kernel one when its module loads")
    g.add_argument("--queue-ms", type=float, default=30.0,
                   help="egress queue of every link, in ms at the link rate (default 30)")
    g = p.add_argument_group("control plane")
    add_control_args(g)
    g.add_argument("--controller", type=parse_controller, default="builtin",
                   help="builtin (default), remote:HOST:PORT, or app:PATH.py")
    g.add_argument("--lb", choices=LB.names(), default=LB.default(),
                   help="load balancing (default ecmp): the controller's mode, and for "
                        "collectives the NIC's entropy (per packet for spray, per flowlet "
                        "for flowlet); the mix keeps one UDP source port per QP")
    add_adaptive_args(g)
    g.add_argument("--failover", choices=Failover.names(),
                   default=Failover.default(), help="repair mode (default fast-failover)")
    add_switch_agent_arg(g)
    g.add_argument("--hash-seed", type=parse_seed, default=None, metavar="per-switch|N",
                   help="ECMP hash seed: per-switch (default) or one N for every switch "
                        "(shows hash polarization)")
    g.add_argument("--routing", choices=Routing.names(), default=Routing.default(),
                   help="a dragonfly's routing (default minimal: at most one global hop); "
                        "valiant: through a random intermediate group per flowlet "
                        "(the NICs then change entropy per flowlet; docs/fabrics.md); "
                        "ugal: the source router chooses per flowlet between minimal and "
                        "Valiant by the group's global queues (UGAL-G); ugal-l: by its "
                        "own ports' queues (UGAL-L)")
    g = p.add_argument_group("traffic")
    g.add_argument("--workload", default="mix", type=parse_workload,
                   metavar="{" + ",".join(WORKLOADS) + ",simai:FILE,jobs:FILE}",
                   help="mix: RoCEv2 flows across leaves (default); a collective: "
                        "nccl-tests-style run over all hosts (or --hosts); incast: every "
                        "host writes --sizes bytes to the first at once; simai:FILE: a "
                        "training job from a SimAI/AICB workload file (docs/training.md); "
                        "simai:A,simai:B or jobs:FILE: several jobs and background traffic "
                        "on one fabric (docs/shared-clusters.md); "
                        "adversarial, permutation: a dragonfly's patterns, every host "
                        "writes --sizes bytes to one host at link rate (docs/fabrics.md)")
    g.add_argument("--seed", type=int, default=1, metavar="N",
                   help="--workload permutation: the seed of the random permutation "
                        "(default 1)")
    g.add_argument("--duration", type=float, default=5.0,
                   help="seconds of the traffic mix")
    g.add_argument("--sizes", default="1M:4M",
                   help="collective message sizes, nccl-tests style: 1M:64M, 1M:64M:4, 1M,8M")
    g.add_argument("--qps", type=int, default=None,
                   help="queue pairs per connection (UDP source ports); default 4 for "
                        "the mix, 1 for collectives")
    g.add_argument("--ring", choices=("naive", "topology"), default="naive",
                   help="ring order: host order, or same-leaf neighbours first")
    g.add_argument("--hosts", default=None,
                   help="comma-separated hosts taking part in the collective (default all)")
    g.add_argument("--background", action="append", default=[],
                   metavar="SRC:DST[:tcp|udp[:RATE]]",
                   help="iperf3 flow running alongside the workload, repeatable "
                        "(e.g. h1:h5:udp:10Mbps); results go into results.json")
    g = p.add_argument_group("training jobs (--workload simai:FILE, simai:A,simai:B or "
                             "jobs:FILE)")
    add_training_args(g)
    add_shared_args(g)
    g = p.add_argument_group("RoCE transport and congestion control")
    add_transport_args(g)
    g = p.add_argument_group("fidelity")
    add_fidelity_args(g)
    g = p.add_argument_group("observe and interact")
    g.add_argument("--cli", action="store_true",
                   help="the Mininet CLI with fabric commands (cut, restore, flap, loss, "
                        "links, capture) instead of running traffic")
    add_capture_arg(g)
    g.add_argument("--telemetry", type=int, default=None, metavar="PORT",
                   help="serve Prometheus metrics (per-link bytes, drops, queue backlog, "
                        "flow/group counts, fidelity) on http://127.0.0.1:PORT/metrics "
                        "while the fabric runs")
    live.add_arguments(g)
    g.add_argument("--results", default="results", metavar="DIR",
                   help="results go to DIR/<time>-<run tag>/")
    g.add_argument("--spec", metavar="RUN.YAML",
                   help="run what a results directory's run.yaml specifies (the same fabric, "
                        "modes and seeds); options given beside it override its fields")



def run(spec, out=print, view=None):
    """``emulator run``: the whole default scenario of ``spec`` (a RunSpec, checked);
    ``view``: the live page of ``--ui`` (ui.live.LiveView) or None; returns the exit
    status."""
    fabric = spec.fabric
    # Every argument is checked before anything is created.
    sizes = collective.parse_sizes(spec.sizes) if spec.workload in collective.COLLECTIVES \
        else None
    if spec.workload in patterns.PATTERNS:
        patterns.pairs_for(fabric, spec.workload, spec.seed)     # a fabric of groups
        sizes = collective.parse_sizes(spec.sizes)[:1]
    patterns.check_routing(fabric, spec.routing)
    several = jobsfile.is_shared(spec.workload)
    path = None if several else training.workload_path(spec.workload)
    job = training.prepare(path, addressing.plan(fabric), spec, spec.mtu) if path else None
    if several:
        job = shared_launch.prepare(spec)
        for note in job.notes:
            out(f"... {note}")
    host_names = {h.name for h in fabric.hosts}
    background = [bg.parse_spec(b, host_names) for b in spec.background]
    if fabric.cluster is not None and (spec.cli or background or job):
        raise ConfigError("--cli" if spec.cli else "--background" if background
                          else "--workload", "runs on one machine only: not with --servers")
    require_root()
    check_dependencies()
    status = 0
    warn_load(spec, sizes, out)
    with signals_as_exceptions():
        session = Session(spec, progress=lambda m: out(f"... {m}"))
        rec = live.attached(view, session)
        try:
            with session, rec:
                if spec.cli:
                    from mininet.log import setLogLevel  # optional: only the CLI needs it
                    out(report.cli_banner(session))
                    setLogLevel("output")       # the CLI prints through Mininet's log
                    FabricCLI(session)
                    setLogLevel("error")
                else:
                    with bg.Background(session, background,
                                       _workload_seconds(session, spec, sizes)) as bgr:
                        status = _workload(session, spec, sizes, out, job)
                    if background:
                        session.results["background"] = bgr.results
        finally:
            if session.results.get("reachability"):
                out("... writing the report (versions, pictures, report.md)")
                reports.write(session)
                write_json(os.path.join(session.dir, "results.json"), session.results)
                live.write_report(session.dir, rec.recorded, out=out)
                out(report.summary(session.results, session.topo))
    problems = session.results.get("controller", {}).get("problems")
    if problems:
        out("controller reported problems:\n  " + "\n  ".join(problems[:10]))
        status = 1
    fid = (session.results.get("traffic") or session.results.get("collective")
           or session.results.get("training") or session.results.get("pattern")
           or {}).get("fidelity")
    if session.results.get("shared"):        # together, and each job alone
        fid = {"verdict": session.results["shared"]["verdict"]}
    if status == 0 and spec.strict and fid and fid["verdict"] != "faithful":
        out("--strict: the measurement is emulator-bound; exit status 3")
        status = 3
    return status


def main(spec, args, out=print):
    """The registry's entry (experiments.commands): ``run`` with ``--ui``'s page."""
    return run(spec, out, view=args.ui_view)


def warn_load(spec, sizes, out):
    """Before anything is built: does the load fit this machine's measured budget?"""
    topo = addressing.plan(spec.fabric)
    frame_len = frame_len_for_mtu(spec.mtu)
    if sizes:
        streams = budget.collective_streams(topo, frame_len)
    elif spec.workload == "mix":
        streams = [(sp["rate_bps"] * share, frame_len, budget.path_hops(topo, s, d))
                   for s, sp, d, _, share, _ in workload.mix_pairs(topo, 0.5)]
    else:
        return
    calibrate.say_load(streams, frame_len, spec.datapath, out, spec.fabric)


def _workload_seconds(session, spec, sizes):
    """How long background flows should run: about as long as the workload."""
    if not sizes:
        return max(1.0, spec.duration)
    rate = min(h["ports"][0]["rate_bps"] for h in session.topo["hosts"])
    if spec.workload in patterns.PATTERNS:
        return max(1.0, sizes[0] * 8 / rate)
    return max(1.0, collective.expected_seconds(spec.workload, len(session.topo["hosts"]),
                                                sizes, rate))


def _workload(session, spec, sizes, out, job=None):
    """The workload part of ``run``; returns the exit status."""
    if isinstance(job, shared_launch.Shared):
        doc = shared_launch.run_shared(session, job, dict(
            rank_transport(spec), **nic_lb(spec.lb), qpn_seed=spec.job_seed,
            qps=spec.qps or 1,
            timeout_exp=spec.rc_timeout or collective.default_timeout_exp(session.queue_ms)),
            progress=lambda m: out(f"... {m}"), baseline=spec.baseline)
        session.results["shared"] = doc
        for line in shared_report.lines(doc):
            out(line)
        return 1 if doc["wrong"] or doc["aborted"] or any(
            j["wrong"] or j["aborted"] or j.get("alone_wrong") for j in doc["jobs"]) else 0
    if job is not None:
        t = training.run_job(session, job, dict(
            rank_transport(spec), **nic_lb(spec.lb), qpn_seed=spec.job_seed,
            qps=spec.qps or 1,
            timeout_exp=spec.rc_timeout or collective.default_timeout_exp(session.queue_ms)),
            progress=lambda m: out(f"... {m}"))
        t["job_seed"] = spec.job_seed
        session.results["training"] = t
        return 1 if t["wrong"] or t["aborted"] else 0
    if spec.workload in patterns.PATTERNS:
        rep = patterns.run_pattern(session, spec.workload, sizes[0], spec.seed, dict(
            rank_transport(spec), entropy=patterns.entropy(spec.lb, spec.routing),
            qpn_seed=spec.job_seed, qps=spec.qps or 1,
            timeout_exp=spec.rc_timeout or collective.default_timeout_exp(session.queue_ms)),
            progress=lambda m: out(f"... {m}"))
        session.results["pattern"] = rep
        for line in patterns.lines(rep, spec.routing):
            out(line)
        return 1 if rep["wrong"] else 0
    if spec.workload == "mix" and spec.duration > 0:
        out(f"... traffic: {spec.duration:g}s across leaves")
        session.results["traffic"] = mix.default_mix(
            session, duration=spec.duration, qps=spec.qps or 4, mtu=spec.mtu)
    elif sizes:
        out(f"... job seed {spec.job_seed} (its QP numbers; --job-seed {spec.job_seed} "
            "replays them)")
        rep = collective.run_collective(
            session, spec.workload, sizes, hosts=list(spec.hosts) if spec.hosts else None,
            qps=spec.qps or 1, ring=spec.ring, progress=lambda m: out(f"... {m}"),
            rank_extra=dict(rank_transport(spec), **nic_lb(spec.lb), qpn_seed=spec.job_seed))
        rep["job_seed"] = spec.job_seed
        session.results["collective"] = rep
        if any(r["wrong"] for r in rep["rows"]):
            return 1
    return 0
