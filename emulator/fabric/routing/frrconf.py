"""Each router's FRR configuration: zebra, bgpd and bfdd, one file each (pure text).

From a switch's entry in the routed plan (``addresses.readdress``):

* bgpd: ``frr defaults datacenter`` (keepalive 3 s, hold 9 s, no
  advertisement interval on eBGP, neighbour changes logged, no policy
  required on eBGP sessions: FRR's bgpd/bgp_vty.c), the RFC 7938 knobs
  ``bgp bestpath as-path multipath-relax`` (ECMP over paths through
  different ASNs of one tier) and ``maximum-paths 64``; one eBGP session per
  fabric link (``numbered``: its /31, ``unnumbered``: the interface, over
  IPv6 link-local addresses with IPv4 routes over IPv6 next hops, RFC 8950),
  all in the peer group ``FABRIC`` with BFD (profile ``fabric``); a leaf
  announces each of its host links' /31 and their aggregate, its /24
  (``summary-only``: the fabric carries one prefix per leaf).  A ``standby``
  link (dual-link active/standby) is kept as the last resort: routes learned
  over it get local preference 50, routes sent over it an AS path two hops
  longer.
* bfdd: the profile ``fabric`` with the run's transmit/receive interval and
  detect multiplier (``bfd.parse``), and peer state changes logged.
* zebra: the hostname, microsecond log timestamps and ``no zebra nexthop
  kernel enable``: routes go to the kernel with their next hops inline, not
  over the kernel's next-hop objects.  FRR 8.4's zebra keeps a group it no
  longer uses for 3 minutes, believing it installed, while the kernel has
  silently dropped the member of a flapped link from it; the route that
  comes back onto that group misses the link for good (FRR pull requests
  13413 and 18374 fixed it in 9.0 and later; issue 14481 names this
  workaround).
"""

from lab.modes import Peering

STANDBY_LOCAL_PREF = 50
STANDBY_PREPEND = 2


def _head(sw, daemon):
    return [f"! {daemon} of {sw['name']}: written by fabric-lab for this run",
            f"hostname {sw['name']}", "log timestamp precision 6", "!"]


def fabric_ports(sw):
    """The switch's ports that face another switch (one eBGP session each)."""
    return [p for p in sw["ports"] if p["peer_kind"] != "host"]


def zebra_conf(sw, peering=Peering.NUMBERED):
    lines = _head(sw, "zebra") + ["no zebra nexthop kernel enable", "!"]
    if peering == Peering.UNNUMBERED:
        for p in fabric_ports(sw):
            # router advertisements carry the link-local next hop BGP peers over
            lines += [f"interface {p['intf']}", " ipv6 nd ra-interval 3",
                      " no ipv6 nd suppress-ra", "!"]
    return "\n".join(lines) + "\n"


def bfdd_conf(sw, interval_ms, multiplier):
    lines = _head(sw, "bfdd") + [
        "debug bfd peer",            # logs every session's state change, with its reason
        "bfd",
        " profile fabric",
        f"  detect-multiplier {multiplier}",
        f"  receive-interval {interval_ms}",
        f"  transmit-interval {interval_ms}",
        " exit",
        "exit", "!"]
    return "\n".join(lines) + "\n"


def bgpd_conf(sw, peering=Peering.NUMBERED):
    bgp = sw["bgp"]
    asn = bgp["asn"]
    lines = ["frr defaults datacenter"] + _head(sw, "bgpd") + [
        f"router bgp {asn}",
        f" bgp router-id {bgp['router_id']}",
        " bgp bestpath as-path multipath-relax",
        " bgp log-neighbor-changes",
        " no bgp ebgp-requires-policy",
        " timers bgp 3 9",
        " neighbor FABRIC peer-group",
        " neighbor FABRIC bfd",
        " neighbor FABRIC bfd profile fabric",
        " neighbor FABRIC advertisement-interval 0",
    ]
    standby = []
    for p in fabric_ports(sw):
        if peering == Peering.UNNUMBERED:
            peer = p["intf"]
            lines += [f" neighbor {peer} interface peer-group FABRIC",
                      f" neighbor {peer} remote-as {p['peer_asn']}"]
        else:
            peer = p["peer_ip"]
            lines += [f" neighbor {peer} peer-group FABRIC",
                      f" neighbor {peer} remote-as {p['peer_asn']}"]
        lines.append(f" neighbor {peer} description {p['peer']}:eth{p['peer_port']}")
        if p.get("role") == "standby":
            standby.append(peer)
    lines.append(" address-family ipv4 unicast")
    if peering == Peering.UNNUMBERED:
        lines.append("  neighbor FABRIC activate")
    for p in sw["ports"]:
        if p["peer_kind"] == "host":
            lines.append(f"  network {p['ip']}/{p['prefix_len']}")
    if bgp.get("subnet"):
        lines.append(f"  aggregate-address {bgp['subnet']} summary-only")
    for peer in standby:
        lines += [f"  neighbor {peer} route-map STANDBY-IN in",
                  f"  neighbor {peer} route-map STANDBY-OUT out"]
    lines += ["  maximum-paths 64", " exit-address-family", "exit", "!"]
    if standby:
        lines += ["route-map STANDBY-IN permit 10",
                  f" set local-preference {STANDBY_LOCAL_PREF}", "exit",
                  "route-map STANDBY-OUT permit 10",
                  f" set as-path prepend {' '.join([str(asn)] * STANDBY_PREPEND)}", "exit",
                  "!"]
    return "\n".join(lines) + "\n"


def configs(sw, interval_ms, multiplier, peering=Peering.NUMBERED):
    """{daemon: configuration text} of one router."""
    peering = Peering.parse(peering, "peering")
    return {"zebra": zebra_conf(sw, peering),
            "bgpd": bgpd_conf(sw, peering),
            "bfdd": bfdd_conf(sw, interval_ms, multiplier)}
