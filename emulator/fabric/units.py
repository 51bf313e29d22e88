"""Rates and durations with explicit units: ``"50Mbps"``, ``"1Gbps"``, ``"5ms"``.

A bare number is rejected on purpose: ``rate: 50`` could mean bits, bytes,
Mbit or Gbit, and a wrong guess makes every result wrong.
"""

import re

_UNITS = {
    "bps": 1, "bit": 1,
    "kbps": 10**3, "kbit": 10**3,
    "mbps": 10**6, "mbit": 10**6,
    "gbps": 10**9, "gbit": 10**9,
    "tbps": 10**12, "tbit": 10**12,
}
_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z/]+)\s*$")


def parse_rate(text):
    """Return the rate in bit/s; raise ValueError naming the accepted units."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise ValueError(
            f"rate {text!r} has no unit; write it as a string with a unit, "
            f"e.g. \"50Mbps\" or \"1Gbps\"")
    m = _RATE_RE.match(text)
    if not m:
        raise ValueError(f"rate {text!r} is not <number><unit>, e.g. \"50Mbps\"")
    unit = m.group(2).lower()
    if unit.endswith("/s"):
        unit = unit[:-2]
    if unit not in _UNITS:
        raise ValueError(
            f"rate {text!r} has unknown unit {m.group(2)!r}; "
            f"use one of bps, Kbps, Mbps, Gbps, Tbps")
    bps = float(m.group(1)) * _UNITS[unit]
    if bps < 1000:
        raise ValueError(f"rate {text!r} is below 1Kbps")
    if bps != int(bps):
        raise ValueError(f"rate {text!r} is not a whole number of bit/s")
    return int(bps)


def format_rate(bps):
    """Shortest exact form: 50000000 -> '50Mbps', 1500000 -> '1.5Mbps'."""
    for unit, scale in (("Tbps", 10**12), ("Gbps", 10**9), ("Mbps", 10**6), ("Kbps", 10**3)):
        if bps >= scale:
            value = bps / scale
            text = f"{value:.6f}".rstrip("0").rstrip(".")
            if float(text) * scale == bps:
                return f"{text}{unit}"
    return f"{int(bps)}bps"


_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(us|ms|s)\s*$")
_DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_duration(text):
    """Seconds of ``"500us"``, ``"5ms"``, ``"2s"``; ValueError without a unit."""
    m = _DURATION_RE.match(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{text!r}: a duration needs a unit, e.g. 2s, 200ms or 500us")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


ROCE_MTU = 4096          # RoCE path MTU of AI fabrics: 4 KiB of payload per packet


def link_mtu(roce_mtu=ROCE_MTU):
    """The IP MTU every fabric interface gets so frames of RoCE MTU ``roce_mtu`` fit.

    A RoCEv2 RDMA WRITE ONLY packet carries 62 bytes of IP/UDP/BTH/RETH/ICRC
    around its payload; 128 leave room, and 1500 stays the floor.
    """
    return max(1500, roce_mtu + 128)
