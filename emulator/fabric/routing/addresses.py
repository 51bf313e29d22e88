"""The routed fabric's addresses, added to the topology document (pure).

Under BGP the hosts no longer share one flat subnet: every leaf advertises a
/24 of its own, and each host link is a routed /31 of it.  ``readdress``
rewrites the plan of ``fabric.addressing`` (whose bonded hosts were planned as
hosts with one NIC per ToR) in place:

* switch k (counting every switch in plan order, from 1): router id and
  loopback ``10.254.(k>>8).(k&255)``, one router MAC ``02:fa:00:00:(k>>8):(k&255)``
  on all its ports (SONiC gives a switch's routed ports one MAC), its ASN
  (``asn.plan``) and its kernel ECMP hash seed (the plan's ``hash_seed``:
  per switch, or the run's shared ``--hash-seed``);
* leaf L (counting leaves from 1): host subnet ``10.(1+(L-1)//256).((L-1)%256).0/24``;
  its j-th host-facing port (from 0) is ``.2j/31``, the host's end ``.2j+1``;
* fabric link n (counting links between two switches in plan order, from 0):
  ``10.128.0.0 + 2n/31``, the lower tier's end the even address;
* every host port names its gateway (the leaf's end of the /31, and the
  leaf's router MAC: the destination MAC of every frame the host sends);
  the host's default route leaves through its first port; a host with
  several NICs gets one routing table per NIC and a rule per source address
  (source-based routing: a NIC's address leaves by that NIC), and, when its
  NICs sit in switch islands of their own (rail-only), a route per subnet of
  another island through that island's NIC (``routes``, as the flat plan's
  host routes: they also give the host its HB link).
"""

import ipaddress

from emulator.fabric.routing import asn as asns

LOOPBACKS = ipaddress.ip_network("10.254.0.0/16")
LINKS = ipaddress.ip_network("10.128.0.0/11")
HOSTS = ipaddress.ip_network("10.0.0.0/9")      # the leaves' /24s: 10.1.0.0 ... 10.127.255.0
MAX_LEAVES = 126 * 256
MAX_HOST_PORTS = 128                            # /31s in a leaf's /24
RULE_TABLE = 100                                # NIC i's routing table: 100 + i


def router_id(k):
    return str(LOOPBACKS.network_address + ((k >> 8) << 8) + (k & 255))


def router_mac(k):
    return "02:fa:00:00:%02x:%02x" % (k >> 8, k & 255)


def leaf_subnet(n):
    """The host /24 of the n-th leaf (from 1)."""
    if not 1 <= n <= MAX_LEAVES:
        raise ValueError(f"leaf number {n} has no /24 in {HOSTS}")
    return ipaddress.ip_network(f"10.{1 + (n - 1) // 256}.{(n - 1) % 256}.0/24")


def link_pair(n):
    """(even, odd) addresses of fabric link n's /31 (from 0)."""
    base = LINKS.network_address + 2 * n
    if base + 1 not in LINKS:
        raise ValueError(f"fabric link {n} has no /31 in {LINKS}")
    return str(base), str(base + 1)


def readdress(doc, fabric, islands):
    """Turn ``doc`` (``addressing.plan``'s document of ``fabric``) into the routed plan
    (see the module docstring); ``islands``: {switch: island} of ``addressing.islands``."""
    plan_asn = asns.plan(fabric)
    switches = {sw["name"]: sw for sw in doc["switches"]}
    leaves = [sw for sw in doc["switches"] if sw["tier"] == 1]
    for k, sw in enumerate(doc["switches"], start=1):
        sw["bgp"] = {"asn": plan_asn[sw["name"]], "router_id": router_id(k),
                     "mac": router_mac(k), "hash_seed": sw["hash_seed"], "subnet": None}
    port_of = {(sw["name"], p["port"]): p for sw in doc["switches"] for p in sw["ports"]}
    # host links: the leaf's /24, one /31 per host-facing port
    gateway = {}                                  # (host, host port) -> (ip, mac, switch)
    for n, leaf in enumerate(leaves, start=1):
        net = leaf_subnet(n)
        leaf["bgp"]["subnet"] = str(net)
        facing = [p for p in leaf["ports"] if p["peer_kind"] == "host"]
        if len(facing) > MAX_HOST_PORTS:
            raise ValueError(f"{leaf['name']}: {len(facing)} host ports; a /24 holds "
                             f"{MAX_HOST_PORTS}")
        for j, p in enumerate(facing):
            mine, theirs = str(net.network_address + 2 * j), str(net.network_address + 2 * j + 1)
            p.update(ip=mine, prefix_len=31, peer_ip=theirs)
            gateway[(p["peer"], p["peer_port"])] = (mine, leaf["bgp"]["mac"], theirs)
    # fabric links: a /31 each, numbered in plan order
    n = 0
    for lk in doc["links"]:
        (a, pa), (b, pb) = lk["a"].split(":"), lk["b"].split(":")
        if a not in switches or b not in switches:
            continue
        ends = sorted([(switches[a]["tier"], a, int(pa[3:])), (switches[b]["tier"], b,
                                                                 int(pb[3:]))])
        low, high = link_pair(n)
        n += 1
        for (_, name, number), mine, theirs, peer in ((ends[0], low, high, ends[1][1]),
                                                       (ends[1], high, low, ends[0][1])):
            port_of[(name, number)].update(ip=mine, prefix_len=31, peer_ip=theirs,
                                           peer_asn=switches[peer]["bgp"]["asn"])
    for h in doc["hosts"]:
        for p in h["ports"]:
            gw_ip, gw_mac, ip = gateway[(h["name"], p["port"])]
            p.update(ip=ip, prefix_len=31, gateway=gw_ip, gateway_mac=gw_mac)
        h["ip"] = h["ports"][0]["ip"]
        h["routes"] = island_routes(h, leaves, islands)
        h["rules"] = [{"src": p["ip"], "table": RULE_TABLE + i, "via": p["gateway"],
                       "dev": p["port"]} for i, p in enumerate(h["ports"])] \
            if len(h["ports"]) > 1 else []
    doc["subnet"] = str(HOSTS)
    return doc


def island_routes(host, leaves, islands):
    """Routes of a host whose NICs sit in islands of their own: every leaf subnet of
    another island through the host's first NIC in that island (none otherwise)."""
    mine = {}
    for p in host["ports"]:
        mine.setdefault(islands.get(p["switch"]), p)
    if len(mine) < 2:
        return []
    routes = []
    for leaf in leaves:
        via = mine.get(islands.get(leaf["name"]))
        if via is not None:
            routes.append({"dst": leaf["bgp"]["subnet"], "dev": via["port"], "src": via["ip"],
                           "via": via["gateway"]})
    return routes


def next_hop_mac(src_port, dst_port):
    """The destination MAC of a frame from host port ``src_port`` to ``dst_port`` (plan
    entries): the source's gateway under BGP, the destination itself on the flat
    fabric."""
    return src_port.get("gateway_mac") or dst_port["mac"]
