#!/usr/bin/env python3
"""Build/teardown benchmark of the default preset, side by side with plain Mininet.

For each repeat, in one process and one after the other:
  * this emulator: time to a fully reachable fabric (controller start, build,
    all-pairs ping) and its build part alone, and time to tear down;
  * plain Mininet on the same topology (same hosts, switches, links, OVS
    userspace bridges in secure mode, link rates via TCLink/HTB): time of
    ``Mininet.build() + start()`` and of ``stop()``.
Prints medians and the ratios.  Run as root:

    sudo .venv/bin/python bench/bench_fabric.py [--repeats 5] [-P spines=4 ...]
    sudo .venv/bin/python bench/bench_fabric.py --hosts 8,32,64,128,256 --repeats 1
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.dataplane.runstate import RUN_ENV, RunState  # noqa: E402
from emulator.dataplane.session import Session, require_root  # noqa: E402
from emulator.fabric import presets  # noqa: E402


def ours(fabric, results):
    t0 = time.monotonic()
    s = Session(fabric, results_base=results)
    s.__enter__()
    reachable = time.monotonic() - t0
    build = s.net.timings["build_s"]
    t1 = time.monotonic()
    s.__exit__(None, None, None)
    return {"reachable_s": reachable, "build_s": build, "teardown_s": time.monotonic() - t1}


def plain_mininet(fabric):
    """The same topology built the ordinary Mininet way."""
    from functools import partial

    from mininet.link import TCLink
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import OVSSwitch
    from mininet.topo import Topo

    setLogLevel("critical")      # TCLink's HTB quantum warnings are noise here
    state = RunState.create()     # names and processes carry a tag: `clean` finds them
    os.environ[RUN_ENV] = state.tag
    letters = {"leaf": "l", "spine": "s", "superspine": "x"}
    names, counters = {}, {}
    for n in fabric.switches:
        counters[n.kind] = counters.get(n.kind, 0) + 1
        names[n.name] = f"fl{state.tag}{letters[n.kind]}{counters[n.kind]}"

    class Fabric(Topo):
        def build(self):
            for h in fabric.hosts:
                self.addHost(h.name)
            for i, sw in enumerate(fabric.switches):
                self.addSwitch(names[sw.name], dpid="%016x" % (i + 1))
            for lk in fabric.links:
                a, b = (names.get(lk.a.node, lk.a.node), names.get(lk.b.node, lk.b.node))
                self.addLink(a, b, bw=lk.rate_bps / 1e6)

    switch = partial(OVSSwitch, datapath="user", failMode="secure",
                     protocols="OpenFlow13,OpenFlow15")
    net = None
    try:
        t0 = time.monotonic()
        net = Mininet(topo=Fabric(), switch=switch, link=TCLink, controller=None,
                      autoSetMacs=True, build=False)
        net.build()
        net.start()
        build = time.monotonic() - t0
        t1 = time.monotonic()
        net.stop()
        net = None
        return {"build_s": build, "teardown_s": time.monotonic() - t1}
    finally:
        if net is not None:
            net.stop()
        state.release()
        os.environ.pop(RUN_ENV, None)


def shape(hosts):
    """leaf-spine parameters for a fabric of ``hosts`` hosts (the default one for 8)."""
    if hosts <= 8:
        return {}
    leaves = max(2, hosts // 4)
    return {"hosts_per_leaf": "4", "leaves": str(leaves), "spines": str(min(8, leaves))}


def curve(sizes, mininet_max, repeats):
    """Build, reachable and teardown times per fabric size: the cost curve."""
    print(f"{'hosts':>5} {'switches':>8} {'build s':>8} {'reachable s':>11} "
          f"{'teardown s':>10} {'mininet build s':>15}")
    with tempfile.TemporaryDirectory() as results:
        for n in sizes:
            fabric = presets.build("leaf-spine", shape(n))
            rows = [ours(fabric, results) for _ in range(repeats)]
            mn = (statistics.median(plain_mininet(fabric)["build_s"] for _ in range(repeats))
                  if len(fabric.hosts) <= mininet_max else None)
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            print(f"{len(fabric.hosts):>5} {len(fabric.switches):>8} {med['build_s']:>8.2f} "
                  f"{med['reachable_s']:>11.2f} {med['teardown_s']:>10.2f} "
                  f"{'-' if mn is None else f'{mn:.2f}':>15}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("-P", "--param", action="append", default=[])
    ap.add_argument("--hosts", default=None, metavar="N[,N...]",
                    help="the cost curve instead: fabrics of these many hosts (4 per leaf, "
                         "up to 8 spines), e.g. 8,32,64,128,256")
    ap.add_argument("--mininet-max", type=int, default=64,
                    help="with --hosts: build plain Mininet up to this many hosts")
    args = ap.parse_args()
    require_root()
    if args.hosts:
        curve([int(x) for x in args.hosts.split(",")], args.mininet_max, args.repeats)
        return
    fabric = presets.build("leaf-spine", presets.parse_assignments(args.param))
    print(f"fabric {fabric.name}: {len(fabric.hosts)} hosts, {len(fabric.switches)} switches, "
          f"{len(fabric.links)} links; {args.repeats} repeats, alternating")
    rows = {"ours": [], "mininet": []}
    with tempfile.TemporaryDirectory() as results:
        for i in range(args.repeats):
            rows["ours"].append(ours(fabric, results))
            rows["mininet"].append(plain_mininet(fabric))
            o, m = rows["ours"][-1], rows["mininet"][-1]
            print(f"  #{i + 1}: ours build {o['build_s']:.2f}s reachable {o['reachable_s']:.2f}s "
                  f"teardown {o['teardown_s']:.2f}s | mininet build {m['build_s']:.2f}s "
                  f"teardown {m['teardown_s']:.2f}s")

    def med(side, key):
        return statistics.median(r[key] for r in rows[side])
    print("\nmedians:")
    print(f"  emulator: time to fully reachable fabric {med('ours', 'reachable_s'):.2f}s "
          f"(build {med('ours', 'build_s'):.2f}s), teardown {med('ours', 'teardown_s'):.2f}s")
    print(f"  plain Mininet (build+start, no controller, no reachability): "
          f"{med('mininet', 'build_s'):.2f}s, stop {med('mininet', 'teardown_s'):.2f}s")
    print(f"  ratio build mininet/ours: {med('mininet', 'build_s') / med('ours', 'build_s'):.1f}x;"
          f" teardown mininet/ours: "
          f"{med('mininet', 'teardown_s') / med('ours', 'teardown_s'):.1f}x; "
          f"mininet build / our time-to-reachable: "
          f"{med('mininet', 'build_s') / med('ours', 'reachable_s'):.1f}x")


if __name__ == "__main__":
    main()
