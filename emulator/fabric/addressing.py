"""The deterministic addressing plan and the topology JSON document.

Everything here is a pure function of the fabric model (and the run tag for
the Linux-visible names), so the same fabric always gets the same plan:

  * host port k (counting every host port in fabric order, from 1) gets
    IPv4 10.0.(k>>8).(k&255)/16 and MAC 02:00:00:00:(k>>8):(k&255);
  * switch datapath id = tier << 16 | index (leaf1 = 0x10001,
    spine2 = 0x20002, superspine1 = 0x30001), index counted per kind;
  * OpenFlow port number = N of the fabric port ``eth<N>``;
  * Linux names carry the project prefix and the run tag:
    bridge ``fl<tag><k><i>`` (k = l/s/x/n for leaf/spine/superspine/NIC),
    switch interface ``<bridge>-e<N>``; a host's interfaces keep their fabric
    names (``eth0``) inside the host's namespace;
  * ECMP hash seed: the node's ``hash_seed``, else one ``seed`` for all
    fabric switches if given (hash polarization; not the NICs of bonded hosts,
    whose bond hash is the host's own), else the datapath id;
  * a standby link (``role: standby``) marks both its switch ports
    ``"role": "standby"``;
  * a bonded host (``bond:``, non-stacked dual-ToR) has ONE address on a
    namespace interface ``bond0``; its NIC is a switch of kind ``nic`` named
    ``<host>.nic`` (bridge ``fl<tag>n<i>``, datapath id = i, tier 0), OpenFlow
    port 1 facing ``bond0`` and port N+2 for the NIC's fabric port ``eth<N>``,
    cabled to the ToR; the plan's links are the NIC switch's.  Being a switch,
    the NIC gets its select / fast-failover group from the controller, and the
    controller never routes through it (it is not a transit node);
  * every host document names its ``leaf``: the switch of its first fabric
    port (the first ToR of a bond);
  * host routes (the emulated NVLink hop of a multi-plane / rail-optimized
    fabric): when a host's ports sit in different switch islands (planes not
    joined by any switch), every host port IP of another host gets a /32
    route through the host's own port in that island, with that port's IP as
    source: traffic for another rail leaves through the NIC of that rail.

Under ``control: bgp`` (``fabric.control``) the switches are routers: a bonded
host is planned as a host with one NIC per ToR (no NIC switch, one address
per NIC), and ``routing.addresses.readdress`` gives the hosts per-leaf
subnets and the switches their ASNs, link addresses and router MACs
(docs/bgp.md).

The topology document (``topology_document``) is what the controller — this
project's or a user's — loads; docs/topology-schema.md describes it.
"""

import ipaddress
import re

from emulator.fabric.routing import addresses as routed
from lab.modes import Control

PREFIX = "fl"
TAG_RE = re.compile(r"^[0-9a-f]{4}$")
SUBNET = ipaddress.ip_network("10.0.0.0/16")
KIND_LETTER = {"leaf": "l", "spine": "s", "superspine": "x", "nic": "n"}
NIC_TIER = 0
BOND_INTF = "bond0"
NIC_HOST_PORT = 1


def nic_name(host):
    return f"{host}.nic"


def nic_port(host_port):
    """OpenFlow port of a bonded host's NIC switch for its fabric port ``eth<N>``."""
    return int(host_port[3:]) + 2
SCHEMA_VERSION = 1


def host_address(k):
    """IP and MAC of the k-th host port (k >= 1)."""
    if not 1 <= k < SUBNET.num_addresses - 1:
        raise ValueError(f"host port number {k} does not fit {SUBNET}")
    ip = SUBNET.network_address + k
    mac = "02:00:00:00:%02x:%02x" % (k >> 8, k & 0xFF)
    return str(ip), mac


def dpid_of(kind_tier, index):
    return (kind_tier << 16) | index


def bridge_name(tag, kind, index):
    return f"{PREFIX}{tag}{KIND_LETTER[kind]}{index}"


def switch_intf(bridge, number):
    name = f"{bridge}-e{number}"
    if len(name) > 15:
        raise ValueError(f"interface name {name!r} is longer than Linux's 15 characters")
    return name


def plan(fabric, tag="0000", seed=None):
    """Return the topology document (a JSON-ready dict) for ``fabric``."""
    if not TAG_RE.match(tag):
        raise ValueError(f"run tag {tag!r} is not 4 hex digits")
    counters = {}
    switches = []
    bgp = fabric.control == Control.BGP
    nics = [] if bgp else [n for n in fabric.hosts if n.bond]
    for node in list(fabric.switches) + nics:
        kind = "nic" if node.is_host else node.kind
        counters[kind] = counters.get(kind, 0) + 1
        index = counters[kind]
        dpid = dpid_of(NIC_TIER if node.is_host else node.tier, index)
        name = nic_name(node.name) if node.is_host else node.name
        bridge = bridge_name(tag, kind, index)
        if node.hash_seed is not None:
            hash_seed = node.hash_seed
        elif seed is not None and not node.is_host:
            hash_seed = seed            # a NIC's bond hash is the host's, not the switches' ASIC's
        else:
            hash_seed = dpid
        switches.append({
            "name": name, "kind": kind, "tier": NIC_TIER if node.is_host else node.tier,
            "dpid": dpid, "dpid_hex": "%016x" % dpid, "bridge": bridge,
            "hash_seed": hash_seed, "pod": node.pod, "plane": node.plane,
            "ports": [],
        })
    hosts, k = [], 0
    island = islands(fabric)
    for node in fabric.hosts:
        ports, members = [], []
        bond = node.bond and not bgp
        for lk in fabric.links_of(node.name):
            peer = lk.other(node.name)
            if bond:
                members.append({"port": lk.end(node.name).port, "switch": peer.node,
                                "switch_port": peer.number, "rate_bps": lk.rate_bps,
                                "role": lk.role})
                continue
            k += 1
            ip, mac = host_address(k)
            ports.append({"port": lk.end(node.name).port, "ip": ip, "mac": mac,
                          "prefix_len": SUBNET.prefixlen, "switch": peer.node,
                          "switch_port": peer.number, "rate_bps": lk.rate_bps})
        doc = {"name": node.name}
        if bond:
            k += 1
            ip, mac = host_address(k)
            ports.append({"port": BOND_INTF, "ip": ip, "mac": mac,
                          "prefix_len": SUBNET.prefixlen, "switch": nic_name(node.name),
                          "switch_port": NIC_HOST_PORT,
                          "rate_bps": sum(m["rate_bps"] for m in members)})
            doc["bond"] = {"mode": node.bond, "nic": nic_name(node.name), "members": members}
        doc.update({"ip": ports[0]["ip"], "mac": ports[0]["mac"], "pod": node.pod,
                    "plane": node.plane,
                    "leaf": (members or ports)[0]["switch"], "ports": ports, "routes": []})
        hosts.append(doc)
    for h in hosts:
        h["routes"] = host_routes(h, hosts, island)
    links = plan_links(fabric, bonds=not bgp)
    by_name = {sw["name"]: sw for sw in switches}
    kind_of = {n.name: n.kind for n in fabric.nodes}
    kind_of.update({sw["name"]: sw["kind"] for sw in switches})
    for lk in links:
        ends = [lk["a"].split(":"), lk["b"].split(":")]
        for (node, port), (peer, peer_port) in (ends, ends[::-1]):
            if node not in by_name:
                continue
            sw = by_name[node]
            number = int(port[3:])
            entry = {"port": number, "name": port, "intf": switch_intf(sw["bridge"], number),
                     "peer": peer, "peer_kind": kind_of[peer],
                     "peer_port": peer_port if kind_of[peer] == "host" else int(peer_port[3:]),
                     "rate_bps": lk["rate_bps"]}
            if "role" in lk:
                entry["role"] = lk["role"]
            sw["ports"].append(entry)
    for sw in switches:
        sw["ports"].sort(key=lambda p: p["port"])
    doc = {
        "schema_version": SCHEMA_VERSION,
        "fabric": fabric.name,
        "run": tag,
        "subnet": str(SUBNET),
        "params": dict(fabric.params),
        "switches": switches,
        "hosts": hosts,
        "links": links,
    }
    if bgp:
        doc["control"] = str(Control.BGP)
        routed.readdress(doc, fabric, island)
    return doc


def home_leaf(host):
    """The switch a host document hangs from: its first ToR (bonded hosts too)."""
    return host.get("leaf") or host["ports"][0]["switch"]


def plan_links(fabric, bonds=True):
    """The links as built: a bonded host's links start at its NIC switch (``bonds``
    False: at the host, one NIC per ToR, as under BGP)."""
    links = []
    for h in fabric.hosts:
        if h.bond and bonds:
            rate = sum(lk.rate_bps for lk in fabric.links_of(h.name))
            links.append({"a": f"{nic_name(h.name)}:eth{NIC_HOST_PORT}",
                          "b": f"{h.name}:{BOND_INTF}", "rate_bps": rate})
    for lk in fabric.links:
        ends = []
        for ep in (lk.a, lk.b):
            if fabric.node(ep.node).bond and bonds:
                ends.append(f"{nic_name(ep.node)}:eth{nic_port(ep.port)}")
            else:
                ends.append(str(ep))
        links.append({"a": ends[0], "b": ends[1], "rate_bps": lk.rate_bps})
        if lk.role is not None:
            links[-1]["role"] = lk.role
        if lk.impaired:
            links[-1]["impair"] = {"loss_pct": lk.loss_pct, "state": lk.state,
                                   "delay_s": lk.delay_s, "jitter_s": lk.jitter_s,
                                   "pfc_storm": lk.pfc_storm}
    return links


def islands(fabric):
    """{switch name: island number}: components of the switch-to-switch graph."""
    adj = {n.name: [] for n in fabric.switches}
    for lk in fabric.links:
        if lk.a.node in adj and lk.b.node in adj:
            adj[lk.a.node].append(lk.b.node)
            adj[lk.b.node].append(lk.a.node)
    out = {}
    for start in adj:
        if start in out:
            continue
        out[start], todo = len(set(out.values())), [start]
        while todo:
            for nxt in adj[todo.pop()]:
                if nxt not in out:
                    out[nxt] = out[start]
                    todo.append(nxt)
    return out


def host_routes(host, hosts, island):
    """/32 routes of ``host`` toward other hosts' ports in other islands (see above)."""
    mine = {}
    for p in host["ports"]:
        mine.setdefault(island.get(p["switch"]), p)  # first port in each island
    if len(mine) < 2:
        return []
    routes = []
    for other in hosts:
        if other["name"] == host["name"]:
            continue
        for p in other["ports"]:
            via = mine.get(island.get(p["switch"], -1))
            if via is not None:
                routes.append({"dst": f"{p['ip']}/32", "dev": via["port"], "src": via["ip"]})
    return routes
