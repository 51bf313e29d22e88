"""Command-line options that mean the same on every command that measures traffic."""

from traffic.frames import ROCE_MTUS


def add_fidelity_args(p):
    """``--mtu`` (RoCE path MTU of the traffic) and ``--strict`` (exit 3 if emulator-bound)."""
    p.add_argument("--mtu", type=int, choices=ROCE_MTUS, default=4096,
                   help="RoCE path MTU: payload bytes per packet (default 4096, as AI "
                        "fabrics run); every interface gets an MTU that carries it")
    p.add_argument("--strict", action="store_true",
                   help="exit 3 when the measurement is emulator-bound (the machine, "
                        "not the emulated links, limited the traffic)")
