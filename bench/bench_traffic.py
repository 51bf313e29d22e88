"""Benchmark of the traffic engine's sender (root; about a minute).

Inside a private namespace with a veth pair, pinned to one core:
(a) ``Sender.run`` unpaced (templates patched per packet: PSN, timestamp,
    ICRC) with sendmmsg batches, and with one ``send`` per frame;
(b) a bare raw socket sending the same pre-built bytes (``send`` per frame,
    and sendmmsg batches without patching) -- the ceiling of Python here;
(c) pacing error at 10/40/100 Mbit/s: bytes sent / elapsed vs the target.
Medians over ``--repeats`` runs.  Usage::

    sudo .venv/bin/python bench/bench_traffic.py [--seconds 1] [--repeats 5]
"""

import argparse
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from traffic.nic.sender import Sender, make_flows  # noqa: E402

MACS = ("02:00:00:00:00:01", "02:00:00:00:00:02")


def sh(*cmd):
    subprocess.run(cmd, check=True, timeout=20, capture_output=True)


def pps(stats):
    return stats.packets / stats.seconds


def bare_send(ifname, frame, seconds):
    """pps of ``send`` of the same bytes on a raw socket."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    s.bind((ifname, 0))
    n, end = 0, time.monotonic() + seconds
    start = time.monotonic()
    while True:
        for _ in range(256):
            s.send(frame)
        n += 256
        if time.monotonic() >= end:
            break
    el = time.monotonic() - start
    s.close()
    return n / el


def bare_sendmmsg(sender, frame, seconds):
    """pps of sendmmsg batches of the same bytes, no per-packet patching."""
    for slot, io in zip(sender.slots, sender.iov):
        slot[:len(frame)] = frame
        io.iov_len = len(frame)
    n, start = 0, time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        sender._sendmmsg(sender.batch)
        n += sender.batch
    return n / (time.monotonic() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--frame-len", type=int, default=1078)
    ap.add_argument("--cpu", type=int, default=1)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_traffic: needs root (namespace, raw socket)")
    from pyroute2 import netns
    tag = secrets.token_hex(2)
    ns, ia, ib = f"flt-bench-{tag}", f"flt{tag}ba", f"flt{tag}bb"
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "-n", ns, "link", "add", ia, "type", "veth", "peer", "name", ib)
        sh("ip", "-n", ns, "link", "set", ia, "up")
        sh("ip", "-n", ns, "link", "set", ib, "up")
        netns.setns(ns)
        os.sched_setaffinity(0, {a.cpu})
        flows = make_flows(*MACS, "10.0.0.1", "10.0.0.2", qps=4, frame_len=a.frame_len)
        frame = flows[0].template.frame(0)
        rows = {}
        with Sender(ia) as mm, Sender(ia, use_sendmmsg=False) as one:
            for _ in range(a.repeats):
                rows.setdefault("sender sendmmsg (patch+ICRC)", []).append(
                    pps(mm.run(flows, duration=a.seconds)))
                rows.setdefault("sender send/frame (patch+ICRC)", []).append(
                    pps(one.run(flows, duration=a.seconds)))
                rows.setdefault("bare raw socket send/frame", []).append(
                    bare_send(ia, frame, a.seconds))
                rows.setdefault("bare sendmmsg, same bytes", []).append(
                    bare_sendmmsg(mm, frame, a.seconds))
            print(f"# frame {a.frame_len} B, one core (cpu {a.cpu}), veth, "
                  f"{a.repeats} x {a.seconds:g} s, median [min..max]")
            for name, vals in rows.items():
                print(f"{name:34s} {statistics.median(vals) / 1e3:8.1f} kpps  "
                      f"[{min(vals) / 1e3:.1f}..{max(vals) / 1e3:.1f}]")
            print("# pacing: achieved vs target (sender side, 2 s runs, burst 8)")
            for mbps in (10, 40, 100):
                errs = []
                for _ in range(a.repeats):
                    st = mm.run(flows, rate_bps=mbps * 1e6, burst=8, duration=2.0)
                    errs.append((st.bytes * 8 / st.seconds - mbps * 1e6) / (mbps * 1e6))
                print(f"{mbps:4d} Mbit/s  error median {statistics.median(errs) * 100:+.2f}%"
                      f"  [{min(errs) * 100:+.2f}%..{max(errs) * 100:+.2f}%]")
    finally:
        subprocess.run(("ip", "netns", "del", ns), check=True, timeout=20)


if __name__ == "__main__":
    main()
