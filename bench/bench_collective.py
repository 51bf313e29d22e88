#!/usr/bin/env python3
"""AllReduce efficiency (busbw / link rate) on a non-blocking leaf-spine.

Builds one fabric (default: 2 spines x 2 leaves x 2 hosts, every link at the
same rate, so each leaf has as much uplink as downlink capacity), then runs
ring AllReduce over all hosts ``--repeats`` times for each ring order and
prints the median busbw and efficiency per size.  Run as root:

    sudo .venv/bin/python bench/bench_collective.py [--sizes 1M,4M] [--repeats 3]
"""

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.dataplane.session import Session, require_root  # noqa: E402
from emulator.experiments.workloads.collective import parse_sizes, run_collective  # noqa: E402
from emulator.fabric import presets  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1M,4M")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--qps", type=int, default=1)
    ap.add_argument("-P", "--param", action="append",
                    default=["spines=2", "leaves=2", "hosts_per_leaf=2"])
    args = ap.parse_args()
    require_root()
    fabric = presets.build("leaf-spine", presets.parse_assignments(args.param))
    sizes = parse_sizes(args.sizes)
    print(f"fabric {fabric.name} (oversubscription "
          f"{presets.oversubscription(fabric, 'leaf1'):g}:1), AllReduce over "
          f"{len(fabric.hosts)} ranks, {args.qps} QP/connection, {args.repeats} repeats")
    rows = {}
    with tempfile.TemporaryDirectory() as results, Session(fabric, results_base=results) as s:
        for i in range(args.repeats):
            for ring in ("naive", "topology"):
                rep = run_collective(s, "allreduce", sizes, qps=args.qps, ring=ring)
                for r in rep["rows"]:
                    rows.setdefault((ring, r["size"]), []).append(r)
                print(f"  repeat {i + 1} {ring:8s} " + "  ".join(
                    f"{r['size'] >> 20}M: busbw {r['busbw_Mbps']:.2f} Mbit/s "
                    f"eff {r['efficiency']:.3f} wrong {r['wrong']}" for r in rep["rows"]))
    link = rep["link_bps"] / 1e6
    print(f"\nmedians (link {link:g} Mbit/s):")
    print(f"  {'ring':9s} {'size':>6s} {'busbw Mbit/s':>13s} {'efficiency':>10s} {'#wrong':>6s}")
    for (ring, size), rs in sorted(rows.items()):
        print(f"  {ring:9s} {size >> 20:5d}M {statistics.median(r['busbw_Mbps'] for r in rs):13.2f}"
              f" {statistics.median(r['efficiency'] for r in rs):10.3f}"
              f" {sum(r['wrong'] for r in rs):6d}")


if __name__ == "__main__":
    main()
