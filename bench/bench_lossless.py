"""The lossless fabric's figures: pause reaction, incast with and without PFC,
head-of-line blocking, storms against the watchdog, and the deadlock ring.

    sudo .venv/bin/python bench/bench_lossless.py --reps 3 [--parts compare,storm,deadlock]

- compare: ``emulator compare --flow-control none,pfc,credit --cc none,dcqcn``
  on an 8:1 incast (``-P spines=2 -P leaves=3 -P hosts_per_leaf=3``: 9 hosts;
  ``--workload allreduce``: a ring over 7 of them) with a victim stream; per
  setting, medians over ``--reps``: time, drops,
  retransmissions, PFC frames, the victim's Mbit/s, and the pause reaction
  (xoff crossed -> the upstream's last frame) in frame times;
- storm: ``emulator drill --fault h1:pfc-storm`` held 3 x and 0.5 x the
  watchdog's detection time, ``--reps`` storms each: when the watchdog acted
  after the storm began, and when it restored after the storm stopped;
- deadlock: ``--reps`` times the route change of ``fabric.lossless.deadlock_plan``
  under its four streams at line rate: seconds to the cycle's detection and
  to the watchdog's first action, and the cycle named.
Every run's fidelity verdict is printed with it.
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

from bench_failover import REPO, run_drill

INCAST = ["spines=2", "leaves=3", "hosts_per_leaf=3"]


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def compare(a):
    argv = [sys.executable, "-m", "emulator", "compare", "--flow-control", "none,pfc,credit",
            "--cc", "none,dcqcn", "--reps", str(a.reps), "--results", a.results,
            "--workload", a.workload]
    for p in a.param or INCAST:
        argv += ["-P", p]
    before = set(glob.glob(os.path.join(a.results, "*-lossless")))
    r = subprocess.run(argv, cwd=REPO, timeout=3600, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        sys.exit(f"compare exited {r.returncode}: {r.stderr.strip()[-500:]}")
    (new,) = set(glob.glob(os.path.join(a.results, "*-lossless"))) - before
    with open(os.path.join(new, "lossless.json")) as f:
        doc = json.load(f)
    print(f"## compare --flow-control none,pfc,credit --cc none,dcqcn --workload {a.workload}, "
          f"{a.reps} reps ({new})")
    print(r.stdout.split(f"# {a.workload}", 1)[-1])
    pfc = [x for x in doc["runs"] if x["flow_control"] != "none"]
    print(f"pause reaction, frame times: median of the runs' medians "
          f"{med(x.get('reaction_median_frames') for x in pfc)}, of their p95 "
          f"{med(x.get('reaction_p95_frames') for x in pfc)}, max "
          f"{max((x.get('reaction_max_frames') or 0) for x in pfc)} over {len(pfc)} runs")


def storms(a):
    print(f"## storms: drill --fault h1:pfc-storm, {a.reps} storms per length")
    for factor in (3.0, 0.5):
        hold = factor * a.detect
        _, doc = run_drill(["--fault", "h1:pfc-storm", "--hold", f"{hold:g}", "--repeat",
                            str(a.reps), "--failover", "none"], ["lossless=true"] + INCAST,
                           a.results)
        mode = doc["modes"][0]
        st = mode["lossless"]["storms"]
        det = [x["detected_after_s"] for x in st if x["detected_after_s"] is not None]
        res = [x["restored_after_stop_s"] for x in st if x["restored_after_stop_s"] is not None]
        faithful = sum(rep["fidelity"]["verdict"] == "faithful" for rep in mode["repeats"])
        print(f"storm {hold:g} s ({factor:g} x detection): watchdog acted in {len(det)} of "
              f"{len(st)}; after {med(det)} s (median, max {max(det, default=None)}); "
              f"restored {med(res)} s after the storm stopped; faithful {faithful}/"
              f"{len(mode['repeats'])}")


def deadlock(a):
    sys.path.insert(0, REPO)
    from emulator.dataplane.session import Session
    from emulator.experiments.compare.lossless import drive_deadlock
    from emulator.fabric import presets
    print(f"## deadlock: the route change of deadlock_plan under line-rate streams, "
          f"{a.reps} times")
    fabric = presets.build("leaf-spine", {"spines": "2", "leaves": "4", "hosts_per_leaf": "2",
                                          "lossless": "true"})
    for rep in range(a.reps):
        with Session(fabric, results_base=a.results) as s:
            work = os.path.join(s.dir, "deadlock")
            os.makedirs(work)
            t_on, _ = drive_deadlock(s, work, a.detect * 3)
        doc = s.results["lossless"]
        t0 = doc.get("agent_t0_ns")
        on = (t_on - t0) / 1e9 if t0 else None
        cyc = doc["deadlocks"][0] if doc["deadlocks"] else None
        first = next((t for ev, t, _ in doc["watchdog_events"] if ev == "storm"), None)
        print(f"rep {rep + 1}: cycle {' -> '.join(cyc['cycle']) if cyc else 'none'} found "
              f"{cyc['t'] - on:.2f} s after the route change" if cyc and on else
              f"rep {rep + 1}: cycle {cyc}",
              f"; watchdog first acted {first - on:.2f} s after it" if first and on else "",
              f"; {doc['watchdog_drops']} frames dropped by the watchdog")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--parts", default="compare,storm,deadlock")
    ap.add_argument("--workload", default="incast", choices=("incast", "allreduce"))
    ap.add_argument("-P", "--param", action="append", default=[],
                    help="compare's fabric parameters (default: " + " ".join(INCAST) + ")")
    ap.add_argument("--detect", type=float, default=1.0,
                    help="the watchdog's detection time (fabric.lossless.PfcConfig)")
    ap.add_argument("--results", default="/tmp/bench-lossless")
    a = ap.parse_args()
    os.makedirs(a.results, exist_ok=True)
    parts = a.parts.split(",")
    for name, fn in (("compare", compare), ("storm", storms), ("deadlock", deadlock)):
        if name in parts:
            fn(a)


if __name__ == "__main__":
    main()
