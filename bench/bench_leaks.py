"""Do consecutive runs leak?  ``sudo .venv/bin/python bench/bench_leaks.py --runs 20``

Counts, before and after N runs of ``python -m emulator run`` (small fabric,
no traffic): root-namespace interfaces, distinct network namespaces (inodes of
``/proc/*/ns/net``), processes, and ovs-vswitchd's open file descriptors
(``/proc/PID/fd``); prints both and the time per run.  Also used by
tests/integration/test_hardening.py.
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from emulator.dataplane import runstate  # noqa: E402
from emulator.dataplane.cleanup import our_bridges, our_interfaces  # noqa: E402

SMALL = ["-P", "spines=1", "-P", "leaves=2", "-P", "hosts_per_leaf=1"]
NOTHING = {"bridges": [], "interfaces": [], "processes": [], "state": []}


def netns_inodes():
    inodes = set()
    for path in glob.glob("/proc/[0-9]*/ns/net"):
        try:
            inodes.add(os.stat(path).st_ino)
        except OSError:          # the process exited meanwhile
            pass
    return inodes


def vswitchd_fds():
    with open("/var/run/openvswitch/ovs-vswitchd.pid") as f:
        pid = int(f.read().strip())
    return len(os.listdir(f"/proc/{pid}/fd"))


KINDS = (b"mininet:", b"mnexec", b"-m\0controller", b"-m\0traffic", b"iperf3")


def user_processes():
    """PIDs of processes of the kinds a run starts (host shells, mnexec, the
    controller, traffic engines, iperf3), whoever started them.  Counting every
    process would count the machine's own comings and goings."""
    out = []
    for path in glob.glob("/proc/[0-9]*"):
        try:
            with open(path + "/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if any(k in cmd for k in KINDS):
            out.append(int(path.rsplit("/", 1)[1]))
    return out


def snapshot():
    """Machine-wide figures."""
    return {"interfaces": len(os.listdir("/sys/class/net")),
            "netns": len(netns_inodes()),
            "processes": len(user_processes()),
            "ovs_vswitchd_fds": vswitchd_fds()}


def diff(before, after):
    return {k: (before[k], after[k]) for k in before if before[k] != after[k]}


def leftovers(tag):
    """What run ``tag`` left: bridges, interfaces, processes, state directory."""
    return {"bridges": sorted(b for b, t in our_bridges().items() if t == tag),
            "interfaces": sorted(i for i, t in our_interfaces().items() if t == tag),
            "processes": sorted(runstate.processes_of(tag)),
            "state": [t for t in runstate.known_tags() if t == tag]}


def runs(n, results, fabric_args=SMALL, progress=None):
    """Run ``emulator run`` n times (checked); return the run tags."""
    tags = []
    for i in range(n):
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "emulator", "run", *fabric_args,
                            "--workload", "none", "--results", results],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"run {i + 1} exited {p.returncode}: {p.stderr[-500:]}")
        tags.append(re.search(r"== run ([0-9a-f]{4}):", p.stdout).group(1))
        if progress:
            progress(f"run {i + 1}/{n} ({tags[-1]}): {time.monotonic() - t0:.2f}s")
    return tags


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--results", default="/tmp/fabric-lab-bench-leaks")
    args = ap.parse_args()
    before = snapshot()
    t0 = time.monotonic()
    tags = runs(args.runs, args.results, progress=print)
    elapsed = time.monotonic() - t0
    after = snapshot()
    left = {t: leftovers(t) for t in tags if leftovers(t) != NOTHING}
    print(f"{args.runs} runs in {elapsed:.1f}s ({elapsed / args.runs:.2f}s per run)")
    print(f"{'figure':<18} {'before':>8} {'after':>8}")
    for k in before:
        print(f"{k:<18} {before[k]:>8} {after[k]:>8}")
    print(f"left behind by these runs: {left or 'nothing'}")
    others = runstate.known_tags()
    if others:
        print(f"note: other runs were active ({', '.join(others)}): machine-wide "
              "figures may include them")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
