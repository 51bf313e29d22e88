"""Fabric files: parse and validate before anything is created.

The file has the shape containerlab users know::

    name: two-leaf
    topology:
      defaults:
        rate: 40Mbps            # links without a rate of their own
      nodes:
        h1:     {kind: host}
        leaf1:  {kind: leaf}
        spine1: {kind: spine, hash_seed: 7}
      links:
        - endpoints: ["h1:eth0", "leaf1:eth1"]
          rate: 40Mbps

Every problem raises one ``ConfigError`` naming its place, e.g.
``topology.links[3].endpoints[1]: unknown node 'leaf9'``.  Nothing else
escapes ``parse`` / ``load_file``, whatever the input.
"""

import re

import yaml

from emulator.errors import ConfigError
from emulator.fabric import layout as layouts
from emulator.fabric.cluster import parse_cluster
from emulator.fabric.lossless import parse_flow_control, parse_settings
from emulator.fabric.model import BOND_MODES, HOST, KINDS, LINK_ROLES, Endpoint, Fabric, Link, Node
from emulator.fabric.switch_agent import parse_fabric
from emulator.fabric.units import parse_duration, parse_rate
from lab.modes import Control, FlowControl

NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
PORT_RE = re.compile(r"^eth([0-9]{1,5})$")
MAX_OFPORT = 0xFF00 - 1

TOP_KEYS = {"name": "fabric name", "topology": "nodes and links",
            "layout": "datapath instances (shared, per-switch, N, pod, plane, rail, auto)",
            "lossless": "true: PFC on every link (flow_control: pfc)",
            "flow_control": "none, pfc or credit (link-level flow control)",
            "servers": "run on these servers: [user@ADDRESS, ...] (docs/cluster.md)",
            "placement": "which server carries which switch: auto, pod, plane or rail",
            "pfc": "lossless settings: watchdog, detection, restoration, xoff_frames",
            "switch_agent": "the switches' OpenFlow agents per kind: ideal, hardware or "
                            "parameters (docs/failover.md)",
            "control": "the switches' control plane: openflow (default) or bgp (eBGP "
                       "between routers, docs/bgp.md)"}
TOPOLOGY_KEYS = {"defaults", "nodes", "links"}
DEFAULTS_KEYS = {"rate"}
NODE_KEYS = {"kind", "hash_seed", "pod", "plane", "bond"}
LINK_KEYS = {"endpoints", "rate", "role", "loss", "state", "delay", "jitter", "pfc_storm"}


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys instead of keeping the last."""


def _mapping_no_duplicates(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            dup = key in seen
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, f"unhashable key {key!r}", key_node.start_mark)
        if dup:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_no_duplicates)


def read_text(path, what):
    """The text of the file ``what`` names ("fabric file"), or one ConfigError."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(None, f"cannot read {what}: {e.strerror}", source=str(path))
    except UnicodeDecodeError:
        raise ConfigError(None, f"{what} is not UTF-8 text", source=str(path))


def load_file(path):
    """Read and validate a fabric file; raise ConfigError on any problem."""
    return load_text(read_text(path, "fabric file"), source=str(path))


def load_text(text, source="<fabric>"):
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(where, f"not valid YAML: {problem}", source=source)
    except (ValueError, TypeError, RecursionError) as e:  # e.g. bad timestamps, deep nesting
        raise ConfigError(None, f"not valid YAML: {e}", source=source)
    return parse(data, source=source)


def parse(data, source="<fabric>"):
    """Validate a fabric-file dictionary and return the ``Fabric``."""
    def fail(where, message):
        raise ConfigError(where, message, source=source)

    if not isinstance(data, dict):
        fail(None, "the file must be a mapping with 'name' and 'topology'")
    _reject_unknown(data, TOP_KEYS, "", fail)
    name = data.get("name", "fabric")
    if not isinstance(name, str) or not NAME_RE.match(name):
        fail("name", f"{name!r} is not a name (letters, digits, '-', '_'; at most 32)")
    topo = data.get("topology")
    if not isinstance(topo, dict):
        fail("topology", "missing or not a mapping of 'nodes' and 'links'")
    _reject_unknown(topo, TOPOLOGY_KEYS, "topology", fail)

    default_rate = None
    defaults = topo.get("defaults", {})
    if not isinstance(defaults, dict):
        fail("topology.defaults", "must be a mapping")
    _reject_unknown(defaults, DEFAULTS_KEYS, "topology.defaults", fail)
    if "rate" in defaults:
        default_rate = _rate(defaults["rate"], "topology.defaults.rate", fail)

    nodes = _parse_nodes(topo.get("nodes"), fail)
    by_name = {n.name: n for n in nodes}
    links = _parse_links(topo.get("links"), by_name, default_rate, fail)
    _check_attachment(nodes, links, fail)
    _check_bonds(nodes, links, fail)
    _check_connected(nodes, links, fail)
    layout = data.get("layout")
    if layout is not None:
        try:
            layout = layouts.parse(layout, "layout")
        except ConfigError as e:
            fail("layout", e.message)
    flow_control = _flow_control(data, fail)
    for i, lk in enumerate(links):
        if lk.delay_s is not None and flow_control != FlowControl.NONE:
            fail(f"topology.links[{i}].delay", "delay needs netem under the link's shaper, "
                                               "where the lossless fabric has its classes: "
                                               "not both")
        if lk.pfc_storm is not None and flow_control != FlowControl.PFC:
            fail(f"topology.links[{i}].pfc_storm", "a PFC storm needs a lossless fabric "
                                                   "(lossless: true)")
    pfc = ()
    if "pfc" in data:
        try:
            pfc = parse_settings(data["pfc"])
        except ValueError as e:
            where, _, msg = str(e).partition(": ")
            fail(where, msg)
    cluster = None
    if "servers" in data:
        try:
            cluster = parse_cluster(data["servers"], data.get("placement", "auto"))
        except ConfigError as e:
            fail(e.where, e.message)
    elif "placement" in data:
        fail("placement", "placement needs servers: give the servers to place on")
    agents = None
    if "switch_agent" in data:
        try:
            agents = parse_fabric(data["switch_agent"])
        except ConfigError as e:
            fail(e.where, e.message)
    control = Control.default()
    if "control" in data:
        value = data["control"]
        if not isinstance(value, str) or value not in Control.names():
            fail("control", f"{value!r}: use one of {', '.join(Control.names())}")
        control = Control(value)
    return Fabric(name=name, nodes=tuple(nodes), links=tuple(links), layout=layout,
                  flow_control=flow_control, pfc=pfc, cluster=cluster, switch_agent=agents,
                  control=control)


def _flow_control(data, fail):
    """``lossless: true`` or ``flow_control: pfc`` (not both, unless they agree)."""
    modes = {}
    for key in ("lossless", "flow_control"):
        if key in data:
            try:
                modes[key] = parse_flow_control(data[key], key)
            except ValueError as e:
                fail(key, str(e).split(": ", 1)[-1])
    if len(set(modes.values())) > 1:
        fail("lossless", f"lossless: {data['lossless']} and flow_control: "
                         f"{data['flow_control']} disagree: give one of them")
    return next(iter(modes.values()), FlowControl.NONE)


def _reject_unknown(mapping, allowed, where, fail):
    for key in mapping:
        if key not in allowed:
            place = f"{where}.{key}" if where else str(key)
            fail(place, f"unknown key {key!r} (allowed: {', '.join(sorted(allowed))})")


def _rate(value, where, fail):
    try:
        return parse_rate(value)
    except ValueError as e:
        fail(where, str(e))


def _optional_int(entry, key, where, fail, lo=0, hi=2**32 - 1):
    if key not in entry:
        return None
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        fail(f"{where}.{key}", f"{value!r} is not an integer in {lo}..{hi}")
    return value


def _parse_nodes(raw, fail):
    if not isinstance(raw, dict) or not raw:
        fail("topology.nodes", "missing or empty; give a mapping of node name -> {kind: ...}")
    nodes = []
    for name, entry in raw.items():
        where = f"topology.nodes.{name}"
        if not isinstance(name, str) or not NAME_RE.match(name):
            fail(where, f"{name!r} is not a node name "
                        "(starts with a letter; letters, digits, '-', '_'; at most 32)")
        if not isinstance(entry, dict):
            fail(where, "must be a mapping with at least 'kind'")
        _reject_unknown(entry, NODE_KEYS, where, fail)
        kind = entry.get("kind")
        if kind not in KINDS:
            fail(f"{where}.kind", f"unknown kind {kind!r} (one of: {', '.join(KINDS)})")
        seed = _optional_int(entry, "hash_seed", where, fail)
        if seed is not None and kind == HOST:
            fail(f"{where}.hash_seed", "only switches have an ECMP hash seed")
        bond = entry.get("bond")
        if bond is not None:
            if kind != HOST:
                fail(f"{where}.bond", "only hosts have a bond (one NIC on several ToRs)")
            if bond not in BOND_MODES:
                fail(f"{where}.bond", f"unknown bond mode {bond!r} (one of: {', '.join(BOND_MODES)})")
        nodes.append(Node(name=name, kind=kind, hash_seed=seed,
                          pod=_optional_int(entry, "pod", where, fail, hi=4095),
                          plane=_optional_int(entry, "plane", where, fail, hi=15), bond=bond))
    return nodes


def _parse_endpoint(text, where, by_name, fail):
    if not isinstance(text, str) or text.count(":") != 1:
        fail(where, f"{text!r} is not 'node:port' (e.g. \"leaf1:eth1\")")
    node, port = text.split(":")
    if node not in by_name:
        fail(where, f"unknown node {node!r}")
    m = PORT_RE.match(port)
    if not m:
        fail(where, f"port {port!r} of {node!r} is not 'eth<N>'")
    number = int(m.group(1))
    if not by_name[node].is_host and not 1 <= number <= MAX_OFPORT:
        fail(where, f"switch port {port!r} of {node!r}: N must be 1..{MAX_OFPORT} "
                    "(it is the OpenFlow port number)")
    if by_name[node].is_host and number > 99:
        fail(where, f"host port {port!r} of {node!r}: N must be 0..99")
    return Endpoint(node, f"eth{number}")


def _parse_links(raw, by_name, default_rate, fail):
    if not isinstance(raw, list) or not raw:
        fail("topology.links", "missing or empty; give a list of {endpoints: [a, b], rate: ...}")
    links, used = [], {}
    for i, entry in enumerate(raw):
        where = f"topology.links[{i}]"
        if not isinstance(entry, dict):
            fail(where, "must be a mapping with 'endpoints' and 'rate'")
        _reject_unknown(entry, LINK_KEYS, where, fail)
        eps = entry.get("endpoints")
        if not isinstance(eps, list) or len(eps) != 2:
            fail(f"{where}.endpoints", "must be a list of two 'node:port' strings")
        a = _parse_endpoint(eps[0], f"{where}.endpoints[0]", by_name, fail)
        b = _parse_endpoint(eps[1], f"{where}.endpoints[1]", by_name, fail)
        for j, ep in enumerate((a, b)):
            key = (ep.node, ep.number)
            if key in used:
                fail(f"{where}.endpoints[{j}]",
                     f"port {ep} is already used by {used[key]}")
            used[key] = where
        if a.node == b.node:
            fail(f"{where}.endpoints", f"link from {a.node!r} to itself")
        if by_name[a.node].is_host and by_name[b.node].is_host:
            fail(f"{where}.endpoints", "hosts connect to switches, not to each other")
        if "rate" in entry:
            rate = _rate(entry["rate"], f"{where}.rate", fail)
        elif default_rate is not None:
            rate = default_rate
        else:
            fail(f"{where}.rate", "missing (or set topology.defaults.rate)")
        role = entry.get("role")
        if role is not None:
            if role not in LINK_ROLES:
                fail(f"{where}.role", f"unknown role {role!r} (one of: {', '.join(LINK_ROLES)})")
            host = next((n for n in (by_name[a.node], by_name[b.node]) if n.is_host), None)
            if host is not None and host.bond != "active-standby":
                fail(f"{where}.role", "only switch-to-switch links and the links of a host "
                                      "with bond: active-standby can be standby")
        storm = entry.get("pfc_storm")
        if storm is not None and storm not in (a.node, b.node):
            fail(f"{where}.pfc_storm", f"{storm!r}: the node of the end that storms, "
                                       f"{a.node} or {b.node}")
        links.append(Link(a=a, b=b, rate_bps=rate, role=role, pfc_storm=storm,
                          **_impairments(entry, where, fail)))
    return links


def _impairments(entry, where, fail):
    """``loss: 2%``, ``state: up|down``, ``delay: 5ms``, ``jitter: 1ms`` of one link."""
    out = {}
    if "loss" in entry:
        raw = entry["loss"]
        text = str(raw).strip()
        try:
            pct = float(text[:-1] if text.endswith("%") else text)
        except ValueError:
            pct = None
        if isinstance(raw, bool) or pct is None or not 0 < pct <= 100:
            fail(f"{where}.loss", f"{raw!r}: a share of frames lost, 0 < loss <= 100 %, "
                                  "e.g. 2%")
        out["loss_pct"] = pct
    if "state" in entry:
        if entry["state"] not in ("up", "down"):
            fail(f"{where}.state", f"{entry['state']!r}: up or down")
        out["state"] = entry["state"]
    for key in ("delay", "jitter"):
        if key in entry:
            try:
                out[f"{key}_s"] = parse_duration(str(entry[key]))
            except ValueError:
                fail(f"{where}.{key}", f"{entry[key]!r}: a duration with its unit, e.g. 5ms")
    if "jitter_s" in out and "delay_s" not in out:
        fail(f"{where}.jitter", "jitter needs a delay on the same link")
    return out


def _check_attachment(nodes, links, fail):
    attached = {ep.node for lk in links for ep in (lk.a, lk.b)}
    for n in nodes:
        if n.name not in attached:
            fail(f"topology.nodes.{n.name}", "has no link")
    if not any(n.is_host for n in nodes):
        fail("topology.nodes", "no host: a fabric needs at least one node of kind 'host'")
    if not any(not n.is_host for n in nodes):
        fail("topology.nodes", "no switch: a fabric needs at least one leaf")


def _check_bonds(nodes, links, fail):
    """A bonded host: 2+ links, each to a different leaf; active-standby: one active."""
    for n in nodes:
        if n.bond is None:
            continue
        where = f"topology.nodes.{n.name}.bond"
        mine = [lk for lk in links if n.name in (lk.a.node, lk.b.node)]
        peers = [lk.other(n.name).node for lk in mine]
        if len(mine) < 2:
            fail(where, f"a bond needs two or more links; {n.name!r} has {len(mine)}")
        if len(set(peers)) != len(peers):
            fail(where, f"the links of {n.name!r} must go to different switches (non-stacked ToRs)")
        active = [lk for lk in mine if lk.role is None]
        if n.bond == "active-standby" and len(active) != 1:
            fail(where, f"active-standby needs exactly one active link (the others "
                        f"'role: standby'); {n.name!r} has {len(active)}")


def _check_connected(nodes, links, fail):
    """Every switch reaches every other over switch-to-switch links.

    Hosts do not forward, so a path through a host does not count.  When every
    switch carries a ``plane`` label (a multi-plane fabric, whose planes are
    joined only inside the hosts), each plane must be connected on its own.
    """
    switch_nodes = [n for n in nodes if not n.is_host]
    if all(n.plane is not None for n in switch_nodes):
        planes = sorted({n.plane for n in switch_nodes})
        for plane in planes:
            _check_component([n.name for n in switch_nodes if n.plane == plane], links, fail)
        plane_of = {n.name: n.plane for n in switch_nodes}
        hosts = {n.name for n in nodes if n.is_host}
        touched = {}                    # host -> planes its ports reach
        for lk in links:
            for h, sw in ((lk.a.node, lk.b.node), (lk.b.node, lk.a.node)):
                if h in hosts and sw in plane_of:
                    touched.setdefault(h, set()).add(plane_of[sw])
        joined = {planes[0]}
        while True:
            more = set().union(*(t for t in touched.values() if t & joined)) - joined
            if not more:
                break
            joined |= more
        if joined != set(planes):
            fail("topology.links", f"planes {sorted(set(planes) - joined)} share no host "
                                   f"with plane {planes[0]}: no path between them")
    else:
        _check_component([n.name for n in switch_nodes], links, fail)


def _check_component(switches, links, fail):
    """``switches`` (names) reach each other over links among themselves."""
    adj = {name: set() for name in switches}
    for lk in links:
        if lk.a.node in adj and lk.b.node in adj:
            adj[lk.a.node].add(lk.b.node)
            adj[lk.b.node].add(lk.a.node)
    start = switches[0]
    seen, todo = {start}, [start]
    while todo:
        for nxt in adj[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    cut = [name for name in switches if name not in seen]
    if cut:
        shown = ", ".join(cut[:5]) + (" ..." if len(cut) > 5 else "")
        fail("topology.links", f"the fabric is disconnected: {shown} cannot reach {start!r} "
                               "over switch-to-switch links")


def dump(fabric):
    """The fabric as fabric-file YAML text (round-trips through ``load_text``)."""
    return yaml.safe_dump(fabric.to_spec(), sort_keys=False, default_flow_style=None, width=100)
