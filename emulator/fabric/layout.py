"""Which Open vSwitch instance carries which switch: the fabric's datapath layout.

Model.  A datapath instance is one ``ovsdb-server`` + ``ovs-vswitchd`` pair
(``dataplane.ovs.instances``).  The userspace datapath forwards every port of an
instance in that daemon's one main thread, so a port change, a BFD burst or
a busy moment on one switch stalls every switch of its instance, and never
those of another.  Layouts:

  shared       every switch in the machine's own Open vSwitch (one main loop)
  per-switch   one instance per switch
  N            N instances (an integer >= 1): each tier cut into N runs of
               consecutive switches, instance k taking run k of every tier
               (leaf1-2 + spine1-2, leaf3-4 + spine3-4 for 2 on the default
               fabric); as many as the switches or more is per-switch
  pod          one instance per pod; switches without a pod (super-spines)
               share one more
  plane, rail  one instance per plane (a rail-optimized fabric's rail is its
               plane); switches without a plane share one more
  auto         chosen from the machine and the fabric (``choose``)

Whatever the layout, a host's NIC switch (tier 0: the bond of a dual-ToR or
dual-plane host) goes with the first leaf it attaches to, so a host's ports
and its leaf's are served by one daemon.

Everything here is pure: a plan in, a placement out.
"""

from emulator.errors import ConfigError

NAMED = ("shared", "per-switch", "pod", "plane", "rail", "auto")

# On this project's 2-core machines one instance batches best: two instances lost
# 2 % and one per switch 19 % of 6000 pps flows that one instance forwarded
# whole, while a cut stalled other flows 14.0 ms in one instance against 9.4 ms
# in two (docs/platform.md, docs/datapath-instances.md).  Below this many cores the
# automatic layout keeps capacity.
ISOLATION_CORES = 4


def parse(text, where="--layout"):
    """The layout's text, checked: a NAMED value or an integer count."""
    text = str(text).strip().lower()
    if text in NAMED:
        return text
    try:
        n = int(text)
    except ValueError:
        raise ConfigError(where, f"unknown layout {text!r}: use shared, per-switch, pod, "
                                 "plane, rail, auto or a number of instances")
    if n < 1:
        raise ConfigError(where, f"{n} instances: a layout needs at least 1")
    return str(n)


def resolve(fabric, cores, datapath_type="netdev", env=None, asked=None):
    """(layout, why) of a run: ``asked`` (``--layout``), else the fabric's own (a
    fabric file's ``layout:``), else ``$FABRIC_LAB_LAYOUT`` in ``env``, else
    ``auto``, which ``choose`` settles."""
    asked, why = asked if asked is not None else fabric.layout, "asked for"
    if asked is None and (env or {}).get("FABRIC_LAB_LAYOUT"):
        asked, why = parse(env["FABRIC_LAB_LAYOUT"], "FABRIC_LAB_LAYOUT"), \
            "from FABRIC_LAB_LAYOUT"
    if asked in (None, "auto"):
        return choose(len(fabric.switches), cores, datapath_type)
    return asked, why


def choose(switches, cores, datapath_type="netdev"):
    """(layout, why) for ``auto`` on a fabric of ``switches`` switches."""
    if datapath_type == "system":
        return "shared", ("kernel datapath: the kernel forwards every port, the daemon's "
                          "main loop carries no frames")
    if cores < ISOLATION_CORES:
        return "shared", (f"{cores} cores: one Open vSwitch main loop carries the most "
                          "faithful traffic (more instances trade capacity for isolation)")
    n = min(cores - 1, switches)
    return str(n), f"{cores} cores: {n} instances, one core left for the hosts and controller"


def place(topo, layout):
    """[(instance name, [switch names])] for ``layout``; [] for shared.

    Instances are named ``ovs0``, ``ovs1``, ... in a stable order; an
    instance is never empty."""
    if layout == "shared":
        return []
    switches = topo["switches"]
    fabric = [sw for sw in switches if sw["tier"] > 0]
    if layout == "per-switch" or (layout.isdigit() and int(layout) >= len(fabric)):
        groups = [[sw["name"]] for sw in fabric]
    elif layout in ("pod", "plane", "rail"):
        key = "plane" if layout == "rail" else layout
        values = sorted({sw[key] for sw in fabric if sw[key] is not None})
        if not values:
            raise ConfigError("--layout", f"layout {layout}: this fabric has no "
                                          f"{key}s; use a number of instances or per-switch")
        groups = [[sw["name"] for sw in fabric if sw[key] == v] for v in values]
        rest = [sw["name"] for sw in fabric if sw[key] is None]
        if rest:
            groups.append(rest)
    else:
        n = min(int(layout), len(fabric))
        groups = [[] for _ in range(n)]
        for tier in sorted({sw["tier"] for sw in fabric}):
            members = [sw["name"] for sw in fabric if sw["tier"] == tier]
            for i, name in enumerate(members):
                groups[i * n // len(members)].append(name)
    home = {name: k for k, group in enumerate(groups) for name in group}
    for sw in switches:
        if sw["tier"] == 0:
            leaves = [p["peer"] for p in sw["ports"] if p["peer"] in home]
            groups[home[leaves[0]] if leaves else 0].append(sw["name"])
    return [(f"ovs{k}", group) for k, group in enumerate(g for g in groups if g)]


def crossing_links(topo, placement):
    """How many switch-to-switch links join two instances."""
    home = {name: k for k, (_, group) in enumerate(placement) for name in group}
    seen = 0
    for sw in topo["switches"]:
        for p in sw["ports"]:
            if p["peer_kind"] != "host" and sw["name"] < p["peer"] \
                    and home.get(sw["name"]) != home.get(p["peer"]):
                seen += 1
    return seen


def describe(placement):
    """One line: how many instances, and their switches."""
    if not placement:
        return "shared (every switch in the machine's Open vSwitch)"
    return f"{len(placement)} instances: " + "; ".join(
        f"{name} {','.join(group)}" for name, group in placement)
