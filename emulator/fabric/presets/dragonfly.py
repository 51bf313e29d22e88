"""Dragonfly presets: ``dragonfly`` (Kim, Dally, Scott, Abts, ISCA 2008) and
``dragonfly-plus`` (Shpiner et al., HOTI 2017).

Model.  ``groups`` groups joined all-to-all by global links, exactly one
global link between any two groups at the default ``groups = a*h + 1``.

* dragonfly: a group is ``a`` routers, fully meshed by local links; every
  router has ``p`` hosts and ``h`` global links.  Router ``g<i>r<j>`` (group
  i, router j, both from 1); hosts ``h1..`` router by router, group by group.
  Ports of a router: eth1..eth<p> its hosts, then eth<p+1>..eth<p+a-1> the
  other routers of its group in router order, then eth<p+a>..eth<p+a+h-1>
  its global links.
* dragonfly-plus: a group is a leaf-spine of ``leaves`` leaves (``g<i>l<j>``,
  ``p`` hosts each) and ``spines`` spines (``g<i>s<j>``); the spines hold the
  global links, ``h`` each.  Leaf ports: hosts, then spine1..; spine ports:
  leaf1.., then its global links.

Global wiring, consecutive (the "consecutive" arrangement of Camarero, Vallejo,
Beivide, ACM TACO 2014): number a group's global ports 0..G-1, G = a*h (or
spines*h), router by router (router j holds ports (j-1)*h .. j*h-1).  Port k
of group i goes to group ``(i + k + 1) mod groups``; it lands on that group's
port ``(groups - k - 2) mod groups``, so every pair of groups has one link and
ports ``groups-1..G-1`` stay unused when ``groups < G + 1``.

Labels: every switch carries ``pod`` = its group (the controller's dragonfly
routing and ``layout: pod`` read it); a link between switches of different
pods is a global link.  All links default to one rate (the textbook bounds
1/(ap) and 9/16 assume it); ``local_rate`` and ``global_rate`` may differ.
"""

from emulator.errors import ConfigError
from emulator.fabric.model import Endpoint, Fabric, Link, Node
from emulator.fabric.presets.params import Param, resolve_params


def _rates():
    return (Param("host_rate", "rate", "4Mbps", doc="host <-> router link rate"),
            Param("local_rate", "rate", "4Mbps", doc="link rate inside a group"),
            Param("global_rate", "rate", "4Mbps", doc="link rate between groups"))


DRAGONFLY = (
    Param("p", "int", 2, 1, 16, "hosts per router"),
    Param("a", "int", 4, 2, 16, "routers per group (fully meshed)"),
    Param("h", "int", 2, 1, 16, "global links per router"),
    Param("groups", "int", None, 2, 257, "groups (default a*h+1: one link per pair)"),
) + _rates()

DRAGONFLY_PLUS = (
    Param("p", "int", 2, 1, 16, "hosts per leaf"),
    Param("leaves", "int", 2, 1, 16, "leaves per group"),
    Param("spines", "int", 2, 1, 16, "spines per group (they hold the global links)"),
    Param("h", "int", 2, 1, 16, "global links per spine"),
    Param("groups", "int", None, 2, 257, "groups (default spines*h+1: one link per pair)"),
) + _rates()

MAX_SWITCHES = 512


def global_peer(i, k, groups):
    """(group, port) that global port ``k`` of group ``i`` (both from 0) is wired to."""
    return (i + k + 1) % groups, (groups - k - 2) % groups


def global_links(groups, ports):
    """[((i, k), (j, k'))] each global link once, i < j; ports of a group: 0..ports-1."""
    out = []
    for i in range(groups):
        for k in range(min(ports, groups - 1)):
            j, back = global_peer(i, k, groups)
            if i < j:
                out.append(((i, k), (j, back)))
    return out


def _groups(preset, v, ports):
    g = v["groups"] if v["groups"] is not None else ports + 1
    if g > ports + 1:
        raise ConfigError(f"preset {preset}: groups", f"{g} groups need {g - 1} global links "
                          f"per group, but a group has {ports} ({'a' if preset == 'dragonfly' else 'spines'}"
                          f"*h): raise h, give fewer groups or leave groups out (default {ports + 1})")
    return g


def _check_size(preset, n):
    if n > MAX_SWITCHES:
        raise ConfigError(f"preset {preset}", f"{n} switches: at most {MAX_SWITCHES}; "
                          "give fewer groups or smaller groups")


def dragonfly(**given):
    """Groups of ``a`` fully meshed routers, ``p`` hosts and ``h`` global links each."""
    v = resolve_params("dragonfly", DRAGONFLY, given)
    P, A, H = v["p"], v["a"], v["h"]
    G = _groups("dragonfly", v, A * H)
    _check_size("dragonfly", G * A)
    v["groups"] = G
    name = lambda i, j: f"g{i + 1}r{j + 1}"         # noqa: E731 (group i, router j from 0)
    nodes, links, k = [], [], 1
    for i in range(G):
        for j in range(A):
            for port in range(1, P + 1):
                nodes.append(Node(f"h{k}", "host", pod=i + 1))
                links.append(Link(Endpoint(f"h{k}", "eth0"), Endpoint(name(i, j), f"eth{port}"),
                                  v["host_rate"]))
                k += 1
    nodes += [Node(name(i, j), "leaf", pod=i + 1) for i in range(G) for j in range(A)]
    local = lambda j, m: P + (m if m < j else m - 1) + 1   # noqa: E731 (port of j toward m)
    for i in range(G):
        for j in range(A):
            for m in range(j + 1, A):
                links.append(Link(Endpoint(name(i, j), f"eth{local(j, m)}"),
                                  Endpoint(name(i, m), f"eth{local(m, j)}"), v["local_rate"]))
    port = lambda k: (k // H, P + A + k % H)            # noqa: E731 (router, eth number)
    for (i, k1), (j, k2) in global_links(G, A * H):
        (r1, e1), (r2, e2) = port(k1), port(k2)
        links.append(Link(Endpoint(name(i, r1), f"eth{e1}"), Endpoint(name(j, r2), f"eth{e2}"),
                          v["global_rate"]))
    return Fabric(f"dragonfly-{A}a{H}h{P}p{G}g", tuple(nodes), tuple(links),
                  tuple((p.name, v[p.name]) for p in DRAGONFLY))


def dragonfly_plus(**given):
    """Groups that are leaf-spines; the spines hold the global links."""
    v = resolve_params("dragonfly-plus", DRAGONFLY_PLUS, given)
    P, L, S, H = v["p"], v["leaves"], v["spines"], v["h"]
    G = _groups("dragonfly-plus", v, S * H)
    _check_size("dragonfly-plus", G * (L + S))
    v["groups"] = G
    leaf = lambda i, j: f"g{i + 1}l{j + 1}"            # noqa: E731
    spine = lambda i, j: f"g{i + 1}s{j + 1}"           # noqa: E731
    nodes, links, k = [], [], 1
    for i in range(G):
        for j in range(L):
            for port in range(1, P + 1):
                nodes.append(Node(f"h{k}", "host", pod=i + 1))
                links.append(Link(Endpoint(f"h{k}", "eth0"), Endpoint(leaf(i, j), f"eth{port}"),
                                  v["host_rate"]))
                k += 1
    nodes += [Node(leaf(i, j), "leaf", pod=i + 1) for i in range(G) for j in range(L)]
    nodes += [Node(spine(i, j), "spine", pod=i + 1) for i in range(G) for j in range(S)]
    for i in range(G):
        for j in range(L):
            for s in range(S):
                links.append(Link(Endpoint(leaf(i, j), f"eth{P + s + 1}"),
                                  Endpoint(spine(i, s), f"eth{j + 1}"), v["local_rate"]))
    port = lambda k: (k // H, L + k % H + 1)            # noqa: E731 (spine, eth number)
    for (i, k1), (j, k2) in global_links(G, S * H):
        (s1, e1), (s2, e2) = port(k1), port(k2)
        links.append(Link(Endpoint(spine(i, s1), f"eth{e1}"), Endpoint(spine(j, s2), f"eth{e2}"),
                          v["global_rate"]))
    return Fabric(f"dragonfly-plus-{L}l{S}s{H}h{P}p{G}g", tuple(nodes), tuple(links),
                  tuple((p.name, v[p.name]) for p in DRAGONFLY_PLUS))


PRESETS = {
    "dragonfly": (dragonfly, DRAGONFLY),
    "dragonfly-plus": (dragonfly_plus, DRAGONFLY_PLUS),
}
