"""Probe receiver of the failover drill, run inside a host: ``python -m emulator.probe_recv``.

A thin wrapper of ``traffic.receiver.Receiver`` (not modified) that adds what
the drill needs: a ``--seen`` file rewritten each time a new flow appears (the
drill waits on it: "every probe flow is flowing"), and each flow's 1 ms
throughput timeline on the receiver's common t0 (CLOCK_MONOTONIC ns).
"""

import argparse
import json
import os
import socket
import sys

from traffic.receiver import Receiver


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m emulator.probe_recv")
    ap.add_argument("--intf", required=True)
    ap.add_argument("--deadline", type=float, required=True)
    ap.add_argument("--idle", type=float, default=0.5)
    ap.add_argument("--gap-ms", type=float, default=1.0)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--seen", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    seen = set()

    def on_packet(p, now):
        key = (p.src_ip, p.flow)
        if key not in seen:
            seen.add(key)
            tmp = a.seen + ".tmp"
            with open(tmp, "w") as f:
                json.dump(sorted(f"{socket.inet_ntoa(s)}#{n}" for s, n in seen), f)
            os.replace(tmp, a.seen)           # atomic: the drill never reads half a file
    with Receiver(a.intf, gap_threshold_ms=a.gap_ms) as rx:
        open(a.ready, "w").close()
        acct = rx.run(idle=a.idle, deadline=a.deadline, on_packet=on_packet)
    doc = acct.summary(timeline=False)
    doc["timelines"] = {k: fa.timeline for k, fa in acct.flows.items()}
    with open(a.out, "w") as f:
        json.dump(doc, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
