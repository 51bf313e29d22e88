"""The ASN plan of RFC 7938 section 5.2.1, and which fabrics it fits.

RFC 7938 (Lapukhov, Premji, Mitchell: "Use of BGP for Routing in Large-Scale
Data Centers") runs eBGP on every link of a Clos and numbers the devices so
that BGP's own loop prevention keeps paths valley-free:

* all devices of the top tier (the spines of a leaf-spine, the super-spines
  of a three-tier fabric) share ONE private ASN;
* every second-tier cluster (a pod's spines in a three-tier fabric) has one
  ASN of its own, shared by its spines;
* every ToR (leaf) has an ASN of its own.

ASNs come from the 2-byte private range 64512-65534 (RFC 6996), in this
order: the top tier, the clusters (by pod), the ToRs (in fabric order).  A
fabric that needs more than the 1023 private 2-byte ASNs gets 4-byte ones
(4200000000 + the same offsets), as section 5.2.1 allows.

A fabric runs under BGP only if it is a Clos: links join a host to a leaf or
two switches of adjacent tiers.  A dragonfly (routers linked inside a group
and between groups of the same tier) or HPN's dual-plane fabric (its planes
meet only inside the hosts' bonds; one address per NIC leaves plane 2
unreachable from plane 1) is refused by name (``refusal``).
"""

from emulator.errors import ConfigError

PRIVATE_2B = 64512          # RFC 6996: 64512-65534
PRIVATE_2B_COUNT = 1023
PRIVATE_4B = 4200000000     # RFC 6996: 4200000000-4294967294

# presets that cannot run under BGP, and why (checked before anything is built)
REFUSED = {
    "dragonfly": "its routers link inside a group and between groups of one tier; "
                 "RFC 7938's eBGP design needs a Clos (links between adjacent tiers only)",
    "dual-plane": "its two planes meet only inside the hosts' bonded NICs: with one "
                  "address per NIC under BGP, a NIC of plane 1 cannot reach one of plane 2",
}


def plan(fabric):
    """{switch name: ASN} for every switch of ``fabric`` (see the module docstring)."""
    switches = list(fabric.switches)
    if not switches:
        return {}
    top = max(n.tier for n in switches)
    clusters, tors, tops = [], [], []
    for n in switches:
        if n.tier == top and top > 1:
            tops.append(n)
        elif n.tier == 1:
            tors.append(n)
        else:
            key = _cluster(fabric, n)
            if key not in clusters:
                clusters.append(key)
    count = (1 if tops else 0) + len(clusters) + len(tors)
    base = PRIVATE_2B if count <= PRIVATE_2B_COUNT else PRIVATE_4B
    out = {n.name: base for n in tops}
    offset = 1 if tops else 0
    cluster_asn = {key: base + offset + i for i, key in enumerate(clusters)}
    offset += len(clusters)
    for n in switches:
        if n.name in out:
            continue
        if n.tier == 1:
            out[n.name] = base + offset + tors.index(n)
        else:
            out[n.name] = cluster_asn[_cluster(fabric, n)]
    return out


def _cluster(fabric, node):
    """The second-tier cluster a middle-tier switch belongs to: its pod, else the set
    of ToRs below it (spines that serve the same ToRs form one cluster)."""
    if node.pod is not None:
        return ("pod", node.pod)
    below = sorted(n for n in fabric.neighbors(node.name)
                   if not fabric.node(n).is_host and fabric.node(n).tier < node.tier)
    return ("below", tuple(below))


def refusal(fabric, source=None):
    """Why ``fabric`` cannot run under BGP (one sentence), or None.  ``source``: where
    it came from ({"preset": NAME} names the preset in the answer)."""
    preset = (source or {}).get("preset")
    for name, why in REFUSED.items():
        if preset is not None and (preset == name or preset.startswith(name + "-")):
            return f"preset {preset} cannot run under --control bgp: {why}"
    for lk in fabric.links:
        a, b = fabric.node(lk.a.node), fabric.node(lk.b.node)
        if a.is_host or b.is_host:
            continue
        if abs(a.tier - b.tier) != 1:
            what = f"preset {preset}" if preset else f"fabric {fabric.name}"
            return (f"{what} cannot run under --control bgp: {lk.a.node}-{lk.b.node} joins "
                    f"two switches of tiers {a.tier} and {b.tier}; RFC 7938's eBGP design "
                    "needs a Clos (links between adjacent tiers only)")
    if any(h.bond for h in fabric.hosts) and any(n.plane is not None for n in fabric.switches
                                                 if n.tier == 1):
        what = f"preset {preset}" if preset else f"fabric {fabric.name}"
        return f"{what} cannot run under --control bgp: {REFUSED['dual-plane']}"
    return None


def check(fabric, source=None):
    """ConfigError (exit 2, before anything is built) if ``fabric`` cannot run under BGP."""
    why = refusal(fabric, source)
    if why:
        raise ConfigError("--control", why + "; use --control openflow")
