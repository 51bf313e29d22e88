"""iperf3 background traffic in given namespaces, with parsed JSON results.

Model.  Where a command runs is a *place*: a Mininet host (anything with
``popen(args, **kw)``), a callable ``place(args) -> Popen``, or a network
namespace name (run through ``ip netns exec``).  ``Iperf3Server`` starts
``iperf3 -s -1`` (serve one test, then exit) and waits until it listens;
``run_client`` runs a TCP or UDP client and returns ``summarize``'s dict.
"""

import json
import subprocess
import time


def popen(place, args, **extra):
    """Start ``args`` in ``place`` with stdout/stderr piped (``extra``: Popen kw)."""
    kw = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **extra}
    if hasattr(place, "popen"):
        return place.popen(list(args), **kw)
    if callable(place):
        return place(list(args))
    if place:
        return subprocess.Popen(["ip", "netns", "exec", place, *args], **kw)
    return subprocess.Popen(list(args), **kw)


def _communicate(proc, timeout):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=5)
        raise TimeoutError(f"iperf3 did not finish in {timeout} s") from None
    return out, err


class Iperf3Server:
    """``iperf3 -s -1`` in ``place``; ``stop`` kills it if still running."""

    def __init__(self, place, port=5201, bind=None, ready_timeout=5.0):
        args = ["iperf3", "-s", "-1", "-p", str(port), "--forceflush"]
        if bind:
            args += ["-B", bind]
        self.proc = popen(place, args)
        # iperf3 prints "Server listening on <port>" once its socket is bound
        end = time.monotonic() + ready_timeout
        line = ""
        while "listening" not in line:
            if time.monotonic() > end or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"iperf3 server did not start: {line.strip()}")
            line = self.proc.stdout.readline()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def client_args(server_ip, port=5201, udp=False, bitrate=None, duration=5.0,
                parallel=1, length=None, dscp=None):
    """The iperf3 client command line (JSON output)."""
    args = ["iperf3", "-c", server_ip, "-p", str(port), "-J", "-t", f"{duration:g}",
            "-P", str(parallel)]
    if udp:
        args += ["-u", "-b", str(int(bitrate or 1e6))]
    elif bitrate:
        args += ["-b", str(int(bitrate))]
    if length:
        args += ["-l", str(length)]
    if dscp is not None:
        args += ["--dscp", str(dscp)]
    return args


def run_client(place, server_ip, timeout=None, **kw):
    """Run an iperf3 client to completion; return ``summarize`` of its JSON."""
    args = client_args(server_ip, **kw)
    proc = popen(place, args)
    out, err = _communicate(proc, timeout or kw.get("duration", 5.0) + 15)
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        raise RuntimeError(f"iperf3 client: exit {proc.returncode}: {err.strip()}") from None
    if proc.returncode != 0 or "error" in doc:
        raise RuntimeError(f"iperf3 client: {doc.get('error', err.strip())}")
    return summarize(doc)


def summarize(doc):
    """The numbers that matter from an iperf3 ``-J`` document (TCP or UDP)."""
    end = doc["end"]
    proto = doc["start"]["test_start"]["protocol"]
    if proto == "UDP":
        s = end["sum"]
        return {"protocol": "UDP", "bps": s["bits_per_second"],
                "packets": s["packets"], "lost_packets": s["lost_packets"],
                "lost_percent": s["lost_percent"], "jitter_ms": s["jitter_ms"],
                "seconds": s["seconds"]}
    sent, recv = end["sum_sent"], end["sum_received"]
    return {"protocol": "TCP", "bps": recv["bits_per_second"],
            "sent_bps": sent["bits_per_second"], "retransmits": sent.get("retransmits", 0),
            "bytes": recv["bytes"], "seconds": recv["seconds"]}
