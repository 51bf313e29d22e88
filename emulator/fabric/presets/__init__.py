"""Built-in fabrics generated from parameters.

A preset returns the same ``Fabric`` a file would (``show --yaml`` writes it
out as one).  Parameters come from the command line as ``key=value`` strings
and are validated like a file: one ``ConfigError`` naming the parameter.

leaf-spine numbering: hosts h1..hN leaf by leaf; on leaf L, ports eth1..ethH
face its hosts and eth(H+1)..eth(H+S) face spine1..spineS; on a spine, port
ethL faces leafL.  Oversubscription = H * host_rate / (S * uplink_rate).

The other Clos presets (three-tier, dual-link, dual-plane, multi-plane) live
in ``clos``, the dragonflies in ``dragonfly``, the typed parameters in
``params``; all are listed in ``PRESETS``.

May import: ``emulator.errors`` and ``emulator.fabric``'s model.
"""

import dataclasses

from emulator.errors import ConfigError
from emulator.fabric.lossless import parse_flow_control, parse_settings
from emulator.fabric.model import Endpoint, Fabric, Link, Node
from emulator.fabric.presets import clos as presets_clos
from emulator.fabric.presets import dragonfly as presets_dragonfly
from emulator.fabric.presets.params import Param, rate_for_ratio, resolve_params
from emulator.fabric.units import format_rate

LEAF_SPINE = (
    Param("spines", "int", 4, 1, 32, "spine switches"),
    Param("leaves", "int", 4, 1, 64, "leaf switches (ToRs)"),
    Param("hosts_per_leaf", "int", 2, 1, 64, "hosts on each leaf"),
    Param("host_rate", "rate", "40Mbps", doc="host <-> leaf link rate"),
    Param("uplink_rate", "rate", "40Mbps", doc="leaf <-> spine link rate"),
    Param("oversubscription", "float", None, 0.01, 100,
          "if given, sets uplink_rate = hosts_per_leaf*host_rate/(spines*ratio)"),
)


def leaf_spine(**given):
    v = resolve_params("leaf-spine", LEAF_SPINE, given)
    S, L, H = v["spines"], v["leaves"], v["hosts_per_leaf"]
    rate_for_ratio("leaf-spine", v, given, "uplink_rate", "oversubscription",
                   H * v["host_rate"], S)
    leaves = [f"leaf{i}" for i in range(1, L + 1)]
    nodes, links = presets_clos.hosts_on_leaves(leaves, H, v["host_rate"])
    nodes += [Node(name, "leaf") for name in leaves]
    nodes += [Node(f"spine{i}", "spine") for i in range(1, S + 1)]
    for leaf in range(1, L + 1):
        for s in range(1, S + 1):
            links.append(Link(Endpoint(f"leaf{leaf}", f"eth{H + s}"),
                              Endpoint(f"spine{s}", f"eth{leaf}"), v["uplink_rate"]))
    return Fabric(name=f"leaf-spine-{S}s{L}l{H}h", nodes=tuple(nodes), links=tuple(links),
                  params=presets_clos.param_values(LEAF_SPINE, v))


PRESETS = {"leaf-spine": (leaf_spine, LEAF_SPINE), **presets_clos.PRESETS,
           **presets_dragonfly.PRESETS}


# parameters every preset takes: the fabric's link-level flow control and its settings
# (fabric.lossless; -P pfc_watchdog=forward is the file's pfc: {watchdog: forward})
COMMON = ("lossless", "flow_control")
PFC_PARAMS = ("pfc_watchdog", "pfc_detection", "pfc_restoration", "pfc_xoff_frames")


def build(name, params=None):
    """Build preset ``name`` with ``params`` (name -> value strings)."""
    if name not in PRESETS:
        raise ConfigError("preset", f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    params = dict(params or {})
    modes = set()
    for key in COMMON:
        if key in params:
            try:
                modes.add(parse_flow_control(params.pop(key), key))
            except ValueError as e:
                raise ConfigError(f"-P {key}", str(e).split(": ", 1)[-1])
    if len(modes) > 1:
        raise ConfigError("-P lossless", "lossless and flow_control disagree: give one")
    settings = {k[len("pfc_"):]: params.pop(k) for k in PFC_PARAMS if k in params}
    try:
        pfc = parse_settings(settings, "-P pfc") if settings else ()
    except ValueError as e:
        where, _, msg = str(e).partition(": ")
        raise ConfigError(where.replace("-P pfc.", "-P pfc_"), msg)
    fabric = PRESETS[name][0](**params)
    changes = {"flow_control": modes.pop()} if modes else {}
    return dataclasses.replace(fabric, pfc=pfc, **changes) if changes or pfc else fabric


def parse_assignments(items):
    """``["spines=4", "host_rate=40Mbps"]`` -> dict; ConfigError on a bad item."""
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--param", f"{item!r} is not key=value")
        out[key.strip().replace("-", "_")] = value.strip()
    return out


def describe(name):
    """Help text: each parameter with its default."""
    _, schema = PRESETS[name]
    lines = []
    for p in schema:
        default = p.default if p.default is not None else "-"
        lines.append(f"  {p.name:<18} {p.kind:<6} default {default!s:<8} {p.doc}")
    lines.append(f"  {'lossless':<18} {'bool':<6} default {'false':<8} PFC on every link "
                 "(flow_control=pfc)")
    lines.append(f"  {'flow_control':<18} {'choice':<6} default {'none':<8} none | pfc | credit")
    lines.append(f"  {'pfc_watchdog':<18} {'choice':<6} default {'drop':<8} drop | forward | off")
    lines.append(f"  {'pfc_detection':<18} {'time':<6} default {'1s':<8} watchdog detection")
    lines.append(f"  {'pfc_restoration':<18} {'time':<6} default {'1s':<8} watchdog restoration")
    lines.append(f"  {'pfc_xoff_frames':<18} {'float':<6} default {'8':<8} xoff per ingress port")
    return "\n".join(lines)


def oversubscription(fabric, leaf):
    """Downlink capacity over uplink capacity of one leaf."""
    down = sum(lk.rate_bps for lk in fabric.links_of(leaf)
               if fabric.node(lk.other(leaf).node).tier < fabric.node(leaf).tier)
    up = sum(lk.rate_bps for lk in fabric.uplinks(leaf))
    return down / up if up else float("inf")


__all__ = ["build", "PRESETS", "parse_assignments", "describe", "oversubscription", "format_rate"]
