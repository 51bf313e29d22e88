"""All-pairs reachability, checked with real pings from every host namespace.

Each host pings every other host's address (one ICMP echo each, all hosts in
parallel); pairs that fail are retried until a deadline.  The condition the
run waits on is "every host pair answers", not a sleep.
"""

import subprocess
import time

from emulator.errors import RunFailed

PING_SCRIPT = ('for ip in "$@"; do if ping -n -q -c 1 -W {w} "$ip" >/dev/null 2>&1; '
               'then echo "ok $ip"; else echo "no $ip"; fi; done')


def ping_round(net, pairs, wait_s=0.5, timeout=60):
    """Ping each (src, dst) once; return the set of pairs that answered."""
    ip_of = {h["name"]: h["ip"] for h in net.topo["hosts"]}
    name_of = {v: k for k, v in ip_of.items()}
    by_src = {}
    for src, dst in pairs:
        by_src.setdefault(src, []).append(ip_of[dst])
    procs = {}
    for src, ips in by_src.items():
        argv = ["mnexec", "-a", str(net.hosts[src].pid), "sh", "-c",
                PING_SCRIPT.format(w=wait_s), "ping-all", *ips]
        procs[src] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
    ok = set()
    deadline = time.monotonic() + timeout
    for src, p in procs.items():
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise RunFailed(f"ping from {src} did not finish in {timeout}s")
        if p.returncode != 0:
            raise RunFailed(f"ping script in {src} exited {p.returncode}: {err.strip()}")
        for line in out.splitlines():
            verdict, ip = line.split()
            if verdict == "ok":
                ok.add((src, name_of[ip]))
    return ok


def wait_all_pairs(net, timeout=60.0, progress=None):
    """Wait until every ordered host pair answers; return (seconds, rounds).

    Raises RunFailed listing unreachable pairs if the deadline passes.
    """
    names = [h["name"] for h in net.topo["hosts"]]
    todo = {(a, b) for a in names for b in names if a != b}
    t0 = time.monotonic()
    rounds = 0
    while todo:
        rounds += 1
        todo -= ping_round(net, sorted(todo))
        if progress:
            progress(f"reachability: {len(names) * (len(names) - 1) - len(todo)}"
                     f"/{len(names) * (len(names) - 1)} host pairs")
        if todo and time.monotonic() - t0 > timeout:
            shown = ", ".join(f"{a}->{b}" for a, b in sorted(todo)[:6])
            raise RunFailed(f"{len(todo)} host pairs still unreachable after {timeout:.0f}s: "
                            f"{shown}")
    return time.monotonic() - t0, rounds
