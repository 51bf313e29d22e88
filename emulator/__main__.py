"""Command line: ``python -m emulator {run,check,drill,probe,compare,calibrate,clean,show,
validate,presets,ui}``; the fabric commands and their sub-commands are in
emulator.experiments.commands.

Every user error (bad fabric file, unknown preset parameter, not root, a
missing dependency) prints one ``error:`` line and exits with status 2,
before anything is created.
"""

import argparse
import dataclasses
import json
import resource
import sys

from emulator.dataplane import cleanup, session
from emulator.dataplane.cluster import servers
from emulator.dataplane.system.signals import Interrupted
from emulator.errors import FabricError, RunFailed
from emulator.experiments import calibrate, commands
from emulator.experiments.spec.build import given_options
from emulator.experiments.spec.fabric import add_fabric_args, load_fabric, parse_controller  # noqa: F401 (parse_controller: the pinned argument forms)
from emulator.experiments.ui import cli as ui_cli
from emulator.fabric import addressing, cluster, layout, presets, spec
from emulator.fabric.routing import asn
from emulator.report import files as reports
from emulator.report import summary as report
from lab.modes import Control
from traffic.roce.frames import ROCE_MTUS


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m emulator",
                                 description="AI-cluster fabric emulator")
    sub = ap.add_subparsers(dest="command", required=True)
    commands.add_parsers(sub)

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
    p.add_argument("--control", choices=Control.names(), default=Control.default(),
                   help="the data plane to measure: Open vSwitch's (openflow, default) or "
                        "the routed fabric's kernel forwarding (bgp); cached apart")


    p = sub.add_parser("ui", help="a finished run's page (report.html), served on 127.0.0.1 "
                                  "with a token until Ctrl-C")
    ui_cli.add_arguments(p)

    p = sub.add_parser("show", help="print the fabric: nodes, links, addressing")
    add_fabric_args(p)
    p.add_argument("--yaml", action="store_true", help="write the fabric back as YAML")
    p.add_argument("--json", action="store_true", help="print the topology JSON document")
    p.add_argument("--picture", metavar="FILE.png",
                   help="draw the fabric (one row per tier) into FILE.png")
    p.add_argument("--control", choices=Control.names(), default=None,
                   help="plan it for this control plane (bgp: ASNs, per-leaf subnets, /31 "
                        "links; default: the fabric file's, else openflow)")

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
            fabric, source = load_fabric(args)
            if args.control is not None:
                fabric = dataclasses.replace(fabric, control=Control(args.control))
            if fabric.control == Control.BGP:
                asn.check(fabric, source)
            if args.yaml:
                sys.stdout.write(spec.dump(fabric))
            elif args.json:
                print(json.dumps(addressing.plan(fabric), indent=2))
            elif args.picture:
                reports.fabric_png(addressing.plan(fabric), args.picture)
                print(f"{args.picture}: {fabric.name}, {len(fabric.nodes)} nodes")
            else:
                print(report.describe_fabric(fabric, addressing.plan(fabric)))
                if fabric.layout not in (None, "auto"):
                    topo = addressing.plan(fabric)
                    placement = layout.place(topo, fabric.layout)
                    print(f"layout {fabric.layout}: {layout.describe(placement)}"
                          + (f"; {layout.crossing_links(topo, placement)} links join two "
                             "instances" if placement else ""))
                if fabric.cluster is not None:
                    topo = addressing.plan(fabric)
                    where = cluster.place(topo, fabric.cluster.servers,
                                          fabric.cluster.placement)
                    print(f"servers (placement {fabric.cluster.placement}): "
                          f"{cluster.describe(where, fabric.cluster.servers)}; "
                          f"{len(cluster.crossing(topo, where)[0]) // 2} links between them")
            return 0
        if args.command == "clean":
            session.require_root()
            if args.servers:         # the servers first: this machine's state names them
                cl = cluster.parse_cluster(args.servers, ssh_config=args.ssh_config,
                                           where="--servers")
                servers.clean_servers(cl.servers, servers.ssh_base(cl.ssh_config),
                                      force=args.force)
            cleanup.clean(force=args.force)
            return 0
        if args.command == "calibrate":
            session.require_root()
            session.check_dependencies([Control(args.control)])
            chosen = layout.parse(args.layout) if args.layout else None
            doc = calibrate.known(args.mtu, args.datapath, chosen, control=args.control) \
                if args.if_missing else None
            if doc is not None:
                print(f"this machine's budget is cached (measured {doc.get('measured_at')}): "
                      f"{doc['hop_pps'] / 1e3:.1f}k switch-hop packets/s; "
                      "`emulator calibrate` measures it again")
                return 0
            calibrate.calibrate(mtu=args.mtu, results=args.results, datapath=args.datapath,
                                layout=chosen, control=Control(args.control),
                                searches=args.searches or calibrate.SEARCHES)
            return 0
        if args.command == "ui":
            return ui_cli.main(args)
        if args.command in ("run", "drill", "probe", "check", "compare"):
            args.given = given_options(ap, argv if argv is not None else sys.argv[1:])
            return commands.execute(args)
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
        if isinstance(e, Interrupted):
            print(f"stopped by {e} (the run's teardown above says what it removed)",
                  file=sys.stderr)
            return 143
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
