"""Command line: ``python -m emulator {run,check,drill,probe,compare,show,validate,clean,
presets,ui}``.

Every user error (bad fabric file, unknown preset parameter, not root, a
missing dependency) prints one ``error:`` line and exits with status 2,
before anything is created.
"""

import argparse
import json
import sys

from emulator.fabric import addressing
from emulator.fabric import presets
from emulator.fabric import spec
from emulator.errors import FabricError, RunFailed
from emulator.experiments.options import (FAILOVER_MODES, LB_MODES, add_adaptive_args,
                                          add_capture_arg,
                                          add_training_args,
                                          add_fidelity_args, add_transport_args,
                                          parse_seed)
from traffic.roce.frames import ROCE_MTUS


def add_fabric_args(p):
    src = p.add_mutually_exclusive_group()
    src.add_argument("-f", "--fabric", metavar="FILE", help="fabric YAML file")
    src.add_argument("-p", "--preset", metavar="NAME",
                     help=f"built-in fabric ({', '.join(presets.PRESETS)}); default leaf-spine")
    p.add_argument("-P", "--param", action="append", default=[], metavar="KEY=VALUE",
                   help="preset parameter, repeatable (e.g. -P spines=2 -P host_rate=20Mbps)")
    p.add_argument("--layout", metavar="LAYOUT",
                   help="datapath instances: shared, per-switch, N, pod, plane, rail or auto "
                        "(default: the fabric file's layout, else $FABRIC_LAB_LAYOUT, else auto; "
                        "docs/datapath-instances.md)")
    p.add_argument("--servers", metavar="USER@ADDRESS,...",
                   help="run the fabric on these servers over ssh (Mininet's cluster "
                        "edition; docs/cluster.md); overrides the fabric file's servers:")
    p.add_argument("--placement", choices=("auto", "pod", "plane", "rail"), default=None,
                   help="with --servers: keep leaf groups (auto, the default), pods, planes "
                        "or rails whole on one server")
    p.add_argument("--ssh-config", metavar="FILE",
                   help="with --servers: an ssh_config file for every connection (keys, "
                        "known hosts, jump hosts)")


def with_servers(fabric, args):
    """The fabric with ``--servers``/``--placement``/``--ssh-config`` applied."""
    import dataclasses
    from emulator.fabric import cluster
    cl = fabric.cluster
    servers = getattr(args, "servers", None)
    placement = getattr(args, "placement", None)
    ssh_config = getattr(args, "ssh_config", None)
    if servers is None and cl is None:
        if placement or ssh_config:
            raise FabricError("--placement and --ssh-config need --servers (or a fabric "
                              "file's servers:)")
        return fabric
    cl = cluster.parse_cluster(servers if servers is not None else cl.servers,
                               placement or (cl.placement if cl else "auto"),
                               ssh_config or (cl.ssh_config if cl else None), "--servers")
    if cl.ssh_config:
        import os
        if not os.path.isfile(cl.ssh_config):
            raise FabricError(f"--ssh-config {cl.ssh_config}: no such file")
    if fabric.layout not in (None, "auto"):
        raise FabricError("--layout and --servers: each server runs its switches in one "
                          "datapath instance of its own; drop --layout")
    return dataclasses.replace(fabric, cluster=cl)


def load_fabric(args):
    if args.fabric:
        if args.param:
            raise FabricError("--param applies to presets, not to a fabric file")
        fabric = spec.load_file(args.fabric)
    else:
        fabric = presets.build(args.preset or "leaf-spine",
                               presets.parse_assignments(args.param))
    if getattr(args, "layout", None) is not None:
        import dataclasses
        from emulator.fabric import layout
        fabric = dataclasses.replace(fabric, layout=layout.parse(args.layout))
    if fabric.layout not in (None, "auto", "shared"):
        from emulator.fabric import layout
        layout.place(addressing.plan(fabric), fabric.layout)   # a layout it cannot have
    fabric = with_servers(fabric, args)
    if fabric.cluster is not None:
        from emulator.fabric import cluster
        cluster.place(addressing.plan(fabric), fabric.cluster.servers,
                      fabric.cluster.placement)                # a placement it cannot have
    return fabric


def parse_controller(text):
    if text == "builtin" or text.startswith("app:"):
        return text
    if text.startswith("remote:"):
        host, _, port = text[len("remote:"):].rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"{text!r} is not remote:HOST:PORT")
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r}: use builtin, remote:HOST:PORT or app:PATH.py")


# the module whose ``main(fabric, args)`` runs each fabric command
COMMANDS = {"check": "emulator.experiments.check",
            "compare": "emulator.experiments.compare.compare",
            "compare_routing": "emulator.experiments.compare.routing_cmp",
            "compare_rails": "emulator.experiments.compare.rails_cmp",
            "drill": "emulator.experiments.drill.drill",
            "drill_collective": "emulator.experiments.drill.drill_collective",
            "drill_training": "emulator.experiments.drill.drill_training",
            "drill_chaos": "emulator.experiments.drill.drill_chaos",
            "probe": "emulator.experiments.probe.probe"}


ROUTINGS = ("minimal", "valiant", "ugal", "ugal-l")   # --routing: controller/dragonfly.py
WORKLOADS = ("mix", "allreduce", "allgather", "reducescatter", "alltoall", "incast", "none",
             "adversarial", "permutation")


def parse_workload(text):
    if text in WORKLOADS or text.startswith("simai:"):
        return text
    raise argparse.ArgumentTypeError(
        f"invalid choice: {text!r} (choose from {', '.join(WORKLOADS)}, simai:FILE)")


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m emulator",
                                 description="AI-cluster fabric emulator")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="build the fabric, check it, run traffic, tear down")
    g = p.add_argument_group("fabric")
    add_fabric_args(g)
    g.add_argument("--datapath", choices=("auto", "kernel", "user"), default="auto",
                   help="OVS datapath; auto uses the kernel one when its module loads")
    g.add_argument("--queue-ms", type=float, default=30.0,
                   help="egress queue of every link, in ms at the link rate (default 30)")
    g = p.add_argument_group("control plane")
    g.add_argument("--controller", type=parse_controller, default="builtin",
                   help="builtin (default), remote:HOST:PORT, or app:PATH.py")
    g.add_argument("--lb", choices=LB_MODES, default="ecmp",
                   help="load balancing (default ecmp): the controller's mode, and for "
                        "collectives the NIC's entropy (per packet for spray, per flowlet "
                        "for flowlet); the mix keeps one UDP source port per QP")
    add_adaptive_args(g)
    g.add_argument("--failover", choices=FAILOVER_MODES,
                   default="fast-failover", help="repair mode (default fast-failover)")
    from emulator.experiments.options import add_switch_agent_arg
    add_switch_agent_arg(g)
    g.add_argument("--hash-seed", type=parse_seed, default=None, metavar="per-switch|N",
                   help="ECMP hash seed: per-switch (default) or one N for every switch "
                        "(shows hash polarization)")
    g.add_argument("--routing", choices=ROUTINGS, default="minimal",
                   help="a dragonfly's routing (default minimal: at most one global hop); "
                        "valiant: through a random intermediate group per flowlet "
                        "(the NICs then change entropy per flowlet; docs/fabrics.md); "
                        "ugal: the source router chooses per flowlet between minimal and "
                        "Valiant by the group's global queues (UGAL-G); ugal-l: by its "
                        "own ports' queues (UGAL-L)")
    g = p.add_argument_group("traffic")
    g.add_argument("--workload", default="mix", type=parse_workload,
                   metavar="{" + ",".join(WORKLOADS) + ",simai:FILE}",
                   help="mix: RoCEv2 flows across leaves (default); a collective: "
                        "nccl-tests-style run over all hosts (or --hosts); incast: every "
                        "host writes --sizes bytes to the first at once; simai:FILE: a "
                        "training job from a SimAI/AICB workload file (docs/training.md); "
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
    g = p.add_argument_group("training jobs (--workload simai:FILE)")
    add_training_args(g)
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
    from emulator.experiments.ui import live
    live.add_arguments(g)
    g.add_argument("--results", default="results", metavar="DIR",
                   help="results go to DIR/<time>-<run tag>/")

    p = sub.add_parser("calibrate", help="measure how much traffic this machine emulates "
                                         "faithfully (1 and 3 switch hops); cached for "
                                         "the runs' load warnings")
    p.add_argument("--mtu", type=int, choices=ROCE_MTUS, default=4096,
                   help="RoCE path MTU of the frames (default 4096)")
    p.add_argument("--datapath", choices=("auto", "kernel", "user"), default="auto")
    p.add_argument("--layout", metavar="LAYOUT",
                   help="the datapath layout to measure (shared, per-switch, N, ...; default: "
                        "$FABRIC_LAB_LAYOUT, else auto); each is cached apart")
    p.add_argument("--results", default="results", metavar="DIR")
    p.add_argument("--searches", type=int, default=None, choices=range(1, 10), metavar="N",
                   help="search each path N times (1-9) and cache the median (default 3; "
                        "one search on a shared machine can be 2x off)")
    p.add_argument("--if-missing", action="store_true",
                   help="only when no budget of this machine is cached for it yet "
                        "(setup.sh calibrates so)")

    from emulator.experiments.drill import drill
    p = sub.add_parser("drill", help="failover drill: inject faults under probe traffic, "
                                     "measure loss windows and recovery")
    add_fabric_args(p)
    drill.add_arguments(p)
    add_switch_agent_arg(p)
    from emulator.experiments.drill import drill_chaos
    drill_chaos.add_arguments(p)
    live.add_arguments(p)

    from emulator.experiments.probe import probe
    p = sub.add_parser("probe", help="black-box prober: probe every path, find a link that "
                                     "drops or corrupts silently, isolate it; time to "
                                     "detect and isolate, false suspects")
    add_fabric_args(p)
    probe.add_arguments(p)

    from emulator.experiments import check
    p = sub.add_parser("check", help="hold a controller (app) to checks: reachability, "
                                     "a flow's path, loss under a link cut; PASS/FAIL")
    add_fabric_args(p)
    check.add_arguments(p)

    from emulator.experiments.compare import compare
    p = sub.add_parser("compare", help="load-balancing modes (ecmp, flowlet, dlb, spray) "
                                       "on the same collective: busbw, uplink spread; "
                                       "--planes: dual-plane vs single-plane fabric")
    add_fabric_args(p)
    compare.add_arguments(p)
    live.add_arguments(p)
    from emulator.experiments.compare import routing_cmp
    routing_cmp.add_arguments(p)            # --routing: a dragonfly's routing modes
    from emulator.experiments.compare import rails_cmp
    rails_cmp.add_arguments(p)              # --fabrics: rail-only vs rail-optimized

    from emulator.experiments.ui import cli as ui_cli
    p = sub.add_parser("ui", help="a finished run's page (report.html), served on 127.0.0.1 "
                                  "with a token until Ctrl-C")
    ui_cli.add_arguments(p)

    p = sub.add_parser("show", help="print the fabric: nodes, links, addressing")
    add_fabric_args(p)
    p.add_argument("--yaml", action="store_true", help="write the fabric back as YAML")
    p.add_argument("--json", action="store_true", help="print the topology JSON document")
    p.add_argument("--picture", metavar="FILE.png",
                   help="draw the fabric (one row per tier) into FILE.png")

    p = sub.add_parser("validate", help="check a fabric file without running it")
    p.add_argument("file")

    p = sub.add_parser("clean", help="remove leftovers of dead runs of this project only")
    p.add_argument("--force", action="store_true", help="also remove runs that look alive")
    p.add_argument("--servers", metavar="USER@ADDRESS,...",
                   help="also clean these servers of a multi-server run (over ssh)")
    p.add_argument("--ssh-config", metavar="FILE", help="an ssh_config file for --servers")

    sub.add_parser("presets", help="list presets and their parameters")
    return ap


def raise_open_files_limit():
    """Every host namespace holds open descriptors of the run's (Mininet's shells,
    raw sockets): a 512-host fabric passes the usual soft limit of 1024."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def main(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    raise_open_files_limit()
    try:
        if args.command == "validate":
            fabric = spec.load_file(args.file)
            print(f"{args.file}: ok: {len(fabric.hosts)} hosts, {len(fabric.switches)} "
                  f"switches, {len(fabric.links)} links")
            return 0
        if args.command == "presets":
            for name in presets.PRESETS:
                print(f"{name}:\n{presets.describe(name)}")
            return 0
        if args.command == "show":
            from emulator.report import summary as report
            fabric = load_fabric(args)
            if args.yaml:
                sys.stdout.write(spec.dump(fabric))
            elif args.json:
                print(json.dumps(addressing.plan(fabric), indent=2))
            elif args.picture:
                from emulator.report import files as reports
                reports.fabric_png(addressing.plan(fabric), args.picture)
                print(f"{args.picture}: {fabric.name}, {len(fabric.nodes)} nodes")
            else:
                print(report.describe_fabric(fabric, addressing.plan(fabric)))
                if fabric.layout not in (None, "auto"):
                    from emulator.fabric import layout
                    topo = addressing.plan(fabric)
                    placement = layout.place(topo, fabric.layout)
                    print(f"layout {fabric.layout}: {layout.describe(placement)}"
                          + (f"; {layout.crossing_links(topo, placement)} links join two "
                             "instances" if placement else ""))
                if fabric.cluster is not None:
                    from emulator.fabric import cluster
                    topo = addressing.plan(fabric)
                    where = cluster.place(topo, fabric.cluster.servers,
                                          fabric.cluster.placement)
                    print(f"servers (placement {fabric.cluster.placement}): "
                          f"{cluster.describe(where, fabric.cluster.servers)}; "
                          f"{len(cluster.crossing(topo, where)[0]) // 2} links between them")
            return 0
        if args.command == "clean":
            from emulator.dataplane import cleanup
            from emulator.dataplane import session
            session.require_root()
            if args.servers:         # the servers first: this machine's state names them
                from emulator.dataplane.cluster import servers
                from emulator.fabric import cluster
                cl = cluster.parse_cluster(args.servers, ssh_config=args.ssh_config,
                                           where="--servers")
                servers.clean_servers(cl.servers, servers.ssh_base(cl.ssh_config),
                                      force=args.force)
            cleanup.clean(force=args.force)
            return 0
        if args.command == "calibrate":
            from emulator.dataplane import session
            from emulator.experiments import calibrate
            session.require_root()
            session.check_dependencies()
            from emulator.fabric import layout
            chosen = layout.parse(args.layout) if args.layout else None
            doc = calibrate.known(args.mtu, args.datapath, chosen) if args.if_missing else None
            if doc is not None:
                print(f"this machine's budget is cached (measured {doc.get('measured_at')}): "
                      f"{doc['hop_pps'] / 1e3:.1f}k switch-hop packets/s; "
                      "`emulator calibrate` measures it again")
                return 0
            calibrate.calibrate(mtu=args.mtu, results=args.results, datapath=args.datapath,
                                layout=chosen,
                                searches=args.searches or calibrate.SEARCHES)
            return 0
        if args.command == "ui":
            from emulator.experiments.ui import cli as ui_cli
            return ui_cli.main(args)
        if args.command == "run":
            from emulator.experiments import run
            from emulator.experiments.ui.live import around    # --ui: the page
            return around(run.run, "run", load_fabric(args), args)
        if args.command in ("check", "compare", "drill", "probe"):
            import importlib

            from emulator.dataplane import session
            name = args.command
            if name == "drill" and getattr(args, "workload", None):
                # the same drill, under a collective or a training job
                name = "drill_training" if args.workload.startswith("simai:") \
                    else "drill_collective"
            if args.command == "drill" and getattr(args, "chaos", False):
                name = "drill_chaos"            # random faults under the probes
            if name == "compare" and getattr(args, "routing", None):
                name = "compare_routing"        # compare --routing: a dragonfly's modes
            if name == "compare" and getattr(args, "fabrics", None):
                name = "compare_rails"          # compare --fabrics: the rail fabrics
                if args.fabric or args.preset not in (None, "rail-only", "rail-optimized"):
                    raise FabricError("--fabrics builds its own presets from -P (rail-only's "
                                      "parameters): no -f FILE, no -p other than theirs")
                args.preset = "rail-only"               # -P checked as rail-only's
            command = importlib.import_module(COMMANDS[name])
            if getattr(args, "planes", False) and not (args.fabric or args.preset):
                args.preset = "dual-plane"      # compare --planes: its own preset
            fabric = load_fabric(args)
            if fabric.cluster is not None and name in ("check", "probe", "compare",
                                                       "drill_collective", "drill_training"):
                what = "drill --workload" if name.startswith("drill_") else name
                raise FabricError(f"{what} runs on one machine only: not with --servers "
                                  "(run and drill under probes run on servers)")
            session.require_root()
            session.check_dependencies()
            from emulator.experiments.ui.live import around    # --ui: the page
            return around(command.main, name, fabric, args)
    except FabricError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_status
    except RunFailed as e:
        print(f"run failed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted (the run's teardown above says what it removed)", file=sys.stderr)
        return 130
    except BaseException as e:
        from emulator.dataplane.system.signals import Interrupted
        if isinstance(e, Interrupted):
            print(f"stopped by {e} (the run's teardown above says what it removed)",
                  file=sys.stderr)
            return 143
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
