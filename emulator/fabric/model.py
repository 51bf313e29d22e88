"""The fabric model: nodes with a kind, ports, links with a rate.

Pure, frozen data with no knowledge of Mininet or Open vSwitch.  A fabric
file and a preset both produce a ``Fabric``; everything later (addressing,
the network build, the controller's topology document) is derived from it.

Names:
  * node names are the user's (``leaf1``, ``spine2``, ``h3``);
  * a port is named ``eth<N>``; on a switch N >= 1 and N is the OpenFlow
    port number, so ``leaf1:eth3`` is OpenFlow port 3 of leaf1;
  * tiers: host 0, leaf 1, spine 2, superspine 3;
  * labels: a node may carry ``pod`` (three-tier pods) and ``plane`` (the
    spine/superspine plane, or the rail of a multi-plane fabric); a link may
    carry ``role: standby`` (it carries traffic only once the active links
    toward the same next tier are down: dual-link active/standby);
  * control: the switches' control plane (``openflow``, the default, or
    ``bgp``: routers running eBGP, docs/bgp.md);
  * bond: a host may carry ``bond`` (``active-standby`` or ``active-active``):
    its ports are the two (or more) ports of ONE NIC with one IP and one MAC,
    each cabled to a different ToR (non-stacked dual-ToR).  In active-standby
    every bond link but one has ``role: standby``.
"""

from dataclasses import dataclass, field
from typing import Optional

from emulator.fabric.lossless import SETTINGS
from emulator.fabric.units import format_rate
from lab.modes import Control, FlowControl

HOST = "host"
SWITCH_TIERS = {"leaf": 1, "spine": 2, "superspine": 3}
KINDS = (HOST,) + tuple(SWITCH_TIERS)
STANDBY = "standby"
LINK_ROLES = (STANDBY,)
BOND_MODES = ("active-standby", "active-active")


@dataclass(frozen=True)
class Endpoint:
    """One end of a link: ``node:port``."""

    node: str
    port: str

    @property
    def number(self):
        """The N of ``eth<N>``: the OpenFlow port number on a switch."""
        return int(self.port[3:])

    def __str__(self):
        return f"{self.node}:{self.port}"


@dataclass(frozen=True)
class Link:
    """A full-duplex link; ``rate_bps`` is enforced in each direction."""

    a: Endpoint
    b: Endpoint
    rate_bps: int
    role: Optional[str] = None     # None (active) or "standby"
    # impairments from the start of the run (``loss: 2%``, ``state: down``,
    # ``delay: 5ms`` / ``jitter: 1ms`` where the kernel has netem)
    loss_pct: Optional[float] = None
    state: str = "up"
    delay_s: Optional[float] = None
    jitter_s: Optional[float] = None
    pfc_storm: Optional[str] = None  # the end (its node) that pauses the other forever

    @property
    def impaired(self):
        return (self.loss_pct is not None or self.state != "up" or self.delay_s is not None
                or self.pfc_storm is not None)

    def other(self, node):
        """The endpoint facing ``node``'s end of the link."""
        return self.b if self.a.node == node else self.a

    def end(self, node):
        """``node``'s own endpoint of this link."""
        return self.a if self.a.node == node else self.b


@dataclass(frozen=True)
class Node:
    """A host or a switch.  ``hash_seed`` overrides the switch's ECMP hash seed."""

    name: str
    kind: str
    hash_seed: Optional[int] = None
    pod: Optional[int] = None
    plane: Optional[int] = None
    bond: Optional[str] = None      # hosts only: None or one of BOND_MODES

    @property
    def is_host(self):
        return self.kind == HOST

    @property
    def tier(self):
        return 0 if self.is_host else SWITCH_TIERS[self.kind]


@dataclass(frozen=True)
class Fabric:
    """A validated fabric: build one with ``spec.parse`` or a preset."""

    name: str
    nodes: tuple
    links: tuple
    params: tuple = field(default=())   # the preset parameters it came from, if any
    layout: object = None               # its datapath layout (fabric.layout), if it names one
    flow_control: str = FlowControl.NONE   # none | pfc | credit (fabric.lossless)
    pfc: tuple = ()                     # ((PfcConfig field, value), ...): its pfc: settings
    cluster: object = None              # fabric.cluster.Cluster: the servers it runs on
    switch_agent: object = None         # fabric.switch_agent.Fleet of switch_agent:, if any
    control: str = Control.OPENFLOW     # openflow | bgp: the switches' control plane

    def __post_init__(self):
        object.__setattr__(self, "_by_name", {n.name: n for n in self.nodes})

    def node(self, name):
        return self._by_name[name]

    def has_node(self, name):
        return name in self._by_name

    @property
    def hosts(self):
        return tuple(n for n in self.nodes if n.is_host)

    @property
    def switches(self):
        return tuple(n for n in self.nodes if not n.is_host)

    def links_of(self, name):
        """Links touching ``name``, in the order of their local port number."""
        links = [lk for lk in self.links if name in (lk.a.node, lk.b.node)]
        return sorted(links, key=lambda lk: lk.end(name).number)

    def neighbors(self, name):
        return [lk.other(name).node for lk in self.links_of(name)]

    def uplinks(self, name):
        """Links from ``name`` toward a higher tier (leaf -> spine, ...)."""
        tier = self.node(name).tier
        return [lk for lk in self.links_of(name)
                if self.node(lk.other(name).node).tier > tier]

    def to_spec(self):
        """The fabric as a fabric-file dictionary (``show --yaml``)."""
        nodes = {}
        for n in self.nodes:
            entry = {"kind": n.kind}
            for key in ("hash_seed", "pod", "plane", "bond"):
                if getattr(n, key) is not None:
                    entry[key] = getattr(n, key)
            nodes[n.name] = entry
        links = []
        for lk in self.links:
            entry = {"endpoints": [str(lk.a), str(lk.b)], "rate": format_rate(lk.rate_bps)}
            if lk.role is not None:
                entry["role"] = lk.role
            if lk.loss_pct is not None:
                entry["loss"] = f"{lk.loss_pct:g}%"
            if lk.state != "up":
                entry["state"] = lk.state
            for key, value in (("delay", lk.delay_s), ("jitter", lk.jitter_s)):
                if value is not None:
                    entry[key] = f"{value * 1e3:g}ms"
            if lk.pfc_storm is not None:
                entry["pfc_storm"] = lk.pfc_storm
            links.append(entry)
        doc = {"name": self.name}
        if self.layout is not None:
            doc["layout"] = self.layout
        if self.flow_control != FlowControl.NONE:
            doc["flow_control"] = str(self.flow_control)
        if self.pfc:
            key = {v: k for k, v in SETTINGS.items()}
            doc["pfc"] = {key[f]: (f"{v:g}s" if f.endswith("_s") else v) for f, v in self.pfc}
        if self.cluster is not None:
            doc["servers"] = [{"address": s.address, "user": s.user, "name": s.name}
                              for s in self.cluster.servers]
            if self.cluster.placement != "auto":
                doc["placement"] = self.cluster.placement
        if self.switch_agent is not None:
            doc["switch_agent"] = self.switch_agent.as_dict()
        if self.control != Control.OPENFLOW:
            doc["control"] = str(self.control)
        doc["topology"] = {"nodes": nodes, "links": links}
        return doc
