"""Failover benchmark: the drill for each mode, repeated; prints loss windows and convergence.

    sudo .venv/bin/python bench/bench_failover.py --repeat 10 [--fault leaf1-spine1]
        [-P spines=2 -P leaves=2 -P hosts_per_leaf=1] [--modes none,controller,fast-failover]

Median / p95 / max of the loss window of the flows crossing the fault (lost
sequences / pps), of the arrival gap, and of the controller's convergence
(fault -> last port-down push acknowledged by barriers), per mode, from
``emulator drill``'s drill.json.
"""

import argparse
import glob
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_drill(args, params, results):
    """``emulator drill ARGS -P PARAM... --results RESULTS``: (its directory, drill.json)."""
    argv = [sys.executable, "-m", "emulator", "drill", *args, "--results", results]
    for p in params:
        argv += ["-P", p]
    before = set(glob.glob(os.path.join(results, "drill-*")))
    r = subprocess.run(argv, cwd=REPO, timeout=60 * 60, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"drill {' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-500:]}")
    (new,) = set(glob.glob(os.path.join(results, "drill-*"))) - before
    with open(os.path.join(new, "drill.json")) as f:
        return new, json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--fault", default="leaf1-spine1")
    ap.add_argument("--modes", default="none,controller,fast-failover")
    ap.add_argument("-P", "--param", action="append",
                    default=[])
    ap.add_argument("--results", default="/tmp/bench-failover")
    a = ap.parse_args()
    params = a.param or ["spines=2", "leaves=2", "hosts_per_leaf=1"]
    new, doc = run_drill(["--fault", a.fault, "--repeat", str(a.repeat),
                          "--failover", a.modes], params, a.results)
    print(f"fault {a.fault}, {a.repeat} repeats, fabric {' '.join(params)}")
    print(f"{'mode':<14} {'metric':<26} {'median':>9} {'p95':>9} {'max':>9} {'n':>4}")
    for m in doc["modes"]:
        sm = m["summary"]
        for key in ("loss_window_ms", "longest_gap_ms", "recovery_ms",
                    "controller_convergence_ms", "detection_ms",
                    "convergence_after_detection_ms", "recovery_after_detection_ms"):
            st = sm.get(key)
            if st:
                print(f"{m['mode']:<14} {key:<26} {st['median']:>9.2f} {st['p95']:>9.2f} "
                      f"{st['max']:>9.2f} {st['n']:>4}")
        print(f"{m['mode']:<14} {'non-crossing lost pkts':<26} "
              f"{sm['non_crossing_lost_packets']:>9}")
    print(f"details: {new}/drill.json")


if __name__ == "__main__":
    main()
