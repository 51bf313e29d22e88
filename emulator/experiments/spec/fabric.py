"""The fabric a command runs on: ``-f FILE`` or ``-p PRESET -P KEY=VALUE``, its datapath
layout, the servers it runs on, and the controller it connects to; checked before
anything is built (exit 2).
"""

import argparse
import dataclasses
import os

from emulator.errors import FabricError
from emulator.fabric import addressing, cluster, layout, presets, spec


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
        if not os.path.isfile(cl.ssh_config):
            raise FabricError(f"--ssh-config {cl.ssh_config}: no such file")
    if fabric.layout not in (None, "auto"):
        raise FabricError("--layout and --servers: each server runs its switches in one "
                          "datapath instance of its own; drop --layout")
    return dataclasses.replace(fabric, cluster=cl)


def load_fabric(args):
    """The fabric ``-f``/``-p``/``-P``/``--layout``/``--servers`` name, checked, and where
    it came from ({"file": PATH} or {"preset": NAME, "params": [K=V, ...]})."""
    if args.fabric:
        if args.param:
            raise FabricError("--param applies to presets, not to a fabric file")
        fabric = spec.load_file(args.fabric)
        source = {"file": os.path.abspath(args.fabric)}
    else:
        fabric = presets.build(args.preset or "leaf-spine",
                               presets.parse_assignments(args.param))
        source = {"preset": args.preset or "leaf-spine", "params": list(args.param)}
    if getattr(args, "layout", None) is not None:
        fabric = dataclasses.replace(fabric, layout=layout.parse(args.layout))
    if fabric.layout not in (None, "auto", "shared"):
        layout.place(addressing.plan(fabric), fabric.layout)   # a layout it cannot have
    fabric = with_servers(fabric, args)
    if fabric.cluster is not None:
        cluster.place(addressing.plan(fabric), fabric.cluster.servers,
                      fabric.cluster.placement)                # a placement it cannot have
    return fabric, source



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
