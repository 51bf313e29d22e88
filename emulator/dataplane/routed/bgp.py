"""What the routers' BGP says: sessions, time to Established, UPDATEs, a leaf's table.

Two sources: bgpd's own log (``bgp log-neighbor-changes``: one ``%ADJCHANGE``
line per session going Up or Down, microsecond timestamps of the wall clock)
tells when each session came up, read without disturbing the daemons; vtysh's
JSON (``show bgp neighbors json``) gives each session's state and message
counters.  A session is named by its router and the peer as the router knows
it: the peer's address (numbered) or the interface (unnumbered).
"""

import json
import re
import time

from emulator.errors import RunFailed
from emulator.fabric.routing.frrconf import fabric_ports
from lab.modes import Peering

ADJCHANGE = re.compile(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d+)?) BGP: .*%ADJCHANGE: "
                       r"neighbor ([^\s(]+)(?:\([^)]*\))? in vrf \S+ (Up|Down)")
BFD_CHANGE = re.compile(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d+)?) BFD: .*state-change: "
                        r"\[mhop:\S+ peer:(\S+) local:\S+ .*\] (\S+) -> (\S+)"
                        r"(?: reason:(\S+))?")


def log_time(stamp):
    """Seconds since the epoch of an FRR log timestamp (local time, ``.%f`` optional)."""
    whole, _, frac = stamp.partition(".")
    return time.mktime(time.strptime(whole, "%Y/%m/%d %H:%M:%S")) + \
        (float("0." + frac) if frac else 0.0)


def expected(topo, peering=Peering.NUMBERED):
    """{(switch, peer key): (peer switch, its port)} of every session the plan makes."""
    out = {}
    for sw in topo["switches"]:
        for p in fabric_ports(sw):
            key = p["intf"] if peering == Peering.UNNUMBERED else p["peer_ip"]
            out[(sw["name"], key)] = (p["peer"], p["peer_port"])
    return out


def adjacencies(text):
    """[(epoch s, peer, up)] of a bgpd log's %ADJCHANGE lines, in order."""
    out = []
    for line in text.splitlines():
        m = ADJCHANGE.match(line)
        if m:
            out.append((log_time(m.group(1)), m.group(2), m.group(3) == "Up"))
    return out


def bfd_changes(text):
    """[(epoch s, peer, from state, to state, reason)] of a bfdd log's state changes."""
    out = []
    for line in text.splitlines():
        m = BFD_CHANGE.match(line)
        if m:
            out.append((log_time(m.group(1)), m.group(2), m.group(3), m.group(4),
                        m.group(5)))
    return out


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def up_since(frr):
    """{(switch, peer): epoch s it came up} of the sessions up now, from the logs."""
    out = {}
    for name, r in frr.routers.items():
        for t, peer, up in adjacencies(_read(r.path("bgpd.log"))):
            if up:
                out[(name, peer)] = t
            else:
                out.pop((name, peer), None)
    return out


def wait_established(frr, topo, timeout, peering=Peering.NUMBERED, interval=0.05):
    """Wait until every planned session is up (both ends' logs); {(switch, peer): epoch s
    it came up}.  RunFailed naming the sessions still down past ``timeout`` s."""
    want = expected(topo, peering)
    deadline = time.monotonic() + timeout
    while True:
        up = up_since(frr)
        missing = sorted(k for k in want if k not in up)
        if not missing:
            return {k: up[k] for k in want}
        if time.monotonic() > deadline:
            names = ", ".join(f"{sw}->{want[(sw, peer)][0]}" for sw, peer in missing[:8])
            raise RunFailed(f"BGP: {len(missing)} of {len(want)} sessions not Established "
                            f"after {timeout:g} s ({names}); see the bgpd logs under "
                            f"{frr.routers[missing[0][0]].dir}")
        time.sleep(interval)


def neighbors(router):
    """``show bgp neighbors json`` of one router: {peer: its document}."""
    try:
        return json.loads(router.vtysh("show bgp neighbors json") or "{}")
    except ValueError as e:
        raise RunFailed(f"vtysh on {router.name}: not JSON ({e})") from None


def sessions(frr, topo, started, peering=Peering.NUMBERED):
    """Every planned session: state, time to Established (from ``started``, epoch s),
    messages sent and received."""
    want = expected(topo, peering)
    up = up_since(frr)
    docs = {name: neighbors(r) for name, r in frr.routers.items()}
    out = []
    for (sw, peer), (peer_sw, peer_port) in sorted(want.items()):
        doc = docs.get(sw, {}).get(peer, {})
        stats = doc.get("messageStats", {})
        t = up.get((sw, peer))
        out.append({"switch": sw, "peer": peer, "peer_switch": peer_sw,
                    "peer_port": peer_port, "state": doc.get("bgpState", "unknown"),
                    "local_as": doc.get("localAs"), "remote_as": doc.get("remoteAs"),
                    "established_after_s": round(t - started, 3) if t else None,
                    "updates_sent": stats.get("updatesSent"),
                    "updates_received": stats.get("updatesRecv")})
    return out


def updates_sent(frr):
    """{switch: UPDATE messages sent on all its sessions so far}."""
    return {name: sum(d.get("messageStats", {}).get("updatesSent", 0)
                      for d in neighbors(r).values() if isinstance(d, dict))
            for name, r in frr.routers.items()}


def table(router, prefix):
    """The router's BGP table for ``prefix`` (vtysh's text, as an engineer reads it)."""
    return router.vtysh(f"show bgp ipv4 unicast {prefix}").rstrip()


def fib_route(router, prefix):
    """The router's kernel route for ``prefix`` as zebra shows it (``show ip route``)."""
    return router.vtysh(f"show ip route {prefix}").rstrip()
