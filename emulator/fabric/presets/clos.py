"""More Clos presets: three-tier, dual-link, dual-ToR, dual-plane, rail-only, rail-optimized.

Each returns the same ``Fabric`` a file would (``show --yaml`` writes it out)
and takes an ``oversubscription`` parameter (docs/fabrics.md has pictures).
Naming: hosts ``h1..``, leaves ``leaf1..``, spines ``spine1..``,
super-spines ``superspine1..``, numbered fabric-wide in order of pod/plane;
labels carry the structure: ``pod`` (three-tier), ``plane`` (spine planes,
rails); numbers from 1.  Host ports are ``eth0..``; on a switch, the ports
facing lower tiers come first (``eth1..``), then its uplinks.

* three-tier: ``pods`` pods of ``leaves_per_pod`` leaves and
  ``spines_per_pod`` spines (full mesh inside the pod), joined by
  ``superspines``.  ``superspine_attach=plane`` (default): super-spines are
  split into ``spines_per_pod`` planes; spine j of every pod connects to every
  super-spine of plane j (spines_per_pod must divide superspines).
  ``superspine_attach=all``: every spine connects to every super-spine.
* dual-link: every leaf has two uplinks, to one spine (``spines=1``, two
  parallel links) or to two (``spines=2``: link 1 to spine1, link 2 to
  spine2), rates ``primary_rate`` / ``secondary_rate``.
  ``mode=load-balancing``: ECMP over both; ``mode=active-standby``: link 2 is
  ``role: standby`` (a fast-failover [primary, standby] on each side).
* dual-tor (Alibaba HPN non-stacked dual-ToR): every host has one NIC with
  two ports, one IP and one MAC (``bond``), port 1 to ToR A and port 2 to
  ToR B of its pair; ``mode`` active-active or active-standby.
* dual-plane (Alibaba HPN): dual-tor with ``planes=2``: ToR A of every pair
  uplinks only to plane-1 spines, ToR B only to plane-2 spines; ``planes=1``
  is the single-plane fabric with the same switches and ToR capacity (each
  ToR uplinks to every spine).
* rail-only (Wang et al. 2023; ``multi-plane`` is its former name, kept):
  every host has ``planes`` NICs, NIC i-1 (``eth<i-1>``) on plane (rail) i;
  each plane is its own leaf-spine; planes meet only inside hosts, through
  their HB domain (``hb_rate`` per GPU, the data plane's ``links.hb``;
  addressing gives hosts /32 routes: traffic for another rail leaves
  through that rail's NIC).
* rail-optimized (DGX SuperPOD, DeepSeek-V3 / Baidu AIPod style): the same
  hosts, NICs and rail leaves, every leaf uplinked to every one of
  ``spines`` shared spines: any NIC reaches any NIC through the network.
"""

from emulator.errors import ConfigError
from emulator.fabric.model import STANDBY, Endpoint, Fabric, Link, Node
from emulator.fabric.presets.params import Param, rate_for_ratio, resolve_params


def _rates(*extra):
    return (Param("host_rate", "rate", "40Mbps", doc="host <-> leaf link rate"),) + extra


THREE_TIER = (
    Param("pods", "int", 2, 1, 16, "pods (leaves + spines each)"),
    Param("spines_per_pod", "int", 2, 1, 16, "spines in each pod"),
    Param("leaves_per_pod", "int", 2, 1, 32, "leaves in each pod"),
    Param("hosts_per_leaf", "int", 2, 1, 32, "hosts on each leaf"),
    Param("superspines", "int", 4, 1, 32, "super-spine switches"),
    Param("superspine_attach", "choice", "plane", doc="plane: spine j -> super-spines of "
          "plane j; all: every spine -> every super-spine", choices=("plane", "all")),
) + _rates(
    Param("uplink_rate", "rate", "40Mbps", doc="leaf <-> spine link rate"),
    Param("spine_uplink_rate", "rate", "40Mbps", doc="spine <-> super-spine link rate"),
    Param("oversubscription", "float", None, 0.01, 100, "leaf down:up, sets uplink_rate"),
    Param("spine_oversubscription", "float", None, 0.01, 100,
          "spine down:up, sets spine_uplink_rate"),
)


def param_values(schema, v):
    return tuple((p.name, v[p.name]) for p in schema if v[p.name] is not None)


def hosts_on_leaves(leaves, H, host_rate, first_host=1, host_port="eth0"):
    """Hosts h<first>.. with H per leaf (ports eth1..ethH of each leaf); nodes, links."""
    nodes, links = [], []
    k = first_host
    for leaf in leaves:
        for port in range(1, H + 1):
            nodes.append(Node(f"h{k}", "host"))
            links.append(Link(Endpoint(f"h{k}", host_port), Endpoint(leaf, f"eth{port}"),
                              host_rate))
            k += 1
    return nodes, links


def three_tier(**given):
    """Pods of leaf-spine joined by a super-spine layer (Baidu AIPod style)."""
    v = resolve_params("three-tier", THREE_TIER, given)
    P, S, L, H, X = (v[k] for k in ("pods", "spines_per_pod", "leaves_per_pod",
                                     "hosts_per_leaf", "superspines"))
    by_plane = v["superspine_attach"] == "plane"
    if by_plane and X % S:
        raise ConfigError("preset three-tier", f"superspines={X} is not a multiple of "
                          f"spines_per_pod={S} (superspine_attach=plane)")
    per_spine = X // S if by_plane else X
    rate_for_ratio("three-tier", v, given, "uplink_rate", "oversubscription",
                   H * v["host_rate"], S)
    rate_for_ratio("three-tier", v, given, "spine_uplink_rate", "spine_oversubscription",
                   L * v["uplink_rate"], per_spine)
    leaves = [f"leaf{i}" for i in range(1, P * L + 1)]
    nodes, links = hosts_on_leaves(leaves, H, v["host_rate"])
    nodes = [Node(n.name, "host", pod=(i // (L * H)) + 1) for i, n in enumerate(nodes)]
    nodes += [Node(name, "leaf", pod=i // L + 1) for i, name in enumerate(leaves)]
    nodes += [Node(f"spine{(p - 1) * S + j}", "spine", pod=p, plane=j if by_plane else None)
              for p in range(1, P + 1) for j in range(1, S + 1)]
    nodes += [Node(f"superspine{x}", "superspine",
                   plane=(x - 1) // per_spine + 1 if by_plane else None)
              for x in range(1, X + 1)]
    for p in range(1, P + 1):
        for l in range(1, L + 1):
            for j in range(1, S + 1):
                links.append(Link(Endpoint(f"leaf{(p - 1) * L + l}", f"eth{H + j}"),
                                  Endpoint(f"spine{(p - 1) * S + j}", f"eth{l}"),
                                  v["uplink_rate"]))
    for p in range(1, P + 1):
        for j in range(1, S + 1):
            targets = (range((j - 1) * per_spine + 1, j * per_spine + 1) if by_plane
                       else range(1, X + 1))
            for m, x in enumerate(targets, start=1):
                down = p if by_plane else (p - 1) * S + j
                links.append(Link(Endpoint(f"spine{(p - 1) * S + j}", f"eth{L + m}"),
                                  Endpoint(f"superspine{x}", f"eth{down}"),
                                  v["spine_uplink_rate"]))
    name = f"three-tier-{P}p{S}s{L}l{H}h{X}x"
    return Fabric(name, tuple(nodes), tuple(links), param_values(THREE_TIER, v))


DUAL_LINK = (
    Param("spines", "int", 2, 1, 2, "1: both uplinks to one spine; 2: one to each spine"),
    Param("leaves", "int", 2, 1, 64, "leaf switches"),
    Param("hosts_per_leaf", "int", 2, 1, 64, "hosts on each leaf"),
    Param("mode", "choice", "load-balancing", doc="load-balancing: ECMP over both uplinks; "
          "active-standby: uplink 2 is standby", choices=("load-balancing", "active-standby")),
) + _rates(
    Param("primary_rate", "rate", "40Mbps", doc="leaf uplink 1 rate"),
    Param("secondary_rate", "rate", "40Mbps", doc="leaf uplink 2 rate (may differ)"),
    Param("oversubscription", "float", None, 0.01, 100,
          "sets both uplink rates: down / (active uplink capacity)"),
)


def dual_link(**given):
    """Leaf-spine whose leaves have two uplinks, load-balancing or active/standby."""
    v = resolve_params("dual-link", DUAL_LINK, given)
    S, L, H = v["spines"], v["leaves"], v["hosts_per_leaf"]
    standby = v["mode"] == "active-standby"
    if v["oversubscription"] is not None and "secondary_rate" in given:
        raise ConfigError("preset dual-link", "give secondary_rate or oversubscription, not both")
    rate_for_ratio("dual-link", v, given, "primary_rate", "oversubscription",
                   H * v["host_rate"], 1 if standby else 2)
    if v["oversubscription"] is not None:
        v["secondary_rate"] = v["primary_rate"]
    leaves = [f"leaf{i}" for i in range(1, L + 1)]
    nodes, links = hosts_on_leaves(leaves, H, v["host_rate"])
    nodes += [Node(name, "leaf") for name in leaves]
    nodes += [Node(f"spine{s}", "spine") for s in range(1, S + 1)]
    for l in range(1, L + 1):
        for u, rate in ((1, v["primary_rate"]), (2, v["secondary_rate"])):
            spine, port = (1, 2 * (l - 1) + u) if S == 1 else (u, l)
            links.append(Link(Endpoint(f"leaf{l}", f"eth{H + u}"),
                              Endpoint(f"spine{spine}", f"eth{port}"), rate,
                              role=STANDBY if standby and u == 2 else None))
    name = f"dual-link-{S}s{L}l{H}h-{'as' if standby else 'lb'}"
    return Fabric(name, tuple(nodes), tuple(links), param_values(DUAL_LINK, v))


def _dual_tor_schema(planes, spines):
    return (
        Param("tor_pairs", "int", 2, 1, 32, "ToR pairs; each host NIC is cabled to both ToRs"),
        Param("hosts_per_pair", "int", 2, 1, 32, "hosts (one dual-port NIC each) per ToR pair"),
        Param("spines", "int", spines, 1, 32, "spine switches"),
        Param("planes", "int", planes, 1, 2, "1: every ToR uplinks to every spine; 2: ToR A of "
              "each pair to the plane-1 spines, ToR B to the plane-2 spines (HPN dual-plane)"),
        Param("mode", "choice", "active-active", doc="the hosts' bonds: active-active or "
              "active-standby (NIC port 2 standby)", choices=("active-active", "active-standby")),
    ) + _rates(
        Param("uplink_rate", "rate", "40Mbps", doc="ToR <-> spine link rate"),
        Param("oversubscription", "float", None, 0.01, 100,
              "ToR down:up, sets uplink_rate"),
    )


DUAL_TOR = _dual_tor_schema(planes=1, spines=2)
DUAL_PLANE = _dual_tor_schema(planes=2, spines=4)


def dual_tor(**given):
    """Non-stacked dual-ToR (Alibaba HPN) hosts on a leaf-spine (see ``_dual_tor``)."""
    return _dual_tor("dual-tor", DUAL_TOR, given)


def _dual_tor(preset, schema, given):
    """Non-stacked dual-ToR (Alibaba HPN): one NIC, one IP, two independent ToRs.

    ToR pair i is ``leaf(2i-1)`` (ToR A, NIC port eth0) and ``leaf(2i)`` (ToR
    B, eth1); the two share no link and no state.  ``planes=2`` is HPN's
    dual-plane: ToR A's uplinks go only to the plane-1 spines, ToR B's only
    to plane 2, so a flow's plane is chosen once, by the host's bond, and its
    path inside the plane by one hash at the ToR.
    """
    v = resolve_params(preset, schema, given)
    P, H, S, N = v["tor_pairs"], v["hosts_per_pair"], v["spines"], v["planes"]
    if S % N:
        raise ConfigError(f"preset {preset}", f"spines={S} is not a multiple of planes={N}")
    per_plane = S // N
    rate_for_ratio(preset, v, given, "uplink_rate", "oversubscription",
                   H * v["host_rate"], per_plane)
    standby = v["mode"] == "active-standby"
    nodes, links = [], []
    for i in range(1, P + 1):
        for j in range(1, H + 1):
            h = f"h{(i - 1) * H + j}"
            nodes.append(Node(h, "host", bond=v["mode"]))
            for side in (0, 1):
                links.append(Link(Endpoint(h, f"eth{side}"),
                                  Endpoint(f"leaf{2 * i - 1 + side}", f"eth{j}"), v["host_rate"],
                                  role=STANDBY if standby and side == 1 else None))
    for t in range(1, 2 * P + 1):
        plane = (t - 1) % 2 + 1 if N == 2 else None
        nodes.append(Node(f"leaf{t}", "leaf", plane=plane))
        targets = (range((plane - 1) * per_plane + 1, plane * per_plane + 1) if N == 2
                   else range(1, S + 1))
        for u, s_ in enumerate(targets, start=1):
            down = (t + 1) // 2 if N == 2 else t
            links.append(Link(Endpoint(f"leaf{t}", f"eth{H + u}"),
                              Endpoint(f"spine{s_}", f"eth{down}"), v["uplink_rate"]))
    nodes += [Node(f"spine{s_}", "spine", plane=(s_ - 1) // per_plane + 1 if N == 2 else None)
              for s_ in range(1, S + 1)]
    name = f"{'dual-plane' if N == 2 else 'dual-tor'}-{P}p{H}h{S}s-{'as' if standby else 'aa'}"
    return Fabric(name, tuple(nodes), tuple(links), param_values(schema, v))


def dual_plane(**given):
    """HPN dual-plane: ``dual-tor`` with ``planes=2`` (ToR A / ToR B in separate planes)."""
    return _dual_tor("dual-plane", DUAL_PLANE, given)


RAIL_ONLY = (
    Param("planes", "int", 2, 1, 8, "planes (rails): NICs (GPUs) per host"),
    Param("spines_per_plane", "int", 2, 1, 16, "spines in each plane"),
    Param("leaves_per_plane", "int", 2, 1, 32, "leaves (rail switches) in each plane"),
    Param("hosts_per_leaf", "int", 2, 1, 32, "hosts under each leaf (one NIC each)"),
) + _rates(
    Param("uplink_rate", "rate", "40Mbps", doc="leaf <-> spine link rate"),
    Param("oversubscription", "float", None, 0.01, 100, "leaf down:up, sets uplink_rate"),
    Param("hb_rate", "rate", None, doc="a GPU's high-bandwidth (NVLink) domain rate, "
          "which carries the cross-rail hop; default 8 x host_rate"),
)
HB_FACTOR = 8                   # NVLink per GPU over its NIC (H100: 450 over 50 GB/s, ~9)
HB_MAX_BPS = 2e9                # one host's HB link (planes x hb_rate): what a veth's
                                # shaper and the job engine can pace on this machine


def rail_only(**given):
    """Hosts with one NIC per rail; each rail its own leaf-spine (see ``_rail_only``)."""
    return _rail_only("rail-only", given)


def _rail_only(preset, given):
    """Hosts with one NIC per rail; each rail its own leaf-spine (rail-only, Wang et al.).

    Rails share no switch: a GPU reaches another rail through its host's HB
    domain (``hb_rate``; the data plane's ``links.hb`` link), then that rail's
    NIC (NCCL's PXN)."""
    v = resolve_params(preset, RAIL_ONLY, given)
    N, S, L, H = (v[k] for k in ("planes", "spines_per_plane", "leaves_per_plane",
                                 "hosts_per_leaf"))
    rate_for_ratio(preset, v, given, "uplink_rate", "oversubscription",
                   H * v["host_rate"], S)
    hb_rate(preset, v)
    nodes = [Node(f"h{k}", "host") for k in range(1, L * H + 1)]
    links = []
    for p in range(1, N + 1):
        for l in range(1, L + 1):
            leaf = f"leaf{(p - 1) * L + l}"
            for port in range(1, H + 1):
                links.append(Link(Endpoint(f"h{(l - 1) * H + port}", f"eth{p - 1}"),
                                  Endpoint(leaf, f"eth{port}"), v["host_rate"]))
            for j in range(1, S + 1):
                links.append(Link(Endpoint(leaf, f"eth{H + j}"),
                                  Endpoint(f"spine{(p - 1) * S + j}", f"eth{l}"),
                                  v["uplink_rate"]))
    nodes += [Node(f"leaf{(p - 1) * L + l}", "leaf", plane=p)
              for p in range(1, N + 1) for l in range(1, L + 1)]
    nodes += [Node(f"spine{(p - 1) * S + j}", "spine", plane=p)
              for p in range(1, N + 1) for j in range(1, S + 1)]
    name = f"{preset}-{N}p{S}s{L}l{H}h"
    return Fabric(name, tuple(nodes), tuple(links), param_values(RAIL_ONLY, v))


def hb_rate(preset, v):
    """Resolve ``hb_rate`` (default HB_FACTOR x host_rate) and check the host's HB link fits."""
    if v["hb_rate"] is None:
        v["hb_rate"] = HB_FACTOR * v["host_rate"]
    if v["hb_rate"] <= 0:
        raise ConfigError(f"preset {preset}: hb_rate", "must be above 0 (e.g. 320Mbps)")
    if v["planes"] * v["hb_rate"] > HB_MAX_BPS:
        raise ConfigError(f"preset {preset}: hb_rate", f"planes x hb_rate = "
                          f"{v['planes'] * v['hb_rate'] / 1e6:g} Mbit/s is above the "
                          f"{HB_MAX_BPS / 1e6:g} Mbit/s one host's HB link can be paced at "
                          "here: lower hb_rate (or host_rate, whose 8x is the default)")


def multi_plane(**given):
    """``rail-only`` under its former name (same fabric, named ``multi-plane-...``)."""
    return _rail_only("multi-plane", given)


RAIL_OPTIMIZED = (
    Param("planes", "int", 2, 1, 8, "planes (rails): NICs (GPUs) per host"),
    Param("spines", "int", 2, 1, 16, "spines, shared by every rail's leaves"),
    Param("leaves_per_plane", "int", 2, 1, 32, "leaves (rail switches) in each plane"),
    Param("hosts_per_leaf", "int", 2, 1, 32, "hosts under each leaf (one NIC each)"),
) + _rates(
    Param("uplink_rate", "rate", "40Mbps", doc="leaf <-> spine link rate"),
    Param("oversubscription", "float", None, 0.01, 100, "leaf down:up, sets uplink_rate"),
)


def rail_optimized(**given):
    """The rail-only fabric's rails joined by one spine tier: any NIC reaches any NIC.

    Leaf ``(p-1)*L + l`` (rail p, group l) uplinks to every spine; spine port
    ``eth<(p-1)*L + l>`` faces it.  Same hosts, NICs, leaves and leaf uplinks
    as ``rail-only`` with ``spines_per_plane = spines``; its spines have
    ``planes`` times the ports (DGX SuperPOD style)."""
    v = resolve_params("rail-optimized", RAIL_OPTIMIZED, given)
    N, S, L, H = (v[k] for k in ("planes", "spines", "leaves_per_plane", "hosts_per_leaf"))
    rate_for_ratio("rail-optimized", v, given, "uplink_rate", "oversubscription",
                   H * v["host_rate"], S)
    nodes = [Node(f"h{k}", "host") for k in range(1, L * H + 1)]
    links = []
    for p in range(1, N + 1):
        for l in range(1, L + 1):
            leaf = (p - 1) * L + l
            for port in range(1, H + 1):
                links.append(Link(Endpoint(f"h{(l - 1) * H + port}", f"eth{p - 1}"),
                                  Endpoint(f"leaf{leaf}", f"eth{port}"), v["host_rate"]))
            for j in range(1, S + 1):
                links.append(Link(Endpoint(f"leaf{leaf}", f"eth{H + j}"),
                                  Endpoint(f"spine{j}", f"eth{leaf}"), v["uplink_rate"]))
    nodes += [Node(f"leaf{(p - 1) * L + l}", "leaf", plane=p)
              for p in range(1, N + 1) for l in range(1, L + 1)]
    nodes += [Node(f"spine{j}", "spine") for j in range(1, S + 1)]
    name = f"rail-optimized-{N}p{S}s{L}l{H}h"
    return Fabric(name, tuple(nodes), tuple(links), param_values(RAIL_OPTIMIZED, v))


PRESETS = {
    "three-tier": (three_tier, THREE_TIER),
    "dual-link": (dual_link, DUAL_LINK),
    "dual-tor": (dual_tor, DUAL_TOR),
    "dual-plane": (dual_plane, DUAL_PLANE),
    "rail-only": (rail_only, RAIL_ONLY),
    "multi-plane": (multi_plane, RAIL_ONLY),          # rail-only's former name
    "rail-optimized": (rail_optimized, RAIL_OPTIMIZED),
}
