"""The largest aggregate load the default fabric carries faithfully (root).

The default fabric (4 spines x 4 leaves x 2 hosts) with every link at
``R``, the default mix (each host to the host at its position on the next
leaf, 4 QPs per connection at half the host rate: 8 x R/2 offered in all) for
``--seconds``, 4 KiB RoCE frames.  A load is *faithful* when the run's own
verdict says so: no frame lost outside a link's queue, no sender behind its
schedule, latency within the queues (emulator/experiments/measure/fidelity.py), and
nothing lost at all (these links are not oversubscribed).

For each aggregate load on ``--loads`` (Gbit/s), ``--repeats`` runs; a load
passes when every repetition is faithful and lossless.  Prints one line per
run and the largest load that passed.  Usage::

    sudo .venv/bin/python bench/bench_faithful_load.py [--loads 0.5,1,1.5,2]
         [--seconds 30] [--repeats 3]
"""

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def one(load_gbps, seconds, results):
    from emulator.dataplane.session import Session
    from emulator.experiments.workloads.mix import default_mix
    from emulator.fabric import presets
    rate = f"{load_gbps * 1e3 / 4:g}Mbps"          # 8 hosts x rate/2 = load
    fabric = presets.build("leaf-spine", {"host_rate": rate, "uplink_rate": rate})
    with Session(fabric, results_base=results) as s:
        t = default_mix(s, duration=seconds)
    fid = t["fidelity"]
    ok = fid["verdict"] == "faithful" and t["dropped_packets"] == 0
    return ok, t, fid


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loads", default="0.5,1,1.5,2", help="aggregate Gbit/s, comma list")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    loads = [float(x) for x in a.loads.split(",")]
    best = 0.0
    with tempfile.TemporaryDirectory(prefix="fl-bench-") as results:
        for load in loads:
            oks = []
            for r in range(a.repeats):
                ok, t, fid = one(load, a.seconds, results)
                oks.append(ok)
                lat = t["latency_ms"]
                print(f"{load:4.2f} Gbit/s rep {r + 1}: sent {t['sent_packets']} lost "
                      f"{t['dropped_packets']} emulation drops "
                      f"{fid['emulation_drops']['total']} latency p50/p99/max "
                      f"{lat['p50']}/{lat['p99']}/{lat['max']} ms, ovs-vswitchd "
                      f"{fid['cpu']['ovs_vswitchd']}, engine {fid['cpu']['traffic_engine']}, "
                      f"machine {fid['cpu']['machine_busy']} busy -> "
                      f"{'faithful' if ok else 'NOT faithful: ' + '; '.join(fid['reasons'])}",
                      flush=True)
            if all(oks):
                best = max(best, load)
            print(f"{load:4.2f} Gbit/s: {sum(oks)}/{len(oks)} faithful", flush=True)
    print(f"\nlargest aggregate load faithful in every repetition ({a.seconds:g} s runs, "
          f"{a.repeats} repeats): {best:g} Gbit/s" if best else "\nno load was faithful")
    return 0 if best else 1


if __name__ == "__main__":
    sys.exit(main())
