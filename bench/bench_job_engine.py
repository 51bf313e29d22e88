"""CPU per packet of the job engine (a training job in one process) against the mix engine.

Root; about half a minute with the defaults.  ``--hosts`` namespaces on one
Linux bridge (veths with the MTU of 4 KiB RoCE frames, no shaper, no OVS:
only the traffic side's cost is compared).  In each repetition, on the same
namespaces and at the same per-host rate:

(a) mix: ``traffic.engine`` (``python -m traffic engine``), every host
    sending ``--qps`` QPs to the next host at ``--rate`` for ``--seconds``,
    every host's receiver accounting what arrives;
(b) job: ``traffic.jobs.job`` (``python -m traffic job``), ``--ranks-per-host``
    ranks per host; per iteration each local rank's DP group (one rank per
    host) runs a non-blocking ring AllReduce over every host, overlapping 1 ms
    of compute, then waits: RC transport, ACKs, per-QP queues, the ranks'
    programs, sized so that the network part lasts about ``--seconds``.

CPU is each engine's own user+system time (``getrusage``) over its loop,
divided by the data frames it sent plus those it received (ACKs are
overhead, not packets).  Medians over ``--repeats``; the ratio job/mix is
taken per repetition (the goal is at most 2).  Usage::

    sudo .venv/bin/python bench/bench_job_engine.py [--hosts 4] [--rate 40e6] [--repeats 3]
"""

import argparse
import secrets
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from traffic.engine import Engine  # noqa: E402
from traffic.jobs.config import JOB_DEFAULTS, load_job  # noqa: E402
from traffic.jobs.job import JobEngine  # noqa: E402
from traffic.roce.frames import frame_len_for_mtu  # noqa: E402


def sh(*cmd):
    subprocess.run(cmd, check=True, timeout=20, capture_output=True)


def lan(tag, n, mtu):
    """``n`` host namespaces on a bridge; returns [(netns path, intf, ip, mac)]."""
    br = f"flj{tag}br"
    sh("ip", "netns", "add", br)
    sh("ip", "-n", br, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", br, "link", "set", "br0", "up")
    hosts = []
    for i in range(n):
        ns, intf = f"flj{tag}h{i}", f"flj{tag}h{i}"
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "add", intf, "mtu", str(mtu), "type", "veth", "peer",
           "name", f"p{i}", "netns", br, "mtu", str(mtu))
        sh("ip", "-n", br, "link", "set", f"p{i}", "master", "br0", "up")
        ip = f"10.79.0.{i + 1}"
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", intf)
        sh("ip", "-n", ns, "link", "set", intf, "up")
        mac = subprocess.run(["ip", "-n", ns, "-br", "link", "show", intf], check=True,
                             timeout=10, capture_output=True, text=True).stdout.split()[2]
        hosts.append((f"/run/netns/{ns}", intf, ip, mac))
    return hosts


def mix(hosts, a):
    n = len(hosts)
    plan = {"duration": a.seconds, "frame_len": frame_len_for_mtu(a.mtu), "idle": 0.2,
            "streams": [{"netns": ns, "intf": intf, "src_ip": ip,
                         "dst_ip": hosts[(i + 1) % n][2], "dst_mac": hosts[(i + 1) % n][3],
                         "rate_bps": a.rate, "qps": a.qps, "first_flow": a.qps * i,
                         "first_qpn": 0x100 + a.qps * i}
                        for i, (ns, intf, ip, _) in enumerate(hosts)],
            "receivers": [{"netns": ns, "intf": intf} for ns, intf, _, _ in hosts]}
    e = Engine(plan)
    try:
        return e.run()["engine"]
    finally:
        e.close()


def job(hosts, a, iterations=4):
    n, k = len(hosts), a.ranks_per_host
    # each host sends k x 2(n-1)/n x size per iteration at the rate
    size = int(a.rate * a.seconds / 8 / (k * 2 * (n - 1) / n) / iterations)
    progs = []
    for r in range(n * k):
        g, ops = r % k, []
        for it in range(iterations):
            cid = f"it{it}.dp{g}"
            ops += [{"op": "coll", "id": cid, "kind": "allreduce", "group": "DP",
                     "members": [h * k + g for h in range(n)], "bytes": size,
                     "blocking": False},
                    {"op": "compute", "ns": 1_000_000}, {"op": "wait", "ids": [cid]}]
        progs.append(ops)
    cfg = {"endpoints": [{"netns": ns, "intf": intf, "ip": ip, "name": f"h{i}",
                          "rate_bps": a.rate} for i, (ns, intf, ip, _) in enumerate(hosts)],
           "ranks": [r // k for r in range(n * k)], "programs": progs, "mtu": a.mtu,
           "qps": a.qps, "tick_ms": a.tick_ms}
    e = JobEngine(load_job(cfg))
    try:
        e.prepare()
        doc = e.run()
    finally:
        e.close()
    assert doc["job"]["wrong"] == 0 and doc["job"]["aborted"] is None, doc["job"]
    eff = statistics.median(c["efficiency"] for c in doc["collectives"])
    return dict(doc["engine"], efficiency=eff)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--ranks-per-host", type=int, default=2)
    ap.add_argument("--rate", type=float, default=40e6, help="bit/s per host")
    ap.add_argument("--qps", type=int, default=1, help="QPs per connection")
    ap.add_argument("--mtu", type=int, default=4096, help="RoCE MTU (payload bytes)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--tick-ms", type=float, default=JOB_DEFAULTS["tick_ms"],
                    help="the job engine's tick (the mix engine keeps its own, 2 ms)")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    tag = secrets.token_hex(2)
    try:
        hosts = lan(tag, a.hosts, frame_len_for_mtu(a.mtu) + 100)
        rows = []
        for r in range(a.repeats):
            m, j = mix(hosts, a), job(hosts, a)
            rows.append((m["cpu_us_per_packet"], j["cpu_us_per_packet"],
                         j["cpu_us_per_packet"] / m["cpu_us_per_packet"]))
            print(f"rep {r + 1}: mix {m['cpu_us_per_packet']:.2f} us/packet "
                  f"({m['sent_packets']} sent, {m['received_packets']} received, "
                  f"{m['wakeups']} wake-ups) | job {j['cpu_us_per_packet']:.2f} us/packet "
                  f"({j['data_frames_sent']} sent, {j['data_frames_received']} received, "
                  f"{j['control_frames']} ACK/CNP, {j['wakeups']} wake-ups, lateness p99 "
                  f"{j['lateness_ms']['p99']} ms, busbw/link {j['efficiency']:.3f}) "
                  f"| ratio {rows[-1][2]:.2f}", flush=True)
        med = lambda i: statistics.median(x[i] for x in rows)  # noqa: E731
        print(f"\n{a.hosts} hosts x {a.ranks_per_host} ranks, {a.rate / 1e6:g} Mbit/s per "
              f"host, RoCE MTU {a.mtu}, {a.qps} QP/connection, job tick {a.tick_ms:g} ms, "
              f"medians of {a.repeats}:")
        print(f"  mix engine:  {med(0):.2f} us CPU per packet (sent + received)")
        print(f"  job engine:  {med(1):.2f} us CPU per packet (sent + received)")
        print(f"  job / mix:   {med(2):.2f}x (goal: at most 2x)")
    finally:
        for ns in [f"flj{tag}h{i}" for i in range(a.hosts)] + [f"flj{tag}br"]:
            subprocess.run(["ip", "netns", "del", ns], timeout=20, capture_output=True)


if __name__ == "__main__":
    main()
