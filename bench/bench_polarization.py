#!/usr/bin/env python3
"""Hash polarization on a three-tier fabric: one ECMP seed everywhere vs per switch.

OVS picks a select-group bucket by ranking hash(bucket id, hash of the fields
and the seed).  With the same seed on every switch a spine ranks its buckets
exactly as the leaf below it did, so the flows a leaf sent to a spine through
bucket j all leave that spine through its bucket j: half of the spine's
super-spine uplinks idle (2 buckets per tier).  Per-switch seeds decorrelate
the tiers.  For each mode, the default RoCEv2 mix runs with many QPs and the
spines' uplink loads are printed (max/mean, idle uplinks).  Run as root:

    sudo .venv/bin/python bench/bench_polarization.py [--duration 3] [--qps 16]
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.dataplane.session import Session, require_root  # noqa: E402
from emulator.experiments.workloads.mix import default_mix  # noqa: E402
from emulator.fabric import presets  # noqa: E402

FABRIC = {"pods": "2", "spines_per_pod": "2", "leaves_per_pod": "2", "hosts_per_leaf": "2",
          "superspines": "2", "superspine_attach": "all"}


def measure(seed, duration=3.0, qps=16, results=None):
    """Spine uplink loads of the default mix with ``seed`` (None: per switch)."""
    fabric = presets.build("three-tier", FABRIC)
    with Session(fabric, results_base=results, seed=seed) as s:
        res = default_mix(s, duration=duration, qps=qps, load=0.25)
    spines = res["spine_uplinks"]
    idle = sum(1 for sp in spines for u in sp["loads"] if u["tx_bytes"] < 1000)
    busy = [sp for sp in spines if sp["max_over_mean"] is not None]
    worst = max(sp["max_over_mean"] for sp in busy) if busy else None
    return {"seed": seed, "spines": spines, "idle_uplinks": idle,
            "uplinks": sum(len(sp["loads"]) for sp in spines), "worst_max_over_mean": worst,
            "dropped": res["dropped_packets"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--qps", type=int, default=16)
    args = ap.parse_args()
    require_root()
    with tempfile.TemporaryDirectory() as results:
        for label, seed in (("same seed 7 on every switch", 7), ("per-switch seeds", None)):
            r = measure(seed, args.duration, args.qps, results)
            print(f"{label}: {r['idle_uplinks']}/{r['uplinks']} spine->super-spine uplinks idle, "
                  f"worst spine max/mean {r['worst_max_over_mean']}")
            for sp in r["spines"]:
                print(f"  {sp['spine']}: " + "  ".join(
                    f"->{u['peer']} {u['mbps']:.2f} Mbit/s" for u in sp["loads"]))


if __name__ == "__main__":
    main()
