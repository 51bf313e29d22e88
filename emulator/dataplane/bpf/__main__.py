"""``python -m emulator.dataplane.bpf build [--force]``: compile the eBPF
programs whose objects are missing or stale (setup.sh runs it)."""

import argparse
import os
import sys

from emulator.dataplane.bpf import build
from emulator.errors import EnvironmentProblem


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m emulator.dataplane.bpf")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="compile the *.bpf.c sources that are missing or stale")
    b.add_argument("--force", action="store_true", help="compile every source again")
    args = parser.parse_args(argv)
    try:
        made = build.build(force=args.force)
    except EnvironmentProblem as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_status
    for obj in made:
        print(f"compiled {os.path.relpath(obj)}")
    if not made:
        print(f"eBPF objects up to date in {os.path.relpath(build.BUILD)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
