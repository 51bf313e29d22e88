"""Command-line options that mean the same on every command that measures traffic."""

import argparse

from traffic.frames import ROCE_MTUS

LB_MODES = ("ecmp", "flowlet", "dlb", "spray")               # --lb, compare --modes
FAILOVER_MODES = ("none", "controller", "fast-failover")     # --failover


def add_fidelity_args(p):
    """``--mtu`` (RoCE path MTU of the traffic) and ``--strict`` (exit 3 if emulator-bound)."""
    p.add_argument("--mtu", type=int, choices=ROCE_MTUS, default=4096,
                   help="RoCE path MTU: payload bytes per packet (default 4096, as AI "
                        "fabrics run); every interface gets an MTU that carries it")
    p.add_argument("--strict", action="store_true",
                   help="exit 3 when the measurement is emulator-bound (the machine, "
                        "not the emulated links, limited the traffic)")


def add_capture_arg(p):
    """``--capture NODE[:PORT][,...]``: one pcap per interface in the results directory."""
    p.add_argument("--capture", default=None, metavar="NODE[:PORT][,...]",
                   help="write a pcap per interface of these nodes (h1, leaf1:eth3, ...; a "
                        "node alone: all its ports) into the results directory, at most "
                        "20 MB each; RoCEv2 decodes in tshark/Wireshark")


def check_capture(args, fabric):
    """Validate ``--capture`` against the fabric before anything is built (exit 2)."""
    if getattr(args, "capture", None):
        from emulator.dataplane import capture
        from emulator.fabric import addressing
        capture.parse(args.capture, addressing.plan(fabric))


def check_telemetry(args):
    """``--telemetry PORT``: a port number this machine can listen on, checked before
    anything is built (exit 2 otherwise)."""
    port = getattr(args, "telemetry", None)
    if port is None:
        return
    import socket
    from emulator.errors import ConfigError
    if not 0 < port < 65536:
        raise ConfigError("--telemetry", f"{port}: a TCP port, 1-65535")
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise ConfigError("--telemetry", f"127.0.0.1:{port} is not free ({e.strerror}): "
                                             "choose another port")


def parse_seed(text):
    if text in (None, "per-switch"):
        return None
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not 'per-switch' or an integer")
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError("seed must be in 0..2^32-1")
    return value
