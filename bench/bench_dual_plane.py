#!/usr/bin/env python3
"""Benchmark: HPN dual-plane vs single-plane fabric (``emulator compare --planes``).

    sudo .venv/bin/python bench/bench_dual_plane.py [--repeats 3] [--sizes 2M] [--qps 8]
    sudo .venv/bin/python bench/bench_dual_plane.py --tor-pairs 4 --hosts-per-pair 1  # spine-bound

The default dual-plane preset (2 ToR pairs x 2 bonded hosts, 4 spines) and
its single-plane counterpart with the same ToR uplink capacity
(oversubscription 1: 2 uplinks at the host rate vs 4 at half of it), hosts at
10 Mbit/s per NIC port (20 Mbit/s bonds: 4 ranks x 5 bridge hops stay inside
the userspace datapath's budget on 2 shared cores), an AlltoAll with many
QPs, deep (lossless stand-in) queues; each repetition runs both fabrics back
to back with one shared hash seed and with per-switch seeds.  Prints the
medians over the repetitions side by side with single/dual (ratio of the
medians of this run); planes.json and planes.png are in the results
directory it names.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.__main__ import main  # noqa: E402


def cli(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="repetitions (hash draws)")
    ap.add_argument("--sizes", default="2M", help="AlltoAll size (the largest is reported)")
    ap.add_argument("--qps", type=int, default=8, help="QPs per connection")
    ap.add_argument("--rate", default="10Mbps", help="host NIC port rate")
    ap.add_argument("--tor-pairs", type=int, default=2, help="ToR pairs")
    ap.add_argument("--hosts-per-pair", type=int, default=2, help="bonded hosts per ToR pair")
    ap.add_argument("--queue-ms", type=float, default=2000.0,
                    help="egress queue per link, ms at link rate (deep: lossless stand-in)")
    ap.add_argument("--seed", type=int, default=101,
                    help="shared seed of the first repetition (above the bonds' seeds)")
    ap.add_argument("--results", default="results")
    a = ap.parse_args(argv)
    return main(["compare", "--planes", "-P", f"host_rate={a.rate}", "-P", "oversubscription=1",
                 "-P", f"tor_pairs={a.tor_pairs}", "-P", f"hosts_per_pair={a.hosts_per_pair}",
                 "--workload", "alltoall", "--sizes", a.sizes, "--qps", str(a.qps),
                 "--queue-ms", str(a.queue_ms), "--reps", str(a.repeats), "--seed", str(a.seed),
                 "--results", a.results])


if __name__ == "__main__":
    sys.exit(cli())
