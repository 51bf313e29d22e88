"""Lossless Ethernet, pure: flow-control modes, switch buffer thresholds, the pause
state of an ingress port, the PFC watchdog's state machine, paused-queue cycles.

Model (docs/lossless.md).  One lossless traffic class (priority 3) carries
RoCE data; RoCE ACKs and CNPs and small control frames (BFD, ARP, ICMP) ride
a strict-priority class above it, other traffic a best-effort class below.
A switch accounts its lossless buffer per ingress port, as ns-3 HPCC's MMU
does: the bytes that entered through a port and still wait in any of the
switch's egress queues.  Past ``xoff`` the port pauses its upstream peer's
lossless egress queue; at ``xon`` it resumes it.  ``headroom`` above xoff
absorbs what the upstream sends before the pause takes hold: the slowest
pause reaction the model allows for, at the link rate, plus one frame in
flight at each end.  The reaction is the emulator's (its agent's look, and
the kernel delivering frames already sent): a median of about 2 frame times,
with a tail of 10-20 on a busy 2-core machine, which 10 ms (12 frame times
at 40 Mbit/s) mostly covers.  A frame that would exceed xoff + headroom is
dropped at ingress: the pause came too late, and the verdict counts it as
the emulator's drop (a lossless run has none of the network's).

A dragonfly needs more than one lossless class: its minimal routes
(local, global, local) already close a cycle of buffer dependencies through
the groups (a run with one class deadlocked: a cycle through all 9 groups).
Dally's remedy is a class per routing phase, raised where a route starts a
new phase: here a frame leaves by a global link in the next class
(``phase_ports``), so minimal routing gets 2 classes and Valiant and UGAL,
with up to two global hops, 3 (``routing_classes``); every buffer dependency
then runs from a class to the same or a higher one, and none closes a cycle.

Times scale with the emulated rate, in frame times (a 4 KiB RoCE frame is
0.85 ms at 40 Mbit/s): pause reaction (a few frame times) << DCQCN's timers
(traffic.roce.dcqcn: 10-20 ms) << the watchdog's detection (1 s).  The watchdog
must also stay above the longest pause congestion alone causes: an 8:1
incast with PFC and no congestion control paused a sender's port for up to
0.31 s (PFC's unfairness: far senders starve), which a 200 ms watchdog took
for a storm.
"""

import math
from collections import Counter
from dataclasses import dataclass

from emulator.errors import ConfigError
from emulator.fabric.units import parse_duration
from lab.modes import FlowControl, Routing

FLOW_CONTROLS = FlowControl.names()
SECTION = "pfc"                       # the fabric file's lossless settings
LOSSLESS_PRIORITY = 3                 # the RoCE data class of AI fabrics (DSCP 26)
LOSSLESS_DSCP = 26                    # its DSCP: RoCE data of another DSCP is best effort
BEST_EFFORT_DSCP = 0                  # what a best-effort job or flow sends (CS0)
ROUTING_PHASES = {Routing.MINIMAL: 2, Routing.VALIANT: 3, Routing.UGAL: 3,
                  Routing.UGAL_L: 3}  # a dragonfly's classes
PHASE_MAX_PORTS = 31                  # with several classes the stamp byte names 31 ports
QUANTUM_BITS = 512                    # one PFC pause quantum, in bit times
MAX_QUANTA = 0xFFFF
WD_ACTIONS = ("drop", "forward", "off")
# a fabric's ``pfc:`` settings (file keys; -P pfc_<key>) -> PfcConfig fields
SETTINGS = {"watchdog": "wd_action", "detection": "wd_detect_s", "restoration": "wd_restore_s",
            "xoff_frames": "xoff_frames"}


def _groups(switches, links):
    """{switch: group} when the switches are a dragonfly's (every one in a group, some
    link between two groups: controller.dragonfly's rule), else None."""
    if not switches or None in switches.values():
        return None
    if not any(a in switches and b in switches and switches[a] != switches[b]
               for a, b in links):
        return None
    return switches


def routing_classes(fabric, routing):
    """The lossless priorities a run of ``fabric`` (emulator.fabric.model.Fabric) under
    ``routing`` needs: one per routing phase on a dragonfly, else 1.  ConfigError
    if a switch has more ports than the stamp names with several classes."""
    switches = {n.name: n.pod for n in fabric.nodes if not n.is_host}
    links = [(lk.a.node, lk.b.node) for lk in fabric.links]
    if _groups(switches, links) is None:
        return 1
    ports = Counter(n for link in links for n in link)
    worst = max(switches, key=ports.__getitem__)
    if ports[worst] > PHASE_MAX_PORTS:
        raise ConfigError("flow_control", f"a lossless dragonfly keeps a class per routing "
                          f"phase, which limits a switch to {PHASE_MAX_PORTS} ports; {worst} "
                          f"has {ports[worst]}: use fewer hosts or global links per switch")
    return ROUTING_PHASES.get(routing, max(ROUTING_PHASES.values()))


def phase_ports(topo):
    """{(switch, port number)} of the running ``topo`` whose egress starts a routing
    phase: a dragonfly's global links, both ways (none on other fabrics)."""
    pod = {sw["name"]: sw.get("pod") for sw in topo["switches"]}
    links = [(sw["name"], p["peer"]) for sw in topo["switches"] for p in sw["ports"]
             if p["peer_kind"] != "host"]
    if _groups(pod, links) is None:
        return set()
    return {(sw["name"], p["port"]) for sw in topo["switches"] for p in sw["ports"]
            if p["peer_kind"] != "host" and pod.get(p["peer"]) != pod[sw["name"]]}


def parse_settings(raw, where=SECTION):
    """``{watchdog: drop|forward|off, detection: 1s, restoration: 1s, xoff_frames: 8}``
    -> sorted ((PfcConfig field, value), ...); ValueError naming the key."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: a mapping of {', '.join(SETTINGS)}")
    out = {}
    for key, value in raw.items():
        if key not in SETTINGS:
            raise ValueError(f"{where}.{key}: unknown (known: {', '.join(SETTINGS)})")
        if key == "watchdog":
            if value not in WD_ACTIONS:
                raise ValueError(f"{where}.watchdog: {value!r}: one of {', '.join(WD_ACTIONS)}")
        elif key == "xoff_frames":
            try:
                value = float(value)
            except (TypeError, ValueError):
                value = None
            if value is None or not 3 <= value <= 64:
                raise ValueError(f"{where}.xoff_frames: {raw[key]!r}: a number of frames, "
                                 "3 to 64")
        else:
            try:
                value = parse_duration(str(value))
            except ValueError as e:
                raise ValueError(f"{where}.{key}: {e}")
            if not 0.05 <= value <= 60:
                raise ValueError(f"{where}.{key}: {raw[key]!r}: 50ms to 60s")
        out[SETTINGS[key]] = value
    return tuple(sorted(out.items()))


def parse_flow_control(value, where="flow_control"):
    """``none``/``pfc``, or a boolean for ``lossless`` (true means pfc).

    Returns the mode; ValueError with a message naming the accepted values."""
    if isinstance(value, bool):
        return FlowControl.PFC if value else FlowControl.NONE
    text = str(value).strip().lower()
    if text in ("true", "on", "yes", "1"):
        return FlowControl.PFC
    if text in ("false", "off", "no", "0"):
        return FlowControl.NONE
    if text in FLOW_CONTROLS:
        return FlowControl(text)
    raise ValueError(f"{where}: {value!r} is not a flow control (none, pfc, credit; "
                     "lossless: true or false)")


@dataclass(frozen=True)
class PfcConfig:
    """The switch buffer and watchdog settings of a lossless fabric (defaults
    documented in docs/lossless.md).  ``mode`` pfc, or credit: InfiniBand-style
    link-level credits on the same buffer accounting -- the upstream may send
    while the port's free buffer (its credits) covers what it can still send
    before it stops, and may again as soon as one frame's credit returns; no
    PFC frames, and the watchdog plays InfiniBand's head-of-queue lifetime."""
    mode: str = FlowControl.PFC
    reaction_s: float = 0.010          # Xoff crossing -> upstream stopped (docs/lossless.md)
    poll_s: float = 0.0005             # the pause model's sampling of ingress buffers
    xoff_frames: float = 8             # per ingress port: pause past this many full frames
    xon_gap_frames: float = 2          # resume this far below xoff
    quanta: int = MAX_QUANTA           # quanta in each XOFF frame; refreshed at half
    wd_detect_s: float = 1.0           # SONiC: detection 200 ms, restoration 200 ms, poll
    wd_restore_s: float = 1.0          # 200 ms at 100 Gbit/s; here 1200 frame times: PFC
    wd_poll_s: float = 0.1             # alone pauses a port for up to ~350 (docs/lossless.md)
    wd_action: str = "drop"

    def __post_init__(self):
        if self.wd_action not in WD_ACTIONS:
            raise ValueError(f"watchdog action {self.wd_action!r}: one of {WD_ACTIONS}")
        if self.mode not in (FlowControl.PFC, FlowControl.CREDIT):
            raise ValueError(f"flow control mode {self.mode!r}: pfc or credit")
        if not 0 < self.xon_gap_frames < self.xoff_frames:
            raise ValueError("0 < xon gap < xoff required")


def storm_end(text, topo):
    """The interface end (``node:port``) a ``--fault TARGET:pfc-storm`` makes pause
    its peer forever: a host's NIC port (``h1``), or the first node's port
    towards the second (``leaf1-spine1``: leaf1's port to spine1)."""
    where = f"fault {text}:pfc-storm"
    hosts = {h["name"]: h for h in topo["hosts"]}
    switches = {s["name"]: s for s in topo["switches"]}
    if text in hosts:
        return f"{text}:{hosts[text]['ports'][0]['port']}"
    left, sep, right = text.replace(":", "-").partition("-")
    if not sep or left not in hosts and left not in switches:
        raise ConfigError(where, f"{text!r}: a host (h1) or a link from the storming node "
                                 "(leaf1-spine1)")
    for sw in ([switches[left]] if left in switches else topo["switches"]):
        for p in sw["ports"]:
            if left in switches and p["peer"] == right:
                return f"{left}:{p['name']}"
            if left in hosts and sw["name"] == right and p["peer"] == left:
                return f"{left}:{p['peer_port']}"
    raise ConfigError(where, f"no link from {left!r} to {right!r}")


def paused_hop(text, topo):
    """(node, port) whose egress queue the storm ``text`` pauses: the storming
    end's peer."""
    node, port = storm_end(text, topo).split(":", 1)
    for sw in topo["switches"]:
        for p in sw["ports"]:
            if (p["peer"], p["peer_port"] if p["peer_kind"] == "host" else None) == (node, port):
                return sw["name"], p["name"]
            if sw["name"] == node and p["name"] == port and p["peer_kind"] == "host":
                return p["peer"], p["peer_port"]            # a ToR port pauses its host
            if sw["name"] == node and p["name"] == port:
                peer = next(s for s in topo["switches"] if s["name"] == p["peer"])
                back = next(q for q in peer["ports"] if q["port"] == p["peer_port"])
                return peer["name"], back["name"]
    return None


def deadlock_plan(topo):
    """A route change that breaks up-down routing into a cyclic buffer dependency,
    and the four streams that fill it (docs/lossless.md).

    With leaves L1-L4 and spines S1, S2 (the first of each): traffic for L4's
    hosts that S1 gets from L1 or L3 is sent down to L2, which sends it back
    up to S2; traffic for L1's hosts that S2 gets from L4 or L2 goes down to
    L3 and back up to S1.  L1 and L3 send to L4 through S1, L4 and L2 send to
    L1 through S2.  The links S1->L2, L2->S2, S2->L3 and L3->S1 then wait on
    each other in a ring.  Returns ``(routes, streams)``: routes [(switch,
    [in ports], [destination IPs], out port)], streams [(source host,
    destination host)]; ConfigError if the fabric has no such ring."""
    leaves = [s for s in topo["switches"] if s.get("tier") == 1 and s.get("kind") != "nic"]
    spines = [s for s in topo["switches"] if s.get("tier") == 2]
    if len(leaves) < 4 or len(spines) < 2 or any(s.get("tier", 0) > 2
                                                  for s in topo["switches"]):
        raise ConfigError("fault deadlock", "the deadlock scenario needs a two-tier "
                                            "leaf-spine fabric with at least 4 leaves and "
                                            "2 spines (-P leaves=4 -P spines=2)")
    (l1, l2, l3, l4), (s1, s2) = leaves[:4], spines[:2]

    def port(sw, peer):
        return next(p["name"] for p in sw["ports"] if p["peer"] == peer)

    def hosts(leaf):
        return [p["peer"] for p in leaf["ports"] if p["peer_kind"] == "host"]

    ip = {h["name"]: h["ports"][0]["ip"] for h in topo["hosts"]}
    to_l4 = [ip[h] for h in hosts(l4)]
    to_l1 = [ip[h] for h in hosts(l1)]
    routes = [
        (s1["name"], [port(s1, l1["name"]), port(s1, l3["name"])], to_l4, port(s1, l2["name"])),
        (l2["name"], [port(l2, s1["name"])], to_l4, port(l2, s2["name"])),
        (s2["name"], [port(s2, l4["name"]), port(s2, l2["name"])], to_l1, port(s2, l3["name"])),
        (l3["name"], [port(l3, s2["name"])], to_l1, port(l3, s1["name"])),
    ]
    for leaf, spine, dsts in ((l1, s1, to_l4), (l3, s1, to_l4), (l4, s2, to_l1),
                              (l2, s2, to_l1)):
        routes.append((leaf["name"], [port(leaf, h) for h in hosts(leaf)], dsts,
                       port(leaf, spine["name"])))
    streams = []
    for src_leaf, dst_leaf in ((l1, l4), (l3, l4), (l4, l1), (l2, l1)):
        for i, h in enumerate(hosts(src_leaf)):
            dst = hosts(dst_leaf)
            streams.append((h, dst[i % len(dst)]))
    return routes, streams


def frame_time_s(rate_bps, frame):
    return frame * 8.0 / rate_bps


def headroom_bytes(rate_bps, frame, reaction_s):
    """What an upstream at ``rate_bps`` still sends after xoff is crossed: the
    reaction time at the link rate plus one full frame in flight at each end."""
    return int(math.ceil(rate_bps / 8.0 * reaction_s)) + 2 * frame


def thresholds(rate_bps, frame, cfg=PfcConfig()):
    """{xoff, xon, headroom, limit} in bytes of the ingress port of a link at
    ``rate_bps`` carrying frames of up to ``frame`` bytes (limit = xoff + headroom:
    a frame beyond it is an ingress drop)."""
    xoff = int(cfg.xoff_frames * frame)
    head = headroom_bytes(rate_bps, frame, cfg.reaction_s)
    gap = 1 if cfg.mode == FlowControl.CREDIT else cfg.xon_gap_frames     # one frame's credit back
    return {"xoff": xoff, "xon": xoff - int(gap * frame), "headroom": head, "limit": xoff + head}


def quantum_s(rate_bps):
    """One pause quantum (512 bit times) at ``rate_bps``."""
    return QUANTUM_BITS / rate_bps


def pause_frames(paused_s, rate_bps, quanta=MAX_QUANTA):
    """PFC frames a port sends for one pause of ``paused_s``: the XOFF, a refresh
    every half of its pause time (as switches refresh), and the XON."""
    refresh = quanta * quantum_s(rate_bps) / 2
    return 2 + int(paused_s // refresh) if refresh > 0 else 2


class IngressPause:
    """The pause an ingress port asks of its upstream, from its buffer occupancy.

    ``update(occupancy, now)`` returns "pause", "resume" or None; the port keeps
    its episodes (start, end) and its peak occupancy."""

    def __init__(self, xoff, xon):
        self.xoff, self.xon = xoff, xon
        self.paused_since = None
        self.episodes = []
        self.peak = 0

    def update(self, occupancy, now):
        self.peak = max(self.peak, occupancy)
        if self.paused_since is None and occupancy >= self.xoff:
            self.paused_since = now
            return "pause"
        if self.paused_since is not None and occupancy <= self.xon:
            self.episodes.append((self.paused_since, now))
            self.paused_since = None
            return "resume"
        return None

    def paused_s(self, now):
        return sum(b - a for a, b in self.episodes) + (
            now - self.paused_since if self.paused_since is not None else 0.0)


class Watchdog:
    """SONiC's PFC watchdog on one lossless egress queue.

    Every poll: ``update(now, paused_since, backlog, sent)`` with since when
    the peer has paused the queue without a break (None: not paused), its
    bytes waiting and its bytes sent so far.  A queue paused for ``detect_s``,
    not empty and not sending since the last poll is a storm: "storm"
    (mitigate: the queue stops honouring pauses, and with the drop action its
    frames are discarded) -- found within detection + one poll of the pause's
    start.  Mitigated, once the peer has asked no pause for ``restore_s``:
    "restore".  Returns the event or None; ``events`` keeps them.  With
    ``mitigate`` False (action off) it only tells whether the queue is stuck.
    """

    def __init__(self, detect_s, restore_s, mitigate=True):
        self.detect_s, self.restore_s = detect_s, restore_s
        self.mitigate = mitigate
        self.last_sent = None
        self.stuck = False
        self.mitigating_since = None
        self.quiet_since = None
        self.events = []

    @property
    def mitigating(self):
        return self.mitigating_since is not None

    def update(self, now, paused_since, backlog, sent):
        moved = self.last_sent is not None and sent != self.last_sent
        self.last_sent = sent
        paused = paused_since is not None
        self.stuck = paused and backlog > 0 and not moved
        if self.mitigating:
            if paused:
                self.quiet_since = None
            elif self.quiet_since is None:
                self.quiet_since = now
            if self.quiet_since is not None and now - self.quiet_since >= self.restore_s:
                self.events.append(("restore", now))
                self.mitigating_since = self.quiet_since = None
                return "restore"
            return None
        if self.stuck and self.mitigate and now - paused_since >= self.detect_s:
            self.events.append(("storm", now))
            self.mitigating_since, self.quiet_since = now, None
            return "storm"
        return None


class CycleWatch:
    """Names deadlocks from the cycles ``paused_cycle`` finds at each watchdog look:
    the same cycle at two looks in a row (none of its queues sent for a poll),
    from when it was first seen.  One look is not enough: the switch-level graph
    also closes, for a moment, on two congested queues between two switches
    whose buffers each wait on another port (a dragonfly group's routers, each
    on its own global link)."""

    def __init__(self):
        self.last = self.since = None
        self.named = []                         # [{"cycle": [...], "t": first seen}]

    def update(self, cycle, now):
        if cycle != self.last:
            self.since = now
        elif cycle and (not self.named or self.named[-1]["t"] != self.since):
            self.named.append({"cycle": cycle, "t": self.since})
        self.last = cycle


def paused_cycle(edges):
    """A cycle in the "is paused by" graph ``edges`` ({node: set of nodes whose
    buffers hold it paused}), as a list of nodes, or None: a cyclic buffer
    dependency (deadlock) when none of its queues sends."""
    state = {}
    for start in sorted(edges):
        if state.get(start):
            continue
        stack, path, on_path = [(start, iter(sorted(edges.get(start, ()))))], [start], {start}
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                path.pop()
                on_path.discard(node)
                state[node] = 2
                continue
            if nxt in on_path:
                return path[path.index(nxt):]
            if not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(sorted(edges.get(nxt, ())))))
                path.append(nxt)
                on_path.add(nxt)
    return None
