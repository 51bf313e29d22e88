"""The drill's probes: which flows, at which rate, on which paths (no traffic here).

``--probes paths`` (the default): the first host of every leaf probes the
host at its position on the next leaf, one flow per equal-cost path between
the two leaves; each flow's UDP source port (from its QPN) is chosen by
tracing candidates through the installed flows (``ofproto/trace``, hop by
hop), so every leaf uplink and every spine downlink on those paths carries
one probe flow.  ``--probes hosts``: every host, ``--qps`` hashed flows.
The rate is one packet per ``--resolution``, lowered (and said so) when the
probes would offer more than half of the calibrated budget: a drill at the
edge of the budget measures the machine (a stalled Open vSwitch main thread
delays BFD past its detection time and takes healthy links down).
Paths are lists ``["h1:eth0", "leaf1:eth3", "spine2:eth1", "leaf2:eth1", "h2"]``:
the port each node is left by, then the host reached.
"""


from emulator.errors import ConfigError, RunFailed
from emulator.experiments.measure import budget
from emulator.experiments.measure.paths import choose, ecmp_width, trace_path
from emulator.experiments.workloads.workload import rail_pairs
from traffic.roce.frames import udp_sport


def parse_rails(text):
    """``all`` or a comma list of rail numbers (from 1) -> None or a set."""
    if text in (None, "all"):
        return None
    try:
        rails = {int(x) for x in text.split(",") if x.strip()}
    except ValueError:
        rails = set()
    if not rails or min(rails) < 1:
        raise ConfigError("--rails", f"{text!r}: all, or rail numbers from 1 (e.g. 2 or 1,2)")
    return rails


PROBE_SETS = ("paths", "hosts")
HALF_BUDGET = 0.5           # the probes' default load: at most this share of the budget
PATH_QPN_BASE = 0x4000      # --probes paths: candidate QPNs per pair from here
PATH_CANDIDATES = 32


def probe_pairs(topo, qps, rails=None, per_leaf=False):
    """[(src host view, dst host view, first flow id, qpns)] across leaves, per rail.

    The pairs are ``workload.rail_pairs``: on every rail (``rails``, numbers
    from 1, restricts them), each host to the host at its position on the
    next leaf of that rail; the views carry the rail's port.  ``per_leaf``:
    only the first host of every leaf (per rail).  ``qpns``: ``qps``
    consecutive QP numbers, one flow (UDP source port) each.
    """
    n_rails = max(len(h["ports"]) for h in topo["hosts"])
    if rails is not None and max(rails) > n_rails:
        raise ConfigError("--rails", f"rail {max(rails)}: the hosts have {n_rails} port(s)")
    pairs = rail_pairs(topo, rails)
    if per_leaf:
        seen, first = set(), []
        for src, dst in pairs:
            key = (src["ports"][0]["switch"], src["ports"][0]["port"])
            if key not in seen:
                seen.add(key)
                first.append((src, dst))
        pairs = first
    return [(s, d, i * qps, tuple(range(0x100 + i * qps, 0x100 + (i + 1) * qps)))
            for i, (s, d) in enumerate(pairs)]


def planned_flows(topo, probes, qps, rails=None):
    """[(src, dst, flows)] the drill will probe, before anything is built: with
    ``paths``, one flow per equal-cost path of each pair (at most ``qps``)."""
    if probes == "hosts":
        return [(s, d, len(q)) for s, d, _, q in probe_pairs(topo, qps or 4, rails)]
    out = []
    for s, d, _, _ in probe_pairs(topo, 1, rails, per_leaf=True):
        width = max(ecmp_width(topo, s["ports"][0]["switch"], d["ports"][0]["switch"]), 1)
        out.append((s, d, min(width, qps) if qps else width))
    return out


def probe_rate(topo, planned, frame_len, resolution_ms, budget_doc, pps=None):
    """(pps per flow, note or None): one packet per ``resolution_ms``, lowered so the
    probes offer at most half of ``budget_doc``'s switch-hop packets/s; ``pps`` as given."""
    if pps is not None:
        return pps, None
    want = 1e3 / resolution_ms
    if budget_doc is None:
        return want, None
    hop_flows = sum(n * budget.path_hops(topo, s, d) for s, d, n in planned)
    cap = HALF_BUDGET * budget_doc["hop_pps"] / max(hop_flows, 1)
    if want <= cap:
        return want, None
    got = max(1.0, float(int(cap)))
    return got, (f"probe rate lowered to {got:g} pps per flow ({1e3 / got:.2f} ms "
                 f"resolution, asked {resolution_ms:g} ms): {hop_flows} flow-hops at "
                 f"{want:g} pps would take more than half of this machine's budget "
                 f"({budget_doc['hop_pps'] / 1e3:.1f}k switch-hop packets/s); --pps sets "
                 "the rate anyway")


def path_pairs(s, planned):
    """Pairs (as ``probe_pairs``) whose QPNs take distinct paths, and {flow key: path}:
    candidate QPNs are traced (``ofproto/trace``, hop by hop) until each pair has its
    planned number of distinct complete paths (or the candidates run out)."""
    pairs, paths, flow = [], {}, 0
    for i, (src, dst, want) in enumerate(planned):
        hp, dp = src["ports"][0], dst["ports"][0]
        traced = {}
        for c in range(PATH_CANDIDATES):
            qpn = PATH_QPN_BASE + i * PATH_CANDIDATES + c
            traced[qpn] = trace_path(s.topo, src["name"], hp, dp, udp_sport(qpn, qpn), s.net)
            if len(choose(traced)) >= want:
                break
        chosen = list(choose(traced).items())[:want]
        if not chosen:
            raise RunFailed(f"no probe from {src['name']} reaches {dst['name']} "
                            "(ofproto/trace): the fabric is not routed")
        pairs.append((src, dst, flow, tuple(q for q, _ in chosen)))
        for k, (_, path) in enumerate(chosen):
            paths[f"{hp['ip']}#{flow + k}"] = path
        flow += len(chosen)
    return pairs, paths


