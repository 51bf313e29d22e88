"""This machine's traffic budget: the search, the arithmetic, the cache key (pure).

The emulator forwards every frame in software: ovs-vswitchd's one thread
for all switch ports, the kernel for every veth and shaper, the traffic
engine for every host.  ``emulator calibrate`` measures the largest packet
rate that stays faithful through 1 and 3 switch hops (no link limiting it);
from the 3-hop rate follows the budget in *switch-hop packets per second*,
which is what a fabric spends: a frame crossing leaf-spine-leaf costs three.

Before a run, ``check`` compares the load a run will offer, in the same
unit, with the cached budget and says whether it fits.
"""

import os
import platform

# Offered loads above this share of the measured budget get a warning: the
# budget was measured with nothing else running and one stream.
SAFETY = 0.8


def search(trial, start_bps, max_bps, steps=4):
    """Largest rate for which ``trial(rate) -> bool`` holds: double, then bisect.

    ``trial`` returns True when the rate was carried faithfully.  A failed
    trial is tried once more before it counts: one scheduling stall of a
    shared machine (a sender 20 ms behind once) must not set the budget.
    Returns (best faithful rate or 0, [(rate, ok), ...] in the order tried).
    """
    tried = []

    def confirmed(rate):
        for _ in range(2):
            ok = trial(rate)
            tried.append((rate, ok))
            if ok:
                return True
        return False
    good, bad = 0.0, None
    rate = start_bps
    while rate <= max_bps:
        ok = confirmed(rate)
        if not ok:
            bad = rate
            break
        good = rate
        rate *= 2
    if bad is None:
        return good, tried
    for _ in range(steps):
        mid = (good + bad) / 2 if good else bad / 2
        if confirmed(mid):
            good = mid
        else:
            bad = mid
    return good, tried


def median(values):
    """The middle of ``values`` (the lower middle of an even count: a budget errs low)."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def spread_note(label, found, factor=2.0):
    """A warning when the searches for one path disagreed by more than ``factor``
    (``found``: their rates, in any unit), else None."""
    low, high = min(found), max(found)
    if high == 0:
        return f"{label}: no search found a faithful rate"
    if low > 0 and high / low <= factor:
        return None
    return (f"{label}: the searches found {', '.join(f'{x / 1e3:.1f}k' for x in found)}, "
            f"more than {factor:g}x apart: this machine's speed varies (a shared host's "
            "neighbours, stalls of the scheduler); the median is cached, and calibrating "
            "again when the host is quieter gives a steadier figure")


def unless_stolen(trial, steal_limit, attempts=4):
    """``trial(rate) -> (ok, steal)`` as ``rate -> ok``, where a failure during which
    the hypervisor took at least ``steal_limit`` of the CPU time is repeated (at
    most ``attempts`` trials in all).

    On a shared host the latency of a trial follows the time the hypervisor
    stole from this virtual machine (about 1 ms of p99 per % of steal, measured):
    such a failure is the neighbours', not the emulator's rate.
    """
    def judged(rate):
        for _ in range(attempts):
            ok, steal = trial(rate)
            if ok or steal < steal_limit:
                return ok
        return False
    return judged


def trial_ok(sent, received, fidelity_doc, latency_limit_ms, quantile):
    """A calibration trial passes: nothing lost, faithful, and the ``quantile`` of
    latency within ``latency_limit_ms`` (no queue building up in the emulator)."""
    lat = (fidelity_doc.get("latency_ms") or {}).get(quantile)
    return (sent > 0 and received >= sent and fidelity_doc["verdict"] == "faithful"
            and lat is not None and lat <= latency_limit_ms)


def hop_pps(streams):
    """Switch-hop packets per second of ``streams``: [(rate_bps, frame_len, hops)]."""
    return sum(rate / (frame_len * 8) * hops for rate, frame_len, hops in streams)


def budget_doc(frame_len, one_hop_pps, three_hop_pps, key):
    """The calibration result as cached."""
    return {"key": key, "frame_len": frame_len,
            "one_hop_pps": round(one_hop_pps), "three_hop_pps": round(three_hop_pps),
            "hop_pps": round(max(one_hop_pps, 3 * three_hop_pps)),
            # the largest aggregate of leaf-spine-leaf traffic that stayed faithful
            "faithful_bps_3hop": round(three_hop_pps * frame_len * 8)}


def check(streams, budget):
    """(fits, message) for a run offering ``streams`` against a cached ``budget``."""
    offered = hop_pps(streams)
    gbps = sum(rate for rate, _, _ in streams) / 1e9
    if budget is None:
        return True, (f"offered {gbps:.3g} Gbit/s; this machine's budget is not known: "
                      "`emulator calibrate` measures it")
    limit = SAFETY * budget["hop_pps"]
    share = offered / max(budget["hop_pps"], 1)
    if offered > limit:
        return False, (f"offered {gbps:.3g} Gbit/s = {offered / 1e3:.1f}k switch-hop "
                       f"packets/s, {share:.0%} of this machine's measured budget "
                       f"({budget['hop_pps'] / 1e3:.1f}k, `emulator calibrate`): expect an "
                       "emulator-bound result; lower the rates, use fewer hosts or "
                       "bigger frames")
    return True, (f"offered {gbps:.3g} Gbit/s, {share:.0%} of this machine's "
                  "measured budget"
                  + (f" (measured with {budget['frame_len']}-byte frames)"
                     if streams and budget["frame_len"] != streams[0][1] else ""))


def machine_key(ovs_version, datapath, frame_len, cpu_model=None, ncpu=None):
    """What a calibration is valid for: this machine, its OVS, datapath, frame size."""
    if cpu_model is None:
        cpu_model = "unknown"
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        cpu_model = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
    return "|".join(str(x) for x in (platform.node(), cpu_model, ncpu or os.cpu_count(),
                                     platform.release(), ovs_version, datapath, frame_len))


def _switch_graph(topo):
    """{node: set(neighbours)} over the fabric's links (hosts and switches)."""
    adj = {}
    for link in topo["links"]:
        a, b = link["a"].split(":")[0], link["b"].split(":")[0]
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set()).add(a)
    return adj


def path_hops(topo, src, dst):
    """Switches on a shortest path from host ``src`` to host ``dst`` (dicts or names)."""
    src = src["name"] if isinstance(src, dict) else src
    dst = dst["name"] if isinstance(dst, dict) else dst
    adj = _switch_graph(topo)
    seen, frontier, depth = {src}, [src], 0
    while frontier:
        if dst in frontier:
            return max(depth - 1, 0)
        nxt = []
        for n in frontier:
            for m in adj.get(n, ()):
                if m not in seen:
                    seen.add(m)
                    nxt.append(m)
        frontier, depth = nxt, depth + 1
    return 0


def collective_streams(topo, frame_len):
    """A collective's load: every host sending at its link rate over the longest path."""
    hops = longest_path_hops(topo)
    return [(h["ports"][0]["rate_bps"], frame_len, hops) for h in topo["hosts"]]


def longest_path_hops(topo):
    """Switches on the longest shortest path between two hosts (the fabric's diameter)."""
    hosts = [h["name"] for h in topo["hosts"]]
    if len(hosts) < 2:
        return 0
    first = hosts[0]
    far = max(hosts[1:], key=lambda h: path_hops(topo, first, h))
    return max(path_hops(topo, far, h) for h in hosts if h != far)
