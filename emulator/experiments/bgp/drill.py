"""A drill's BGP side (``drill --control bgp``): what the routers did about a fault.

* ``dead_parts``: what a fault's injected events kill: interfaces (both ends
  of a cut link: a veth end set down takes its peer's carrier; the sending
  end of gray loss) and switches (crashed, or their control plane: its
  forwarding blackholed);
* ``verdict``: BGP's convergence, ``fabric.routing.fib.convergence`` over the
  routers' FIB events (until no FIB routes through a dead part, and which
  router was last); detection: the first carrier loss the FIB watch saw or
  the first BFD session bfdd logged down (its log's wall clock turned into
  CLOCK_MONOTONIC); the UPDATEs every router sent over the repeat (vtysh's
  counters before and after: the fault's and the restore's); and, for the
  switch-agent timing model, what the same changes would take if every FIB
  change cost a hardware table update (``HARDWARE.table_rate``, 200 per second:
  He et al. 2015; docs/bgp.md);
* ``classify``: a flow is *local* when its first switch is an end of the
  faulted link (or next to a crashed switch: it sees the fault itself) and
  *exposed* when one of its equal-cost paths crosses the fault (hash-threshold
  ECMP may move it when a group shrinks) even if its own path does not;
* ``settle``: before the next repeat, every session Established again and
  every router's FIB as the converged fabric has it.
"""

import time

from emulator.dataplane.faults import link_nodes, nic_of, parse_link
from emulator.dataplane.routed import bgp
from emulator.errors import RunFailed
from emulator.experiments.measure.paths import ecmp_span, link_ends
from emulator.fabric.routing.fib import FibState, expected_routes, missing_routes
from emulator.fabric.switch_agent import HARDWARE

SETTLE_TIMEOUT_S = 60.0
LINK_FAULTS = ("link_down", "loss_start", "corrupt_start")


def _ends(target, topo):
    """{(switch, interface)} of both switch ends of link ``target``, and the ends of
    side a and side b ({"a": .., "b": ..})."""
    (sw, port), other = parse_link(target, topo)
    a = (sw, port["intf"])
    b = None
    if port["peer_kind"] != "host":
        peer = next(s for s in topo["switches"] if s["name"] == other)
        b = (other, next(p["intf"] for p in peer["ports"] if p["port"] == port["peer_port"]))
    first = link_nodes(target)[0]
    if nic_of(topo).get(first, first) != sw and b is not None:
        a, b = b, a
    return {"a": [a] if a else [], "b": [b] if b else []}


def dead_parts(events, topo):
    """({(switch, interface)}, {switch}) the injected ``events`` kill (module docstring)."""
    dead_ends, dead_switches = set(), set()
    for e in events:
        kind, target = e["kind"], e["target"]
        if kind == "link_down":
            sides = _ends(target, topo)
            dead_ends |= set(sides["a"]) | set(sides["b"])
        elif kind in ("loss_start", "corrupt_start"):
            sides = _ends(target, topo)
            side = e.get("side", "a")
            dead_ends |= set(sides["a"] + sides["b"]) if side == "both" else set(sides[side])
        elif kind in ("switch_crash", "cp_crash"):
            dead_switches.add(target)
            for sw in topo["switches"]:
                for p in sw["ports"]:
                    if p["peer"] == target:
                        dead_ends.add((sw["name"], p["intf"]))
    return dead_ends, dead_switches


def updates(s):
    """UPDATE messages every router sent so far, in all."""
    return sum(bgp.updates_sent(s.net.frr).values())


def detection(s, t_fault_ns, t_end_ns):
    """(ms from the fault to the first sign of it, what it was) or (None, None): a
    carrier lost (the FIB watch's link events) or a BFD session gone down (bfdd)."""
    seen = []
    for ev in s.fib.events(t_fault_ns):
        if ev["kind"] == "link" and not ev["up"] and ev["t_ns"] < t_end_ns:
            seen.append((ev["t_ns"], f"carrier ({ev['switch']})"))
    offset_ns = time.time_ns() - time.monotonic_ns()      # wall clock -> monotonic
    for name, r in s.net.frr.routers.items():
        try:
            with open(r.path("bfdd.log"), errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        for t, _, old, new, reason in bgp.bfd_changes(text):
            t_ns = int(t * 1e9) - offset_ns
            if old == "up" and new == "down" and t_fault_ns <= t_ns < t_end_ns:
                seen.append((t_ns, f"BFD {reason or ''} ({name})".replace("  ", " ")))
    if not seen:
        return None, None
    t, how = min(seen)
    return round((t - t_fault_ns) / 1e6, 3), how


def hardware_fib_ms(conv):
    """The convergence if every FIB change took a hardware table update (serially, per
    router, after its last change was made): the slowest router's."""
    per_change = 1e3 / HARDWARE.table_rate
    worst = None
    for sw, ms in conv["per_switch"].items():
        if ms is None:
            continue
        t = ms + conv["fib_changes"].get(sw, 0) * per_change
        worst = t if worst is None else max(worst, t)
    return None if worst is None else round(worst, 3)


def verdict(s, injected, t_fault_ns, t_end_ns, updates_before):
    """The repeat's BGP figures (see the module docstring)."""
    dead_ends, dead_switches = dead_parts(
        [e for e in injected if e["t_ns"] < (t_end_ns or float("inf"))], s.topo)
    conv = s.fib.convergence(t_fault_ns, t_end_ns, dead_ends, dead_switches)
    detect_ms, how = detection(s, t_fault_ns, t_end_ns or float("inf"))
    sent = updates(s) - updates_before
    out = {"convergence_ms": conv["converged_ms"], "last_switch": conv["last_switch"],
           "per_switch": conv["per_switch"], "still": conv["still"],
           "fib_changes": conv["fib_changes"], "detection_ms": detect_ms, "detected_by": how,
           "updates_sent": sent, "hardware_fib_ms": hardware_fib_ms(conv),
           "dead_ends": sorted(f"{sw}:{i}" for sw, i in dead_ends),
           "dead_switches": sorted(dead_switches)}
    return out


def as_controller(v):
    """The verdict in the form the drill's summary reads of a controller's convergence."""
    if v["convergence_ms"] is None:
        return None
    detect = v["detection_ms"] if v["detection_ms"] is not None else 0.0
    return {"convergence_ms": v["convergence_ms"], "first_port_status_ms": detect,
            "after_detection_ms": round(v["convergence_ms"] - detect, 3),
            "port_events": sum(v["fib_changes"].values())}


def classify(path, events, topo):
    """(local, exposed) of a flow with ``path`` under the schedule's ``events``."""
    if not path or len(path) < 2:
        return False, False
    first = path[1].rsplit(":", 1)[0]
    local_switches, ends, nodes = set(), set(), set()
    for ev in events:
        if ev.action in ("cut", "flap", "loss", "restore", "loss_stop"):
            e = link_ends(ev.target, topo)
            ends |= e
            local_switches |= {n for n, _ in e}
        elif ev.action in ("crash", "cp_crash"):
            nodes.add(ev.target)
            local_switches |= {p["peer"] for sw in topo["switches"] if sw["name"] == ev.target
                               for p in sw["ports"]}
        elif ev.action == "restart":
            nodes.add(ev.target.partition(":")[0])
    span = ecmp_span(path, topo)
    hops = {tuple(h.rsplit(":", 1)) for h in span if ":" in h}
    span_nodes = {h.rsplit(":", 1)[0] for h in span}
    return first in local_switches, bool(hops & ends or span_nodes & nodes)


def restored(s):
    """[routes that differ] between every router's kernel and the converged fabric
    (``fabric.routing.fib.expected_routes``): empty once BGP has converged."""
    return missing_routes(expected_routes(s.topo), fib_now(s))


def fib_now(s):
    """{switch: {destination: sorted interfaces}} of the routers' kernels now (a fresh
    dump: the truth a repeat restores, whatever the replay of their events says)."""
    return {sw: _routes(st) for sw, st in s.fib.kernel().items()}


def _routes(st: FibState):
    return {dst: sorted(st.devs(dst) or []) for dst in st.routes}


def settle(s, timeout=SETTLE_TIMEOUT_S):
    """Every session Established again, every router's FIB as the converged fabric has
    it (each leaf's /24 by every shortest path)."""
    bgp.wait_established(s.net.frr, s.topo, timeout, s.spec.peering)
    deadline = time.monotonic() + timeout
    while True:
        diff = restored(s)
        if not diff:
            return
        if time.monotonic() > deadline:
            raise RunFailed(f"BGP: the routers' FIBs did not converge within {timeout:g} s "
                            f"({'; '.join(diff[:6])})")
        time.sleep(0.05)
