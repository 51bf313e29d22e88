"""A multi-flow RoCEv2 traffic mix between host pairs, with per-flow accounting.

Model.  A mix is a list of ``Pair(src, dst, ...)`` where ``src``/``dst`` are
``Endpoint(place, intf, ip)``; a place is what ``iperf.popen`` accepts (a
Mininet host, a callable, a namespace name).  ``run_mix`` starts one
``python -m traffic recv`` per destination interface, waits until each has
its socket open (a ready file), starts every ``send`` at once, waits for
them, then lets the receivers stop after ``idle`` seconds of silence.  The
result maps each destination to its receiver summary, in which each flow
(``"<src ip>#<flow id>"``) gets the sender's exact ``sent_packets`` and
``dropped_packets = sent - distinct received``.

Flow ids run on across pairs (pair 0's QPs are flows 0..qps-1, the next
pair's follow) and QPN = 0x100 + flow id, so every QP of the mix has its own
UDP source port.
"""

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from traffic.iperf import popen

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Endpoint:
    place: object
    intf: str
    ip: str


@dataclass(frozen=True)
class Pair:
    src: Endpoint
    dst: Endpoint
    rate_bps: float = 10e6
    qps: int = 1
    frame_len: int = 1078
    dscp: int = 26


def _traffic(place, args, python):
    # cwd = the repository, so "-m traffic" imports this package in any host
    return popen(place, [python, "-m", "traffic", *args], cwd=str(ROOT))


def _finish(proc, timeout, what):
    try:
        out, err = proc.communicate(timeout=timeout)
    except Exception:
        proc.kill()
        proc.communicate(timeout=5)
        raise TimeoutError(f"{what} did not finish in {timeout} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{what} exit {proc.returncode}: {err.strip()[-500:]}")
    return out


def merge_sent(summary, sent):
    """Put the senders' counts into a receiver summary (exact drops)."""
    flows = {f["flow"]: f for f in summary["flows"]}
    for key, count in sent.items():
        f = flows.get(key)
        if f is None:          # not one packet arrived
            f = flows[key] = {"flow": key, "received_packets": 0, "duplicated_packets": 0,
                              "reordered_packets": 0, "total_disruptions": 0,
                              "disrupted_packets": 0, "longest_disruption": 0.0,
                              "longest_disruption_ms": 0.0}
        f["sent_packets"] = count
        f["dropped_packets"] = max(count - (f["received_packets"] - f["duplicated_packets"]), 0)
    summary["flows"] = sorted(flows.values(), key=lambda f: f["flow"])
    tot = summary["total"]
    tot["sent_packets"] = sum(sent.values())
    tot["dropped_packets"] = sum(f["dropped_packets"] for f in summary["flows"])
    return summary


def run_mix(pairs, duration, idle=1.0, gap_ms=10.0, python=None,
            ready_timeout=15.0):
    """Run the mix for ``duration`` s; returns {dst ip: receiver summary}."""
    python = python or sys.executable
    with tempfile.TemporaryDirectory(prefix="flt-mix-") as tmp:
        receivers = {}
        for ep in {p.dst for p in pairs}:
            ready = os.path.join(tmp, f"ready-{ep.ip}")
            out = os.path.join(tmp, f"recv-{ep.ip}.json")
            proc = _traffic(ep.place, ["recv", "--intf", ep.intf, "--ready-file", ready,
                                       "--idle", str(idle), "--gap-ms", str(gap_ms),
                                       "--deadline", str(duration + ready_timeout + 30),
                                       "--out", out], python)
            receivers[ep] = (proc, ready, out)
        end = time.monotonic() + ready_timeout
        for ep, (proc, ready, _) in receivers.items():
            while not os.path.exists(ready):       # wait on the condition, not a sleep
                if proc.poll() is not None or time.monotonic() > end:
                    raise RuntimeError(f"receiver on {ep.ip} did not start")
                time.sleep(0.02)
        senders = []
        first = 0                      # flow ids and QPNs run on across pairs
        for i, p in enumerate(pairs):
            out = os.path.join(tmp, f"sent-{i}.json")
            args = ["send", "--intf", p.src.intf, "--src-ip", p.src.ip, "--dst-ip", p.dst.ip,
                    "--qps", str(p.qps), "--first-flow", str(first),
                    "--first-qpn", str(0x100 + first), "--rate", str(p.rate_bps),
                    "--duration", str(duration), "--frame-len", str(p.frame_len),
                    "--dscp", str(p.dscp), "--out", out]
            senders.append((p, _traffic(p.src.place, args, python), out))
            first += p.qps
        sent = {}
        for p, proc, out in senders:
            _finish(proc, duration + 30, f"sender {p.src.ip}->{p.dst.ip}")
            with open(out) as f:
                for key, n in json.load(f)["per_flow"].items():
                    sent.setdefault(p.dst.ip, {})[key] = n
        results = {}
        for ep, (proc, _, out) in receivers.items():
            _finish(proc, duration + ready_timeout + 40, f"receiver {ep.ip}")
            with open(out) as f:
                results[ep.ip] = merge_sent(json.load(f), sent.get(ep.ip, {}))
        return results
