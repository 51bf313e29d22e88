"""``emulator run``: a Session, then the workload, the fidelity verdict and the report.

Every argument is checked before anything is created; the load the run will
offer is held against this machine's measured budget (``budget``) before the
fabric is built; the workload is the default mix (``mix``) or a collective
(``collective``); ``--strict`` turns an emulator-bound verdict into exit 3.
"""

import os

from emulator.dataplane.session import (Session, check_dependencies, require_root,
                                        write_json)
from emulator.dataplane.system.signals import signals_as_exceptions
from emulator.fabric import addressing


def run(fabric, args, out=print):
    """``emulator run``: the whole default scenario; returns the exit status."""
    from emulator.experiments.workloads import background as bg
    from emulator.experiments.workloads import collective
    from emulator.report import summary as report
    # Every argument is checked before anything is created.
    from emulator.experiments.workloads import patterns
    sizes = collective.parse_sizes(args.sizes) if args.workload in collective.COLLECTIVES \
        else None
    if args.workload in patterns.PATTERNS:
        patterns.pairs_for(fabric, args.workload, args.seed)     # a fabric of groups
        sizes = collective.parse_sizes(args.sizes)[:1]
    patterns.check_routing(fabric, getattr(args, "routing", "minimal"))
    from emulator.experiments.workloads import training
    path = training.workload_path(args.workload)
    job = training.prepare(path, addressing.plan(fabric), args, args.mtu) if path else None
    host_names = {h.name for h in fabric.hosts}
    background = [bg.parse_spec(b, host_names) for b in args.background]
    if fabric.cluster is not None and (args.cli or background or job):
        from emulator.errors import ConfigError
        raise ConfigError("--cli" if args.cli else "--background" if background
                          else "--workload", "runs on one machine only: not with --servers")
    from emulator.experiments.options import check_capture, check_telemetry
    check_capture(args, fabric)
    check_telemetry(args)
    from emulator.experiments.options import check_transport, training_cc
    if job is not None or args.workload in patterns.PATTERNS:
        training_cc(args, out)
    ecn = check_transport(args, fabric)
    from emulator.experiments.options import switch_agent_from
    agent = switch_agent_from(args, fabric)
    require_root()
    check_dependencies()
    from emulator.experiments.ui import live
    status = 0
    warn_load(fabric, args, sizes, out)
    with signals_as_exceptions():
        session = Session(fabric, results_base=args.results, controller=args.controller,
                          datapath_request=args.datapath, seed=args.hash_seed,
                          queue_ms=args.queue_ms, progress=lambda m: out(f"... {m}"),
                          mtu=args.mtu, lb=args.lb, failover=args.failover,
                          flowlet_frames=args.flowlet_frames,
                          capture=args.capture, telemetry=args.telemetry, ecn=ecn,
                          switch_agent=agent, routing=getattr(args, "routing", "minimal"))
        rec = live.attached(getattr(args, "ui_view", None), session)
        try:
            with session, rec:
                if args.cli:
                    from mininet.log import setLogLevel
                    from emulator.experiments.cli import FabricCLI
                    out(report.cli_banner(session))
                    setLogLevel("output")       # the CLI prints through Mininet's log
                    FabricCLI(session)
                    setLogLevel("error")
                else:
                    with bg.Background(session, background,
                                       _workload_seconds(session, args, sizes)) as bgr:
                        status = _workload(session, args, sizes, out, job)
                    if background:
                        session.results["background"] = bgr.results
        finally:
            if session.results.get("reachability"):
                from emulator.report import files as reports
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
           or session.results.get("training") or session.results.get("pattern") or {}) \
        .get("fidelity")
    if status == 0 and args.strict and fid and fid["verdict"] != "faithful":
        out("--strict: the measurement is emulator-bound; exit status 3")
        status = 3
    return status


def warn_load(fabric, args, sizes, out):
    """Before anything is built: does the load fit this machine's measured budget?"""
    from emulator.experiments import budget
    from emulator.experiments.workloads import workload
    from traffic.roce.frames import frame_len_for_mtu
    topo = addressing.plan(fabric)
    frame_len = frame_len_for_mtu(args.mtu)
    if sizes:
        streams = budget.collective_streams(topo, frame_len)
    elif args.workload == "mix":
        streams = [(sp["rate_bps"] * share, frame_len, budget.path_hops(topo, s, d))
                   for s, sp, d, _, share, _ in workload.mix_pairs(topo, 0.5)]
    else:
        return
    from emulator.experiments import calibrate
    calibrate.say_load(streams, frame_len, args.datapath, out, fabric)


def _workload_seconds(session, args, sizes):
    """How long background flows should run: about as long as the workload."""
    from emulator.experiments.workloads import collective
    if not sizes:
        return max(1.0, args.duration)
    rate = min(h["ports"][0]["rate_bps"] for h in session.topo["hosts"])
    from emulator.experiments.workloads import patterns
    if args.workload in patterns.PATTERNS:
        return max(1.0, sizes[0] * 8 / rate)
    return max(1.0, collective.expected_seconds(args.workload, len(session.topo["hosts"]),
                                                sizes, rate))


def _workload(session, args, sizes, out, job=None):
    """The workload part of ``run``; returns the exit status."""
    from emulator.experiments.workloads import collective
    from emulator.experiments.workloads import mix
    if job is not None:
        from emulator.experiments.options import job_seed, nic_lb, rank_transport
        from emulator.experiments.workloads import training
        seed = job_seed(getattr(args, "job_seed", None))
        t = training.run_job(session, job, dict(
            rank_transport(args), **nic_lb(args.lb), qpn_seed=seed, qps=args.qps or 1,
            timeout_exp=args.rc_timeout or collective.default_timeout_exp(session.queue_ms)),
            progress=lambda m: out(f"... {m}"))
        t["job_seed"] = seed
        session.results["training"] = t
        return 1 if t["wrong"] or t["aborted"] else 0
    from emulator.experiments.workloads import patterns
    if args.workload in patterns.PATTERNS:
        from emulator.experiments.compare.compare import ENTROPY
        from emulator.experiments.options import job_seed, rank_transport
        rep = patterns.run_pattern(session, args.workload, sizes[0], args.seed, dict(
            rank_transport(args), entropy=patterns.entropy(args.lb, args.routing, ENTROPY),
            qpn_seed=job_seed(getattr(args, "job_seed", None)), qps=args.qps or 1,
            timeout_exp=args.rc_timeout or collective.default_timeout_exp(session.queue_ms)),
            progress=lambda m: out(f"... {m}"))
        session.results["pattern"] = rep
        for line in patterns.lines(rep, getattr(args, "routing", None)):
            out(line)
        return 1 if rep["wrong"] else 0
    if args.workload == "mix" and args.duration > 0:
        out(f"... traffic: {args.duration:g}s across leaves")
        session.results["traffic"] = mix.default_mix(
            session, duration=args.duration, qps=args.qps or 4, mtu=args.mtu)
    elif sizes:
        hosts = args.hosts.split(",") if args.hosts else None
        from emulator.experiments.options import job_seed, nic_lb, rank_transport
        seed = job_seed(getattr(args, "job_seed", None))
        out(f"... job seed {seed} (its QP numbers; --job-seed {seed} replays them)")
        rep = collective.run_collective(
            session, args.workload, sizes, hosts=hosts, qps=args.qps or 1,
            ring=args.ring, progress=lambda m: out(f"... {m}"),
            rank_extra=dict(rank_transport(args), **nic_lb(args.lb), qpn_seed=seed))
        rep["job_seed"] = seed
        session.results["collective"] = rep
        if any(r["wrong"] for r in rep["rows"]):
            return 1
    return 0
