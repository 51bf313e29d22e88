"""BFD on every inter-switch link of a running fabric (Open vSwitch's own BFD).

Model.  Each end of a switch-to-switch link runs a BFD session (RFC 5880,
asynchronous mode, detect multiplier 3) at ``interval_ms``: a session that
misses three intervals of its peer's packets goes down, tells the peer, and
the port's liveness follows it in Open vSwitch (``may_enable`` = carrier AND
BFD forwarding), so fast-failover buckets and select buckets that watch the
port skip it, and the port's PORT_STATUS loses its LIVE bit, which the
controller treats as dead.  That is how a *gray* failure (frames lost without
carrier loss, ``--fault LINK:loss:P``) is detected and routed around.

Received BFD packets are slow-pathed in ovs-vswitchd's main thread (one
upcall each): two per link per interval, so a short interval costs
forwarding capacity.
Sessions start at one-second intervals and only then negotiate the
configured one, so ``enable`` waits until every session forwards at the
requested interval, both ways (TX and RX: until the poll sequence has
finished, a session still detects on the slow intervals and misses a loss
for seconds).  Bridges are deleted at teardown with their BFD state.

Open vSwitch sends the control packets from its monitor thread, through the
userspace datapath's lock that the main thread holds while it forwards a
pass over every port: when a pass runs long, packets leave late, and the
daemon logs each one sent over 1.5 intervals after it was due ("long delay
of N ms").  ``LateSends`` reads those lines: a session whose peer sent late
for three intervals went down because of the machine, not the link.
"""

import os
import re
import time

from emulator.dataplane.ovs.instances import SYSTEM
from emulator.errors import ConfigError, RunFailed
from emulator.fabric.units import parse_duration


def parse_interval(text):
    """``--bfd``: milliseconds (``5``, ``5ms``, ``5x3``: Open vSwitch's multiplier is 3),
    2..1000; 1 ms flaps on this platform."""
    t = str(text).strip().lower()
    if t.endswith("x3"):
        t = t[:-2]
    try:
        ms = round(parse_duration(t + "ms" if t.isdigit() else t) * 1e3, 6)
    except ValueError:
        ms = 0
    if ms != int(ms) or not 2 <= ms <= 1000:
        raise ConfigError("--bfd", f"{text!r}: an interval of 2 to 1000 ms, e.g. 5ms "
                                   "(1 ms sessions flap on this platform)")
    return int(ms)


def interfaces(topo):
    """Every switch interface facing another switch (both ends of every such link)."""
    return [p["intf"] for sw in topo["switches"] for p in sw["ports"]
            if p["peer_kind"] != "host"]


LATE_SEND = re.compile(r"\|bfd(?:\([^)]*\))?\|\w+\|(\S+): long delay of (\d+)ms "
                       r"\(expected (\d+)ms\) sending BFD control message")


def late_sends(text, intfs):
    """Open vSwitch's log lines on BFD control packets it sent late -> [(interface,
    ms after due)] of the interfaces ``intfs``."""
    return [(m.group(1), int(m.group(2))) for m in LATE_SEND.finditer(text)
            if m.group(1) in intfs]


class LateSends:
    """What the Open vSwitches carrying a fabric logged about BFD sent late since
    ``mark``: each daemon's log, read on from where it ended then (a log
    written on another server is not read)."""

    def __init__(self, topo, net=None):
        self.intfs = set(interfaces(topo))
        ovses = net.ovses() if net is not None else [SYSTEM]
        self.paths = sorted({p for p in (getattr(o, "log_path", lambda: None)()
                                         for o in ovses) if p})
        self.offsets = {}

    def mark(self):
        self.offsets = {p: _size(p) for p in self.paths}

    def read(self):
        """{"late_sends", "max_ms", "interfaces"} since ``mark``, None if no log."""
        found, read_any = [], False
        for path in self.paths:
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets.get(path, 0))
                    found += late_sends(f.read().decode(errors="replace"), self.intfs)
                read_any = True
            except OSError:
                continue
        if not read_any:
            return None
        return {"late_sends": len(found), "max_ms": max((d for _, d in found), default=0),
                "interfaces": len({i for i, _ in found})}


def unsettled(what, interval_ms, late, when="with no fault and no probe traffic"):
    """The error of BFD sessions that kept going down ``when`` (by default on an idle
    fabric); ``late``: ``LateSends.read()`` over that time."""
    told = (f"; Open vSwitch sent {late['late_sends']} control packets late, up to "
            f"{late['max_ms']} ms after due" if late and late.get("late_sends") else "")
    return (f"{what}: BFD sessions at {interval_ms} ms kept going down {when}{told}. "
            "This machine's Open vSwitch cannot keep that "
            "interval (docs/failover.md); use a longer one, e.g. --bfd "
            f"{max(20, 2 * interval_ms)}")


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def parse_show(text):
    """``ovs-appctl bfd/show`` -> {interface: {"forwarding", "state", "tx_ms"}}."""
    out = {}
    for block in re.split(r"^---- ", text, flags=re.M)[1:]:
        name = block.split(" ----", 1)[0].strip()
        fwd = re.search(r"Forwarding:\s*(\w+)", block)
        state = re.search(r"Local Session State:\s*(\w+)", block)
        tx = re.search(r"TX Interval:\s*Approx\s*(\d+)ms", block)
        rx = re.search(r"RX Interval:\s*Approx\s*(\d+)ms", block)
        out[name] = {"forwarding": bool(fwd and fwd.group(1) == "true"),
                     "state": state.group(1) if state else None,
                     "tx_ms": int(tx.group(1)) if tx else None,
                     "rx_ms": int(rx.group(1)) if rx else None}
    return out


def show(net=None):
    """Every BFD session of the Open vSwitches carrying ``net`` (default: the
    machine's own)."""
    out = {}
    for ovs in net.ovses() if net is not None else [SYSTEM]:
        out.update(parse_show(ovs.appctl("bfd/show", timeout=10)))
    return out


def enable(topo, interval_ms, timeout=30.0, progress=lambda m: None, net=None):
    """Turn BFD on for every inter-switch interface; wait until all forward at
    ``interval_ms``.  Returns the seconds it took.  ``net``: the FabricNet, whose
    switches may be in several Open vSwitches (default: all in the machine's)."""
    intfs = interfaces(topo)
    if not intfs:
        return 0.0
    by_ovs = {}
    for sw in topo["switches"]:
        ovs = net.ovs(sw["name"]) if net is not None else SYSTEM
        for p in sw["ports"]:
            if p["peer_kind"] != "host":
                by_ovs.setdefault(ovs, []).extend(
                    ["--", "set", "interface", p["intf"], "bfd:enable=true",
                     f"bfd:min_tx={interval_ms}", f"bfd:min_rx={interval_ms}"])
    progress(f"BFD on {len(intfs)} switch ports at {interval_ms} ms")
    t0 = time.monotonic()
    for ovs, args in by_ovs.items():
        ovs.vsctl(*args[1:], timeout=60)
    pending = intfs
    while pending:
        sessions = show(net)
        pending = [i for i in intfs if not (sessions.get(i, {}).get("forwarding")
                                            and sessions[i]["tx_ms"] == interval_ms
                                            and sessions[i]["rx_ms"] == interval_ms)]
        if pending and time.monotonic() - t0 > timeout:
            raise RunFailed(f"BFD sessions not up at {interval_ms} ms after {timeout:.0f}s: "
                            + ", ".join(pending[:6]))
        if pending:
            time.sleep(0.05)
    return time.monotonic() - t0
