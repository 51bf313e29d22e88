"""The topology document (docs/topology-schema.md) as a small frozen object.

Model: switches are named and numbered by datapath id (dpid); each has
OpenFlow ports whose peer is either a host interface or a switch port.
Switch-to-switch links form ``graph``, an undirected networkx MultiGraph
(frozen) whose nodes are dpids and whose edge keys are ``(port, peer_port)``
from the lower dpid's side, so parallel links stay distinct. Every host port
(a host may have several) is one ``HostPort`` with its own IP and MAC.
"""

import ipaddress
import json
import types
from dataclasses import dataclass

import networkx as nx

from lab.modes import LB, Failover, Routing

SCHEMA_VERSION = 1


class TopologyError(ValueError):
    """The topology document is not usable; the message says where."""


@dataclass(frozen=True)
class Port:
    dpid: int
    port: int                 # OpenFlow port number
    name: str
    peer: str                 # peer node name
    peer_kind: str            # host | leaf | spine | superspine
    peer_port: object         # int OpenFlow port of a switch peer, str intf of a host
    role: object = None       # None (active) or "standby" (used once the active ports die)
    rate_bps: object = None   # the link's rate, when the document gives it

    @property
    def to_host(self):
        return self.peer_kind == "host"


NIC = "nic"          # a bonded host's NIC switch: an edge, never a transit node


@dataclass(frozen=True)
class Switch:
    name: str
    dpid: int
    kind: str
    tier: int
    bridge: str
    hash_seed: int
    ports: tuple              # of Port, sorted by port number
    pod: object = None        # its pod (a dragonfly's group), when the document gives one

    def port(self, number):
        for p in self.ports:
            if p.port == number:
                return p
        raise KeyError(f"{self.name} has no port {number}")


@dataclass(frozen=True)
class HostPort:
    host: str
    intf: str
    ip: str
    mac: str
    switch: str
    dpid: int
    switch_port: int


@dataclass(frozen=True)
class Link:
    """A switch-to-switch link, a side being the lower dpid."""
    a_dpid: int
    a_port: int
    b_dpid: int
    b_port: int


@dataclass(frozen=True)
class Modes:
    """The run's modes the controller acts on: the document's ``modes`` block."""
    lb: LB = LB.default()
    failover: Failover = Failover.default()
    routing: Routing = Routing.default()
    bfd_holddown: str = "0"      # BASE:MAX s, or 0: off (controller/damping.py)


def modes_of(doc):
    """``Modes`` of a topology document's ``modes`` block (defaults where it has none)."""
    given = doc.get("modes") or {}
    if not isinstance(given, dict):
        raise TopologyError("modes: expected a mapping of lb, failover, routing, bfd_holddown")
    unknown = sorted(set(given) - {"lb", "failover", "routing", "bfd_holddown"})
    if unknown:
        raise TopologyError(f"modes: unknown key(s) {', '.join(unknown)}")
    try:
        return Modes(LB.parse(given.get("lb") or LB.default(), "modes.lb"),
                     Failover.parse(given.get("failover") or Failover.default(),
                                    "modes.failover"),
                     Routing.parse(given.get("routing") or Routing.default(), "modes.routing"),
                     str(given.get("bfd_holddown") or "0"))
    except ValueError as e:
        raise TopologyError(str(e)) from None


@dataclass(frozen=True, eq=False)
class Topology:
    name: str
    subnet: str
    switches: tuple           # of Switch, sorted by dpid
    host_ports: tuple         # of HostPort, in document order
    links: tuple              # of Link, sorted
    by_dpid: types.MappingProxyType
    by_name: types.MappingProxyType
    graph: nx.MultiGraph      # frozen
    modes: Modes = Modes()    # the run's modes (the ``modes`` block)

    def all_ports(self):
        """Every (dpid, port) of every switch."""
        return frozenset((s.dpid, p.port) for s in self.switches for p in s.ports)

    def peer_of(self, dpid, port):
        """(peer dpid, peer port) of a switch port facing a switch, else None."""
        p = self.by_dpid[dpid].port(port)
        if p.to_host:
            return None
        return self.by_name[p.peer].dpid, p.peer_port


def _need(obj, key, where):
    if not isinstance(obj, dict) or key not in obj:
        raise TopologyError(f"{where}: missing key {key!r}")
    return obj[key]


def from_dict(doc):
    """Build a Topology from the parsed JSON document; raise TopologyError."""
    version = _need(doc, "schema_version", "document")
    if version != SCHEMA_VERSION:
        raise TopologyError(f"document: schema_version {version!r}, expected {SCHEMA_VERSION}")
    switches = []
    for i, s in enumerate(_need(doc, "switches", "document")):
        where = f"switches[{i}]"
        dpid = _need(s, "dpid", where)
        ports = tuple(sorted(
            (Port(dpid, _need(p, "port", f"{where}.ports[{j}]"), p.get("name", ""),
                  _need(p, "peer", f"{where}.ports[{j}]"),
                  _need(p, "peer_kind", f"{where}.ports[{j}]"),
                  _need(p, "peer_port", f"{where}.ports[{j}]"), p.get("role"),
                  p.get("rate_bps"))
             for j, p in enumerate(_need(s, "ports", where))),
            key=lambda p: p.port))
        switches.append(Switch(_need(s, "name", where), dpid, _need(s, "kind", where),
                               _need(s, "tier", where), _need(s, "bridge", where),
                               int(s.get("hash_seed", dpid)), ports, s.get("pod")))
    switches.sort(key=lambda s: s.dpid)
    by_dpid = {s.dpid: s for s in switches}
    by_name = {s.name: s for s in switches}
    if len(by_dpid) != len(switches) or len(by_name) != len(switches):
        raise TopologyError("switches: duplicate dpid or name")
    subnet = ipaddress.ip_network(_need(doc, "subnet", "document"))

    host_ports = []
    for i, h in enumerate(_need(doc, "hosts", "document")):
        for j, hp in enumerate(_need(h, "ports", f"hosts[{i}]")):
            where = f"hosts[{i}].ports[{j}]"
            sw = by_name.get(_need(hp, "switch", where))
            if sw is None:
                raise TopologyError(f"{where}: unknown switch {hp['switch']!r}")
            ip = _need(hp, "ip", where)
            if ipaddress.ip_address(ip) not in subnet:
                raise TopologyError(f"{where}: {ip} is outside {subnet}")
            port = sw.port(_need(hp, "switch_port", where))
            if not port.to_host or port.peer != h["name"]:
                raise TopologyError(f"{where}: {sw.name} port {port.port} does not face {h['name']}")
            host_ports.append(HostPort(h["name"], _need(hp, "port", where), ip,
                                       _need(hp, "mac", where).lower(), sw.name, sw.dpid,
                                       port.port))
    if len({hp.ip for hp in host_ports}) != len(host_ports):
        raise TopologyError("hosts: duplicate IP")

    graph = nx.MultiGraph()
    graph.add_nodes_from(by_dpid)
    links = set()
    for s in switches:
        for p in s.ports:
            if p.to_host:
                continue
            peer = by_name.get(p.peer)
            if peer is None:
                raise TopologyError(f"{s.name} port {p.port}: unknown peer {p.peer!r}")
            back = peer.port(p.peer_port)
            if back.peer != s.name or back.peer_port != p.port:
                raise TopologyError(f"{s.name} port {p.port}: peer {peer.name} does not point back")
            a, b = sorted([(s.dpid, p.port), (peer.dpid, p.peer_port)])
            links.add(Link(a[0], a[1], b[0], b[1]))
    for lk in sorted(links, key=lambda lk: (lk.a_dpid, lk.a_port)):
        graph.add_edge(lk.a_dpid, lk.b_dpid, key=(lk.a_port, lk.b_port))
    return Topology(doc.get("fabric", ""), str(subnet), tuple(switches), tuple(host_ports),
                    tuple(sorted(links, key=lambda lk: (lk.a_dpid, lk.a_port))),
                    types.MappingProxyType(by_dpid), types.MappingProxyType(by_name),
                    nx.freeze(graph), modes_of(doc))


def load(path):
    """Load a topology JSON file."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise TopologyError(f"{path}: {e}") from e
    return from_dict(doc)
