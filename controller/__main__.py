"""Launcher: ``python -m controller --topology PATH [--listen 127.0.0.1:6653]
[--unix PATH] [--tls KEY,CERT,CA] [--log-file PATH] [--app PATH.py ...]``.

Logs ``controller listening on HOST:PORT`` once the OpenFlow listener is up
(the ready signal), exits 0 on SIGTERM, exits 1 on a handler exception
(``CONTROLLER-EXCEPTION``) and 2 on a bad command line or topology.
The run's modes (load balancing, failover, routing, BFD hold-down) are the
topology document's ``modes`` block (controller.topology.Modes), so the
document is the controller's whole configuration, as Faucet's FAUCET_CONFIG.
``--app`` runs the given os-ken app file(s) instead of ours; the topology path
reaches them in the environment variable FABRIC_TOPOLOGY.  Apps written for
Ryu run unchanged (``controller.ryu_compat``); an app importing something
os-ken dropped is refused with exit 2 and one line naming the import.
"""

import argparse
import logging
import os
import socket
import sys

from .damping import parse_holddown
from .topology import TopologyError, load


def parse_listen(text):
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    try:
        socket.inet_aton(host)
    except OSError:
        raise argparse.ArgumentTypeError(f"{host!r} is not an IPv4 address")
    return host, int(port)


def app_problems(paths):
    """One line per reason an --app file cannot run (missing, or a Ryu import os-ken lacks)."""
    from .ryu_compat import preflight  # lazy: os-ken's import hooks
    problems = []
    for path in paths:
        if not os.path.isfile(path):
            problems.append(f"{path}: no such file (give the app as a path to a .py file)")
            continue
        try:
            problems += preflight(path)
        except SyntaxError as e:
            problems.append(f"{path}:{e.lineno}: syntax error: {e.msg}")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m controller", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", required=True, help="topology.json (docs/topology-schema.md)")
    ap.add_argument("--listen", type=parse_listen, default=("127.0.0.1", 6653),
                    help="OpenFlow listen address (default 127.0.0.1:6653)")
    ap.add_argument("--unix", metavar="PATH",
                    help="also accept switches on this unix socket (datapath instances in "
                         "other network namespaces connect through it)")
    ap.add_argument("--tls", metavar="KEY,CERT,CA",
                    help="accept switches over TLS only, with this private key and certificate, "
                         "and only switches whose certificate CA signed (a multi-server run)")
    ap.add_argument("--log-file", help="also log to this file")
    ap.add_argument("--app", action="append", help="run this os-ken app file instead of ours")
    ap.add_argument("--debug", action="store_true", help="debug logging")
    args = ap.parse_args(argv)
    tls = tuple(args.tls.split(",")) if args.tls else None
    if tls and (len(tls) != 3 or not all(os.path.isfile(f) for f in tls)):
        ap.error(f"--tls {args.tls!r}: give KEY,CERT,CA, three existing files")
    if args.listen[0] != "127.0.0.1" and not tls:
        ap.error("the controller listens on 127.0.0.1 only, unless with --tls")
    handlers = [logging.StreamHandler(sys.stderr)]
    if args.log_file:
        handlers.append(logging.FileHandler(args.log_file))
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO, handlers=handlers,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        topo = load(args.topology)
        parse_holddown(topo.modes.bfd_holddown)
    except (TopologyError, ValueError) as e:
        logging.getLogger(__package__).error("bad topology: %s", e)
        return 2
    # Process start-up: the os-ken app (ours, or a user's) is instantiated by
    # os-ken's app manager and reads its configuration here.
    os.environ["FABRIC_TOPOLOGY"] = os.path.abspath(args.topology)
    if args.app:
        problems = app_problems(args.app)
        if problems:
            for p in problems:
                logging.getLogger(__package__).error("app: %s", p)
            return 2
        from . import ryu_compat  # Ryu apps run unchanged: ryu.* is os_ken.*
        ryu_compat.install()
    from . import launch, osken_app  # noqa: F401 imported late: os-ken monkey-patches on import paths
    launch.run(args.topology, *args.listen, apps=args.app, unix=args.unix, tls=tls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
