"""CPU per packet of the traffic engine while pacing, against a bare sendmmsg loop.

Root; about a minute.  Two namespaces joined by a veth pair (MTU for 4 KiB
RoCE frames, no shaper, no OVS: only the sender's cost is compared).  In each
repetition, side by side:

(a) bare: the same pre-built 4170-byte frames in 64-frame sendmmsg batches,
    flat out, no patching -- the floor of sending from Python here;
(b) engine, paced: ``traffic.engine`` sending ``--streams`` streams (4 QPs
    each) at ``--rate`` in all for ``--seconds``, every frame patched (PSN,
    timestamp, ICRC) and paced on the engine's tick;
(c) engine, paced, with a receiver: the same plus the accounting receiver in
    the other namespace (CPU per sent+received frame).

CPU is the process's user+system time (``getrusage``) over the sending
window, divided by frames.  Medians over ``--repeats``; the ratio (b)/(a) is
taken per repetition.  Usage::

    sudo .venv/bin/python bench/bench_engine_cpu.py [--rate 400e6] [--repeats 5]
"""

import argparse
import resource
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from traffic.engine import Engine  # noqa: E402
from traffic.nic.netns import entered  # noqa: E402
from traffic.nic.sender import Sender, make_flows  # noqa: E402
from traffic.roce.frames import frame_len_for_mtu  # noqa: E402

FRAME = frame_len_for_mtu(4096)


def sh(*cmd):
    subprocess.run(cmd, check=True, timeout=20, capture_output=True)


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def bare(ns, intf, dst_mac, seconds):
    """us of CPU per frame: pre-built frames, 64-frame sendmmsg batches, flat out.

    The frames are the engine's (same addresses, same MAC), so the peer's
    kernel does the same work for both: a frame to a foreign MAC would be
    dropped at once and make the floor look cheaper than it is.
    """
    with entered(ns):
        s = Sender(intf, batch=64)
    flows = make_flows("02:00:00:00:00:01", dst_mac, "10.9.0.1", "10.9.0.2",
                       qps=4, frame_len=FRAME)
    for i in range(64):
        s.iov[i].iov_len = flows[i % 4].template.fill(s.slots[i], i, 0)
    n, c0, end = 0, cpu(), time.monotonic() + seconds
    while time.monotonic() < end:
        s._sendmmsg(64)
        n += 64
    us = (cpu() - c0) * 1e6 / n
    s.close()
    return us


def engine(ns_a, ns_b, dst_mac, rate, streams, seconds, receive):
    plan = {"duration": seconds, "frame_len": FRAME, "idle": 0.2,
            "streams": [{"netns": ns_a, "intf": "fla", "src_ip": "10.9.0.1",
                         "dst_ip": "10.9.0.2", "dst_mac": dst_mac, "rate_bps": rate / streams,
                         "qps": 4, "first_flow": 4 * i, "first_qpn": 0x100 + 4 * i}
                        for i in range(streams)],
            "receivers": [{"netns": ns_b, "intf": "flb"}] if receive else []}
    e = Engine(plan)
    try:
        doc = e.run()
    finally:
        e.close()
    return doc["engine"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=400e6, help="paced bit/s in all")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    tag = secrets.token_hex(2)
    na, nb = f"flb{tag}a", f"flb{tag}b"
    sh("ip", "netns", "add", na)
    sh("ip", "netns", "add", nb)
    try:
        sh("ip", "-n", na, "link", "add", "fla", "mtu", "4224", "type", "veth",
           "peer", "name", "flb", "netns", nb, "mtu", "4224")
        sh("ip", "-n", na, "addr", "add", "10.9.0.1/24", "dev", "fla")
        sh("ip", "-n", nb, "addr", "add", "10.9.0.2/24", "dev", "flb")
        sh("ip", "-n", na, "link", "set", "fla", "up")
        sh("ip", "-n", nb, "link", "set", "flb", "up")
        mac = subprocess.run(["ip", "-n", nb, "-br", "link", "show", "flb"], check=True,
                             timeout=10, capture_output=True, text=True).stdout.split()[2]
        pa, pb = f"/run/netns/{na}", f"/run/netns/{nb}"
        rows = []
        for r in range(a.repeats):
            b = bare(pa, "fla", mac, a.seconds)
            tx = engine(pa, pb, mac, a.rate, a.streams, a.seconds, receive=False)
            trx = engine(pa, pb, mac, a.rate, a.streams, a.seconds, receive=True)
            rows.append((b, tx["cpu_us_per_packet"], trx["cpu_us_per_packet"],
                         tx["sent_packets"] / a.seconds, tx["skipped_packets"]))
            print(f"rep {r + 1}: bare {b:.2f} us/frame | engine paced {rows[-1][1]:.2f} "
                  f"({rows[-1][1] / b:.2f}x) at {rows[-1][3] / 1e3:.1f} kpps, skipped "
                  f"{rows[-1][4]} | with receiver {rows[-1][2]:.2f} us/frame event",
                  flush=True)
        med = lambda i: statistics.median(x[i] for x in rows)  # noqa: E731
        ratio = statistics.median(x[1] / x[0] for x in rows)
        print(f"\n{FRAME}-byte frames, {a.streams} streams x 4 QPs, {a.rate / 1e6:g} Mbit/s "
              f"paced, medians of {a.repeats}:")
        print(f"  bare sendmmsg loop (flat out):  {med(0):.2f} us CPU per frame")
        print(f"  engine, paced, send only:       {med(1):.2f} us per frame  "
              f"({ratio:.2f}x the bare loop)")
        print(f"  engine, paced, with receiver:   {med(2):.2f} us per frame sent or received")
    finally:
        subprocess.run(["ip", "netns", "del", na], timeout=20)
        subprocess.run(["ip", "netns", "del", nb], timeout=20)


if __name__ == "__main__":
    main()
