"""One fabric on several servers: which server carries which node, and the
tunnels that join them.

Model.  A server is a Linux machine reached over ssh (``Server``: a name, an
address, a user).  Its switches and hosts are placed so that a leaf stays
with its hosts and NIC switches: the placement cuts the fabric as a datapath
layout does (``fabric.layout.place``: N runs of every tier, or one group per
pod, plane or rail) and deals the groups out to the servers in order.  Only
links between switches of different servers cross; a host link never does.

A crossing link is a VXLAN tunnel between the two servers' underlay
addresses, one VNI per link (``tunnels``); the underlay MTU less VXLAN's 50
bytes of outer headers must carry the fabric's RoCE frames (``check_mtu``).

Everything here is pure: a plan in, a placement out.
"""

import dataclasses
import ipaddress
import re

from emulator.errors import ConfigError
from emulator.fabric import layout as layouts
from emulator.fabric.units import link_mtu

VXLAN_OVERHEAD = 50               # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8
ROCE_OVERHEAD = 128               # a RoCE packet's IP size over its payload (units.link_mtu)
VXLAN_PORT = 4789
VNI_BASE = 0x100000               # the run's tag is added above this (``vni``)
MAX_TUNNELS = 0x1000              # VNIs per run
ROCE_MTUS = (4096, 2048, 1024, 512, 256)
PLACEMENTS = ("auto", "pod", "plane", "rail")
USER_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,15}$")


@dataclasses.dataclass(frozen=True)
class Server:
    name: str             # short name: in the results, and in its state directory
    address: str          # its underlay IPv4 address (ssh and VXLAN go there)
    user: str = "root"    # the ssh user: root, or one with passwordless sudo

    @property
    def dest(self):
        return f"{self.user}@{self.address}"


@dataclasses.dataclass(frozen=True)
class Cluster:
    servers: tuple        # of Server
    placement: str = "auto"
    ssh_config: str = None   # an ssh_config file for every connection (ssh -F)


def parse_cluster(servers, placement="auto", ssh_config=None, where="servers"):
    """The ``Cluster`` of a fabric file's ``servers:``/``placement:`` or ``--servers``."""
    if placement not in PLACEMENTS:
        raise ConfigError("placement", f"unknown placement {placement!r}: use "
                                       + ", ".join(PLACEMENTS))
    return Cluster(parse_servers(servers, where), placement, ssh_config)


def parse_servers(value, where="servers"):
    """Servers from ``--servers user@addr,addr`` or a fabric file's ``servers:``
    list (``"user@addr"`` strings or ``{address:, user:, name:}`` mappings)."""
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(where, "give one or more servers: user@ADDRESS[,user@ADDRESS...]")
    out = []
    for i, entry in enumerate(value):
        at = f"{where}[{i}]"
        if isinstance(entry, str):
            user, _, address = entry.strip().rpartition("@")
            entry = {"address": address, "user": user or "root"}
        if not isinstance(entry, dict):
            raise ConfigError(at, "a server is 'user@ADDRESS' or {address:, user:, name:}")
        unknown = set(entry) - {"address", "user", "name"}
        if unknown:
            raise ConfigError(at, f"unknown key {sorted(unknown)[0]!r}: use address, user, name")
        address = str(entry.get("address", "")).strip()
        try:
            ip = ipaddress.IPv4Address(address)
        except ValueError:
            raise ConfigError(at, f"{address!r} is not an IPv4 address: name each server by "
                                  "its underlay address (VXLAN tunnels and the controller "
                                  "use it)")
        if ip.is_loopback or ip.is_unspecified or ip.is_multicast:
            raise ConfigError(at, f"{address} cannot be a server's underlay address")
        user = str(entry.get("user", "root"))
        if not USER_RE.match(user):
            raise ConfigError(at, f"{user!r} is not a user name")
        name = str(entry.get("name", f"srv{i + 1}"))
        if not NAME_RE.match(name):
            raise ConfigError(at, f"{name!r} is not a server name (a-z, 0-9, '-'; at most 16)")
        out.append(Server(name=name, address=address, user=user))
    for attr in ("name", "address"):
        seen = [getattr(s, attr) for s in out]
        dup = sorted({x for x in seen if seen.count(x) > 1})
        if dup:
            raise ConfigError(where, f"server {attr} {dup[0]} given twice")
    return tuple(out)


def place(topo, servers, by="auto"):
    """{node name: server name} for every switch and host of ``topo`` (a plan).

    The unit of placement is an edge group: a leaf with its hosts, their NIC
    switches and every other leaf those hosts attach to (a dual-ToR pair, the
    rails of a multi-rail host).  ``by``: ``auto`` deals the edge groups out to
    the servers in order and cuts every higher tier into as many runs, server k
    taking run k; ``pod``, ``plane`` or ``rail`` keeps each pod, plane or rail
    whole (``fabric.layout.place``), the groups dealt out in order, and refuses
    a cut that would split an edge group."""
    if by not in PLACEMENTS:
        raise ConfigError("--placement", f"unknown placement {by!r}: use "
                                         + ", ".join(PLACEMENTS))
    n = len(servers)
    edge = _edge_groups(topo)
    if by == "auto":
        groups = [sorted(g) for g in edge]
        if len(groups) < n:
            raise ConfigError("--servers", f"{n} servers but this fabric has "
                                           f"{len(groups)} leaf groups (a leaf with its "
                                           f"hosts): give at most {len(groups)} servers")
        where = {}
        for k, group in enumerate(groups):
            for name in group:
                where[name] = servers[k * n // len(groups)].name
        for tier in sorted({sw["tier"] for sw in topo["switches"] if sw["tier"] >= 2}):
            members = [sw["name"] for sw in topo["switches"] if sw["tier"] == tier]
            for i, name in enumerate(members):
                where[name] = servers[i * n // len(members)].name
        return where
    try:
        groups = [g for _, g in layouts.place(topo, by)]
    except ConfigError as e:
        raise ConfigError("--placement", e.message.replace("layout", "placement", 1)
                          .replace("use a number of instances or per-switch",
                                   "use --placement auto"))
    if len(groups) < n:
        raise ConfigError("--servers", f"{n} servers but this fabric has {len(groups)} "
                                       f"{by}s: give at most {len(groups)} servers")
    where = {}
    for k, group in enumerate(groups):
        for name in group:
            where[name] = servers[k * n // len(groups)].name
    for g in edge:
        on = sorted({where[x] for x in g if x in where})
        if len(on) > 1:
            raise ConfigError("--placement", f"placement by {by} splits the leaf group "
                                             f"{', '.join(sorted(x for x in g if x in where))} "
                                             f"over {', '.join(on)}: its hosts attach to "
                                             "all of them; use --placement auto")
        for x in g:
            where[x] = on[0]
    return where


def _edge_groups(topo):
    """The edge groups (sets of node names) in the plan's order: hosts joined with
    the switches their ports meet, NIC switches (tier 0) with their leaves."""
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a, b):
        parent[find(a)] = find(b)
    tier = {sw["name"]: sw["tier"] for sw in topo["switches"]}
    for sw in topo["switches"]:
        if sw["tier"] <= 1:
            find(sw["name"])
        if sw["tier"] == 0:
            for p in sw["ports"]:
                if p["peer_kind"] != "host" and tier[p["peer"]] <= 1:
                    union(sw["name"], p["peer"])
    for h in topo["hosts"]:
        for p in h["ports"]:
            union(h["name"], p["switch"])
    order = [sw["name"] for sw in topo["switches"] if sw["tier"] <= 1]
    groups = {}
    for name in order + [h["name"] for h in topo["hosts"]]:
        groups.setdefault(find(name), set()).add(name)
    seen, out = set(), []
    for name in order:
        root = find(name)
        if root not in seen:
            seen.add(root)
            out.append(groups[root])
    return out


def crossing(topo, where):
    """[(switch, port entry)] of every switch port whose peer is on another server,
    and the host links that cross (which a placement must never make)."""
    ports, host_links = [], []
    for sw in topo["switches"]:
        for p in sw["ports"]:
            if where[sw["name"]] != where[p["peer"]]:
                (host_links if p["peer_kind"] == "host" else ports).append((sw, p))
    return ports, host_links


def tunnels(topo, where, servers, tag):
    """{server name: [tunnel]} for the crossing links: a tunnel is one server's end,
    ``{"switch", "intf", "port", "vni", "local", "remote", "peer"}``."""
    address = {s.name: s.address for s in servers}
    ports, host_links = crossing(topo, where)
    if host_links:
        sw, p = host_links[0]
        raise ConfigError("--servers", f"host {p['peer']} and its switch {sw['name']} "
                                       "were placed on different servers")

    def link(sw, p):         # one name for both ends of a link: its two (switch, port)s
        return tuple(sorted(((sw["name"], p["port"]), (p["peer"], p["peer_port"]))))
    index = {lk: i for i, lk in enumerate(sorted({link(sw, p) for sw, p in ports}))}
    if len(index) > MAX_TUNNELS:
        raise ConfigError("--servers", f"{len(index)} links would cross servers, more than "
                                       f"the {MAX_TUNNELS} VNIs a run has: use fewer "
                                       "servers or --placement pod/plane")
    out = {s.name: [] for s in servers}
    for sw, p in sorted(ports, key=lambda e: (e[0]["name"], e[1]["port"])):
        out[where[sw["name"]]].append({
            "switch": sw["name"], "intf": p["intf"], "port": p["port"],
            "vni": vni(tag, index[link(sw, p)]), "local": address[where[sw["name"]]],
            "remote": address[where[p["peer"]]], "peer": p["peer"]})
    return out


def vni(tag, index):
    """The VNI of a run's ``index``-th tunnel: the tag keeps two runs apart."""
    return VNI_BASE + (int(tag, 16) % 0x100) * 0x1000 + index


def check_mtu(underlay_mtu, roce_mtu, server=""):
    """The MTU of a tunnel over ``underlay_mtu`` (the fabric's interface MTU where it
    fits, else the most the tunnel carries), or a ConfigError naming the largest
    RoCE MTU whose frames fit."""
    tunnel = underlay_mtu - VXLAN_OVERHEAD
    need = roce_mtu + ROCE_OVERHEAD
    if tunnel >= need:
        return min(tunnel, link_mtu(roce_mtu))
    fits = [m for m in ROCE_MTUS if m + ROCE_OVERHEAD <= tunnel]
    hint = (f"run with --mtu {fits[0]}" if fits else "no RoCE MTU fits")
    raise ConfigError("--servers", f"server {server} has underlay MTU {underlay_mtu}: a "
                                   f"VXLAN tunnel carries {tunnel}-byte packets, and RoCE "
                                   f"MTU {roce_mtu} needs {need}. Raise the underlay MTU to "
                                   f"{need + VXLAN_OVERHEAD} or more (jumbo frames), or {hint}")


def describe(where, servers):
    """One line: each server's switches and host count."""
    parts = []
    for s in servers:
        mine = [n for n, srv in where.items() if srv == s.name]
        parts.append(f"{s.name} ({s.address}): {len(mine)} nodes")
    return "; ".join(parts)


def part(topo, where, server):
    """The plan of the nodes ``server`` carries: its hosts, switches and the links
    between them (crossing links are that server's tunnels)."""
    mine = {n for n, s in where.items() if s == server}
    out = dict(topo)
    out["hosts"] = [h for h in topo["hosts"] if h["name"] in mine]
    out["switches"] = [sw for sw in topo["switches"] if sw["name"] in mine]
    out["links"] = [lk for lk in topo["links"]
                    if lk["a"].split(":")[0] in mine and lk["b"].split(":")[0] in mine]
    return out
