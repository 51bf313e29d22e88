"""Adaptive routing's model, pure: where switches decide, among which ports,
how a choice travels, and how long a flowlet and a port's load last.

Where.  A switch decides the frames that arrive from below (a host, or a switch
of a lower tier) for a destination it reaches by several shortest paths: a
leaf for a remote leaf's hosts, an aggregation switch for another pod's.
Frames from above follow their route: a valley (a frame a spine bounced back
to a leaf by fast-failover) is never sent up again from here.

Candidates.  A route's candidates are the ports on shortest paths to the
destination host over the whole fabric (as the controller's ECMP groups have
them with every link up).  A dead candidate is skipped by the program itself,
from the detection model's news: nothing waits for the controller.

How a choice travels.  The program marks the frame: the chosen port's mark,
DSCP ``MARK_BASE + port number`` (33-63), and the group bit of the Ethernet
source address, which no valid frame carries (a deciding port drops a frame
that arrives with it, as a bridge does), so a host's own DSCP is never taken
for a mark.  The OpenFlow flow ``in_port=deciding port, eth_src=01:..:00/01:..:00,
udp_dst=4791, ip_dscp=mark -> output:port`` (installed by the controller,
``controller.lb.adaptive_flows``) sends it there, and the port's egress program
writes the class's DSCP and the source address back before the frame leaves.
Marks never leave a switch; the RoCEv2 ICRC covers neither the TOS byte nor
the Ethernet header; ECN bits are kept.

Time in frame times.  A frame time is a full frame's serialization at the
port's rate (0.83 ms for 4170 bytes at 40 Mbit/s).  The flowlet timer, the
load's half-life and the queue bands are counted in frame times, so the
emulated fabric (slower than hardware by its rate ratio) keeps the ratios a
switch has.  See docs/load-balancing.md for the values and why.
"""

import math
import socket
import struct
from collections import deque

from emulator.errors import ConfigError
from lab.modes import LB

MODES = {LB.DLB: 1, LB.PACKET: 2}           # --lb values -> the program's mode
MARK_BASE = 32                            # a port's mark: DSCP MARK_BASE + port
MAX_MARKED_PORT = 63 - MARK_BASE
MAX_CAND = 8                              # ar.bpf.c's MAX_CAND
FLOWSETS = 1024                           # ar_common.h: flowlet slots per switch
HOT_BAND = 3                              # ar.bpf.c: a queue of 4+ frames is building
MOVE_BAND = 5                             # a live flowlet whose port's queue reaches 16
                                          # frames moves to a port whose queue is 3 bands
                                          # shorter
FLOWLET_FRAMES = 16                       # the flowlet inactivity timer
HALF_LIFE_FRAMES = 16                     # the port load's half-life
PENDING_FRAMES = 8                        # decided bytes older than this are forgotten
PENDING_MIN_NS = 5_000_000                # ... but never sooner than Open vSwitch's batches

PORT_FIELDS = [("in", "q"), ("out", "q"), ("sent", "q"), ("sent_in", "q"), ("sent_ns", "Q"),
               ("load", "Q"), ("load_ns", "Q"), ("evac_ns", "Q"), ("frames", "Q"), ("flowlets", "Q"), ("moved_in", "Q"),
               ("moved_out", "Q"), ("hot", "Q"), ("hot_ns", "Q"), ("shun_ns", "Q"), ("react_sum", "Q"),
               ("react_n", "Q"), ("react_max", "Q"), ("rescued", "Q"), ("mark", "Q"),
               ("frame", "Q"), ("half_ns", "Q"), ("load_full", "Q"), ("limit", "q"),
               ("ifindex", "Q")]
PORT_NAMES = [n for n, _ in PORT_FIELDS]
CONTROL_FIELDS = [("down", "Q"), ("down_ns", "Q"), ("corr", "q"), ("late", "Q")]
CONFIG_FIELDS = [("sw", "Q"), ("up_key", "q"), ("decide", "Q"), ("mode", "Q"), ("dscp", "Q"),
                 ("flowlet_ns", "Q"), ("pend_ns", "Q"), ("key", "q"), ("move_band", "Q")]
ROUTE_KEY = struct.Struct("<II")          # struct ar_route_key: sw, dst (network order)
ROUTE = struct.Struct(f"<I{MAX_CAND}I")   # struct ar_route
FLOWLET_SIZE = 16                         # struct ar_flowlet


def mark(port, where=""):
    """The DSCP carrying "output to ``port``" inside a switch."""
    if not 1 <= port <= MAX_MARKED_PORT:
        raise ConfigError("--lb", f"{where}port {port}: adaptive routing marks ports "
                                  f"1-{MAX_MARKED_PORT} (a switch with more uplinks "
                                  "cannot use --lb dlb|packet)")
    return MARK_BASE + port


def route_key(sw_index, ip):
    """``ar_routes``' key: the switch's number and the destination, network order."""
    return ROUTE_KEY.pack(sw_index, struct.unpack("<I", socket.inet_aton(ip))[0])


def flow_hash(src, dst, sport, dport=4791):
    """ar_common.h's ``flow_hash`` of a RoCEv2 frame (u32 arithmetic, the header
    fields as the program loads them)."""
    m = 0xFFFFFFFF
    s = struct.unpack("<I", socket.inet_aton(src))[0]
    d = struct.unpack("<I", socket.inet_aton(dst))[0]
    ports = struct.unpack("<HH", struct.pack("!HH", sport, dport))
    h = s * 0x9E3779B1 & m
    h ^= (d + 0x7F4A7C15 + (h << 6 & m) + (h >> 2)) & m
    h ^= ((ports[0] << 16 | ports[1]) + 0x7F4A7C15 + (h << 6 & m) + (h >> 2)) & m
    h ^= h >> 16
    h = h * 0x85EBCA6B & m
    h ^= h >> 13
    return h


def flowlet_slot(sw_index, src, dst, sport):
    """The flowlet slot of a flow at switch number ``sw_index``."""
    return sw_index * FLOWSETS + (flow_hash(src, dst, sport) & (FLOWSETS - 1))


def frame_ns(frame_bytes, rate_bps):
    return int(frame_bytes * 8 / rate_bps * 1e9)


def timers(frame_bytes, rate_bps, flowlet_frames=FLOWLET_FRAMES):
    """The program's times at a port of ``rate_bps``: flowlet timer, load
    half-life, how long decided bytes count as pending (ns), and the load's
    steady value at the port's full rate (bytes)."""
    ft = frame_ns(frame_bytes, rate_bps)
    half = HALF_LIFE_FRAMES * ft
    return {"flowlet_ns": flowlet_frames * ft, "half_ns": half,
            "pend_ns": max(PENDING_MIN_NS, PENDING_FRAMES * ft),
            "load_full": int(rate_bps / 8 * half / 1e9 / math.log(2))}


def adjacency(topo, dead=frozenset()):
    """{switch: [(port, peer switch)]} over switch-to-switch links; a link with an
    end in ``dead`` {(switch, port)} is left out."""
    names = {s["name"] for s in topo["switches"]}
    return {s["name"]: [(p["port"], p["peer"]) for p in s["ports"] if p["peer"] in names
                        and (s["name"], p["port"]) not in dead
                        and (p["peer"], p["peer_port"]) not in dead]
            for s in topo["switches"]}


def _distances(adj, start, edge):
    """Hops from every switch to ``start`` (BFS; ``edge`` switches are not transit)."""
    dist, todo = {start: 0}, deque([start])
    while todo:
        node = todo.popleft()
        if node in edge and node != start:
            continue
        for _, peer in adj[node]:
            if peer not in dist:
                dist[peer] = dist[node] + 1
                todo.append(peer)
    return dist


def routes(topo, dead=frozenset()):
    """{(switch, host ip): (candidate port, ...)} for every route with several
    shortest next hops (sorted ports), at switches that are not a NIC; over the
    links without an end in ``dead`` {(switch, port)}."""
    adj = adjacency(topo, dead)
    edge = {s["name"] for s in topo["switches"] if s["kind"] == "nic"}
    out, cache = {}, {}
    for host in topo["hosts"]:
        for hp in host["ports"]:
            leaf = hp["switch"]
            if leaf not in cache:
                cache[leaf] = _distances(adj, leaf, edge)
            dist = cache[leaf]
            for sw, nbrs in adj.items():
                if sw in edge or sw not in dist or sw == leaf:
                    continue
                hops = tuple(sorted({p for p, peer in nbrs
                                     if dist.get(peer) == dist[sw] - 1
                                     and (peer not in edge or peer == leaf)}))
                if len(hops) >= 2:
                    out[(sw, hp["ip"])] = hops[:MAX_CAND]
    return out


def plan(topo):
    """What the stage attaches: ``tracked`` [(switch, port)] (candidate ports:
    queue counted at their egress and far end), ``deciders`` [(switch, port)]
    (ingress ports whose frames the switch decides) and the routes."""
    rts = routes(topo)
    tracked = sorted({(sw, p) for (sw, _), ports in rts.items() for p in ports})
    tier = {s["name"]: s.get("tier") or 0 for s in topo["switches"]}
    deciding = {sw for sw, _ in rts}
    deciders = []
    for s in topo["switches"]:
        if s["name"] not in deciding:
            continue
        for p in s["ports"]:
            if p["peer_kind"] == "host" or tier.get(p["peer"], 99) < tier[s["name"]]:
                deciders.append((s["name"], p["port"]))
    for sw, p in tracked:
        mark(p, f"{sw} ")
    return {"tracked": tracked, "deciders": sorted(deciders), "routes": rts}


def repaired(topo, plan_, keys, dead):
    """The routes once the control plane has routed around the ports ``dead``
    {(switch, port)}: the shortest paths over the live links, kept to the
    installed stage (routes it decides, candidates it tracks in ``keys``).  A
    route left with fewer than two candidates is None: the controller's own
    route holds."""
    now = routes(topo, dead)
    out = {}
    for key in plan_["routes"]:
        live = tuple(p for p in now.get(key, ()) if (key[0], p) in keys)
        out[key] = live if len(live) >= 2 else None
    return out


def reading(entries, downs=None):
    """Counts and reaction times from port entries {name: dict of PORT fields};
    ``downs`` {name: monotonic ns the port was last told down}."""
    ports, moved = {}, 0
    downs = downs or {}
    for name, e in sorted(entries.items()):
        r = {"frames": e["frames"], "flowlets": e["flowlets"], "moved_in": e["moved_in"],
             "moved_out": e["moved_out"]}
        if e["react_n"]:
            r["queue_reaction_ms"] = {"mean": round(e["react_sum"] / e["react_n"] / 1e6, 3),
                                      "max": round(e["react_max"] / 1e6, 3),
                                      "episodes": e["react_n"]}
        down = downs.get(name)
        if down and e["evac_ns"] >= down:
            r["down_reaction_ms"] = round((e["evac_ns"] - down) / 1e6, 3)
        moved += e["moved_in"]
        ports[name] = r
    return {"frames": sum(r["frames"] for r in ports.values()),
            "flowlets": sum(r["flowlets"] for r in ports.values()),
            "moved": moved, "ports": ports}
