"""Switch-agent micro-benchmarks: each profile against the published figure it reproduces.

    sudo .venv/bin/python bench/bench_switch_agents.py [--profiles hardware,...] [--repeat 5]

For each profile (``emulator/fabric/agents/profiles.py``, ``BENCH``): its
changes of one priority sent through the switch-agent proxy into an Open
vSwitch bridge of their own (``emulator/dataplane/ovs/agent_bench.py``), a
fresh bridge each repeat; the median of the measured figure against the
published one: per rule, the first change sent -> the barrier reply over the
rules; or the lag of the data plane, the barrier reply -> the last rule in
Open vSwitch's table.  The ideal agent's figure for the same changes is
printed beside it: what the proxy and Open vSwitch add by themselves.
Exit status 1 when a profile is off by more than 25 %.  Each row says whether
its figure is one the profile was built from (``profiles.independent``): then
the row checks the emulation path, not the model.  Last, the priority
dependence end to end: insertions of one priority against insertions in
increasing order under an example slope (no profile carries one: the
papers' figures for it are not in the stored references).
"""

import argparse
import os
import statistics
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.dataplane.ovs.agent_bench import Bench  # noqa: E402 (after the path)
from emulator.fabric.agents import profiles  # noqa: E402
from emulator.fabric.switch_agent import ADD, Params  # noqa: E402

TOLERANCE = 0.25
SHIFT_MS = 0.05            # an example slope (ms per rule moved), not a published one


def measure(params, bench, repeats):
    """The figure ``bench`` names, one per repeat (a fresh bridge each)."""
    got = []
    for _ in range(repeats):
        with Bench(params) as b:
            r = b.run(bench.op, bench.rules)
        got.append(r["per_rule_ms"] if bench.measure == "per_rule" else r["lag_ms"])
    return got


def dependence(repeats, n=100):
    """The priority dependence end to end: ``n`` insertions of one priority, then in
    increasing order, under a model that moves the lower-priority rules (no
    profile carries the slope: SHIFT's is an example); against the model's sums."""
    p = replace(profiles.HARDWARE, shift_ms=SHIFT_MS, shift_order="lower")
    rows = []
    for step in (0, 1):
        got = []
        for _ in range(repeats):
            with Bench(p) as b:
                got.append(b.run(ADD, n, step=step)["barrier_ms"])
        model = n * p.change_ms() + (SHIFT_MS * n * (n - 1) / 2 if step else 0.0)
        rows.append((step, statistics.median(got), model))
    print(f"priority dependence (hardware with shift_ms {SHIFT_MS}, lower): {n} insertions")
    for step, med, model in rows:
        print(f"  {'increasing' if step else 'one priority':<13} {med:8.1f} ms "
              f"(model {model:.1f} ms, {med / model - 1:+.1%})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", default=",".join(profiles.BENCH))
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    names = [n for n in a.profiles.split(",") if n]
    bad = [n for n in names if n not in profiles.BENCH]
    if bad:
        sys.exit(f"error: unknown profile(s) {', '.join(bad)}: use {', '.join(profiles.BENCH)}")
    print(f"{'profile':<18} {'figure':<28} {'published':>9} {'measured':>9} {'range':>15} "
          f"{'error':>7} {'ideal':>7}  verdict")
    worst = 0.0
    for name in names:
        bench = profiles.BENCH[name]
        got = measure(profiles.PRESETS[name], bench, a.repeat)
        ideal = measure(Params(), bench, 1)[0]
        med = statistics.median(got)
        err = med / bench.published_ms - 1
        worst = max(worst, abs(err))
        what = (f"{bench.rules} {bench.op}s, ms/rule" if bench.measure == "per_rule"
                else f"{bench.rules} adds, lag ms")
        print(f"{name:<18} {what:<28} {bench.published_ms:>9.2f} {med:>9.2f} "
              f"{f'{min(got):.2f}-{max(got):.2f}':>15} {err:>+7.1%} {ideal:>7.2f}  "
              + ("within" if abs(err) <= TOLERANCE else "OUTSIDE") + f" +-{TOLERANCE:.0%}")
        print(f"{'':<18} source: {bench.source}")
        print(f"{'':<18} check: " + (
            "independent (a figure the profile was not built from)"
            if profiles.independent(name) else
            "consistency only (the profile was built from this figure: the emulation "
            "delivers the model's times; nothing about the model)"))
    print(f"({a.repeat} repeats each, a fresh bridge and proxy each; ideal: the same changes "
          "through the proxy with every delay 0, one repeat)")
    dependence(a.repeat)
    return 1 if worst > TOLERANCE else 0


if __name__ == "__main__":
    sys.exit(main())
