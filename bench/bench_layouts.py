"""Datapath layouts side by side: the default drill on one Open vSwitch and on instances.

    sudo .venv/bin/python bench/bench_layouts.py --rounds 3 --repeat 3
        [--layouts shared,2,per-switch] [--failover fast-failover] [-P spines=4 ...]

Each round runs ``emulator drill --layout L`` for every layout in turn (so a
slow spell of the machine falls on all of them alike), ``--repeat`` cuts per
drill.  Printed per layout, medians over every repeat of every round: the
longest gap and the loss window of the flows crossing the cut, the longest
gap of the flows that do not cross it (stall) and before the cut (calm), the
CPU of the ovs-vswitchd daemons, and how many repeats were faithful.
"""

import argparse
import statistics

from bench_failover import run_drill


def drill(layout, a):
    _, doc = run_drill(["--layout", layout, "--failover", a.failover,
                        "--repeat", str(a.repeat)], a.param, a.results)
    return doc["modes"][0]


def values(mode, key):
    """The values of ``key`` in every repeat of a drill mode (flows' and the CPU's)."""
    out = []
    for rep in mode["repeats"]:
        crossing = [f for f in rep["flows"].values() if f.get("crosses")]
        others = [f for f in rep["flows"].values() if not f.get("crosses")]
        if key == "gap":
            out += [f["longest_gap_ms"] for f in crossing if f.get("longest_gap_ms") is not None]
        elif key == "loss":
            out += [f["loss_window_ms"] for f in crossing if f.get("loss_window_ms") is not None]
        elif key == "stall":      # the worst non-crossing flow of the repeat
            out += [max(f.get("longest_gap_ms") or 0 for f in others)] if others else []
        elif key == "calm":
            out += [max(f.get("calm_gap_ms") or 0 for f in others)] if others else []
        elif key == "ovs_cpu":
            cpu = (rep.get("fidelity") or {}).get("cpu") or {}
            if cpu.get("ovs_vswitchd") is not None:
                out.append(cpu["ovs_vswitchd"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layouts", default="shared,2,per-switch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--failover", default="fast-failover")
    ap.add_argument("-P", "--param", action="append", default=[])
    ap.add_argument("--results", default="/tmp/bench-layouts")
    a = ap.parse_args()
    layouts = [x.strip() for x in a.layouts.split(",") if x.strip()]
    runs = {lay: [] for lay in layouts}
    for rnd in range(a.rounds):
        for lay in layouts:
            print(f"round {rnd + 1}/{a.rounds}: layout {lay}", flush=True)
            runs[lay].append(drill(lay, a))
    print(f"\ndrill --failover {a.failover}, {a.rounds} rounds x {a.repeat} repeats per layout"
          + (f", -P {' -P '.join(a.param)}" if a.param else ""))
    cols = [("gap", "crossing gap ms"), ("loss", "loss window ms"), ("stall", "others' stall ms"),
            ("calm", "calm ms"), ("ovs_cpu", "OVS cores")]
    print(f"{'layout':<12}" + "".join(f"{title:>18}" for _, title in cols) + f"{'faithful':>10}")
    for lay in layouts:
        cells = []
        for key, _ in cols:
            v = [x for m in runs[lay] for x in values(m, key)]
            cells.append(f"{statistics.median(v):>18.2f}" if v else f"{'-':>18}")
        reps = [r for m in runs[lay] for r in m["repeats"]]
        ok = sum(1 for r in reps if (r.get("fidelity") or {}).get("verdict") == "faithful")
        print(f"{lay:<12}" + "".join(cells) + f"{ok:>6}/{len(reps)}")


if __name__ == "__main__":
    main()
