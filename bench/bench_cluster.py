"""What a link between servers costs against a local one, on servers made of
network namespaces on this machine (``tests/integration/namespace_servers``).

    sudo .venv/bin/python bench/bench_cluster.py --reps 3 [--servers 0,1,2,3]
                                                 [--parts run,drill,scale]

For each server count (0: no servers, the one-machine run; 1: every node on one
namespace server, reached over ssh; 2 and 3: the fabric split, leaf-spine
links crossing as VXLAN tunnels), medians over ``--reps``:

- run: the default ``emulator run`` (the traffic mix): one-way latency p50 and
  p99, Open vSwitch CPU per switch hop of a packet (all instances' CPU over
  the packets delivered x 3 switch hops), the machine's busy share, and the
  fidelity verdicts;
- drill: ``emulator drill --fault leaf1-spine3`` (a link between servers on 2
  and 3): the crossing flows' longest gap and loss window, detection, the
  calm gap of the other flows;
- scale: a 256-host fabric (``-P spines=8 -P leaves=64 -P hosts_per_leaf=4
  --workload none``) once per server count: build, reachable after start,
  teardown.
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tests.integration.namespace_servers import NamespaceServers  # noqa: E402

SCALE = ["-P", "spines=8", "-P", "leaves=64", "-P", "hosts_per_leaf=4"]


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 3) if xs else None


def emulator(args, servers, results, timeout=1800):
    argv = [sys.executable, "-m", "emulator", *args, "--results", results]
    if servers is not None:
        argv += ["--servers", servers.servers_arg, "--ssh-config", servers.ssh_config]
    r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-800:]}")
    return r


def newest(pattern):
    return max(glob.glob(pattern), key=os.path.getmtime)


def one_run(servers, work):
    emulator(["run"], servers, work)
    with open(newest(os.path.join(work, "*", "results.json"))) as f:
        doc = json.load(f)
    t = doc["traffic"]
    fid = t["fidelity"]
    cpu = fid["cpu"]
    ovs = cpu.get("ovs_vswitchd")
    hops = 3 * max(t["received_packets"], 1)
    return {"p50": t["latency_ms"]["p50"], "p99": t["latency_ms"]["p99"],
            "ovs_us_per_hop": None if ovs is None else ovs * t["counter_window_s"] / hops * 1e6,
            "busy": cpu.get("machine_busy"),
            "lost": t["dropped_packets"], "verdict": fid["verdict"],
            "reachable_s": doc["timings"]["time_to_reachable_s"]}


def one_drill(servers, work):
    emulator(["drill", "--fault", "leaf1-spine3", "--repeat", "1"], servers, work)
    with open(newest(os.path.join(work, "drill-*", "drill.json"))) as f:
        mode = json.load(f)["modes"][0]
    s = mode["summary"]
    return {"gap": s["longest_gap_ms"]["median"], "window": s["loss_window_ms"]["median"],
            "detect": s["detection_ms"]["median"], "calm": s["calm_ms"]["median"],
            "others_lost": s["non_crossing_lost_packets"],
            "verdict": mode["repeats"][0]["fidelity"]["verdict"]}


def one_scale(servers, work):
    emulator(["run", *SCALE, "--workload", "none"], servers, work, timeout=3600)
    with open(newest(os.path.join(work, "*", "results.json"))) as f:
        tm = json.load(f)["timings"]
    return {"build_s": tm.get("build_s"), "reachable_s": tm.get("time_to_reachable_s"),
            "teardown_s": tm.get("teardown_s")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--servers", default="0,1,2,3")
    ap.add_argument("--parts", default="run,drill,scale")
    a = ap.parse_args()
    parts = a.parts.split(",")
    out = {}
    for n in [int(x) for x in a.servers.split(",")]:
        servers = NamespaceServers(n).start() if n else None
        work = tempfile.mkdtemp(prefix=f"bench-cluster-{n}-")
        try:
            got = {}
            if "run" in parts:
                got["run"] = [one_run(servers, work) for _ in range(a.reps)]
            if "drill" in parts:
                got["drill"] = [one_drill(servers, work) for _ in range(a.reps)]
            if "scale" in parts:
                got["scale"] = one_scale(servers, work)
            out[n] = got
        finally:
            if servers is not None:
                servers.close()
        print(f"## {n} servers ({work})", flush=True)
        if "run" in got:
            rs = got["run"]
            print(f"run: latency p50 {med(r['p50'] for r in rs)} ms, p99 "
                  f"{med(r['p99'] for r in rs)} ms; OVS CPU "
                  f"{med(r['ovs_us_per_hop'] for r in rs)} us per switch hop; busy "
                  f"{med(r['busy'] for r in rs)}; lost {[r['lost'] for r in rs]}; reachable "
                  f"{med(r['reachable_s'] for r in rs)} s after start; "
                  f"{[r['verdict'] for r in rs]}", flush=True)
        if "drill" in got:
            ds = got["drill"]
            print(f"drill leaf1-spine3: longest gap {med(d['gap'] for d in ds)} ms, loss window "
                  f"{med(d['window'] for d in ds)} ms, detection {med(d['detect'] for d in ds)}"
                  f" ms, calm {med(d['calm'] for d in ds)} ms, others lost "
                  f"{[d['others_lost'] for d in ds]}; {[d['verdict'] for d in ds]}", flush=True)
        if "scale" in got:
            print(f"256 hosts: {got['scale']}", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
