"""Benchmark: load-balancing modes on one AllReduce (``emulator compare``).

    sudo .venv/bin/python bench/bench_lb.py [--reps 3] [--sizes 1M]

A non-blocking 4 spines x 4 leaves x 4 hosts leaf-spine at 5 Mbit/s per link
(16 ranks x 5 Mbit/s x 3 bridges stays inside the userspace datapath's
budget on 2 shared cores), a strided ring (every hop crosses the spines),
every mode with ``--reps`` hash seeds, then ECMP with 2/4/8 QPs per
connection and with the topology-aware ring.  Prints the comparison table;
compare.json and compare.png are in the results directory it names.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.__main__ import main  # noqa: E402


def cli(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="1M")
    ap.add_argument("--rate", default="5Mbps")
    ap.add_argument("--results", default="results")
    a = ap.parse_args(argv)
    return main(["compare", "-P", "spines=4", "-P", "leaves=4", "-P", "hosts_per_leaf=4",
                 "-P", f"host_rate={a.rate}", "-P", f"uplink_rate={a.rate}",
                 "--modes", "ecmp,flowlet,dlb,spray", "--ring", "strided",
                 "--sizes", a.sizes, "--reps", str(a.reps),
                 "--sweep-qps", "1,2,4,8", "--sweep-rings", "topology",
                 "--results", a.results])


if __name__ == "__main__":
    sys.exit(cli())
