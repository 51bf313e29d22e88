"""Path-selection (load-balancing) modes of the controller: pure policy.

No os-ken, no I/O, the clock is passed in: every decision is unit-tested
against a fake topology and fake load (tests/unit/test_lb_policy.py).
The mode is the topology document's ``modes.lb`` (lab.modes.LB, default ecmp);
docs/load-balancing.md explains the designs and their limits.

* ``ecmp``  -- the routing policy's select groups hash ip_src, ip_dst,
  udp_src, udp_dst (controller.policy): nothing added here.
* ``spray`` -- the same switches; the sending NIC gives every packet a new
  UDP source port (traffic.nic.entropy), so ECMP spreads one QP's packets over
  every path.  Nothing added here either.
* ``dlb`` and ``packet`` -- the switches choose in their data plane (the
  emulator's adaptive-routing stage, dataplane.adaptive): the frame arrives
  at a deciding port (``deciders``: facing a host or a lower tier), an eBPF
  program picks the egress among the route's live candidates and marks the
  frame: that port's number in the DSCP (``MARK_BASE + port``) and the group
  bit of its Ethernet source address (``STAGE_BIT``), which no valid frame
  carries (the program drops the frames that arrive with it, as a bridge
  does).  ``adaptive_flows`` are the flows (``PRIO_AR``), one per deciding
  port and candidate port, that output a marked RoCEv2 frame arriving there
  to its port; a host's own DSCP, whatever its value, matches none of them.
  The controller adds them to the ECMP state and does nothing else; a user's
  app that wants the stage installs the same flows.
* ``flowlet`` and ``controller-dlb`` -- reactive placement of every new RoCE flow:
  on each leaf, every multi-path route gets a copy one priority higher
  (``PRIO_LB_LEARN``) that matches RoCEv2 (udp_dst 4791), sends the packet
  to the controller *and* still forwards it through the ECMP group (no
  packet waits for the controller).  ``Balancer.packet_in`` picks the
  least-loaded path for the new 5-tuple and returns an exact-match entry
  (``PRIO_LB_FLOW``, cookie ``COOKIE_LB``) outputting to that uplink.
  Load of a path = its links (the leaf uplink and the spine's downlink
  toward the destination when it is unique): first the number of active
  placed flows, then the utilisation measured from port statistics polled
  every ``POLL_S``.  A flow measured at under ``LIGHT`` of its uplink's rate
  (a QP's ACKs and CNPs run the other way as flows of their own) is not
  counted: it would keep a data flow off an idle uplink.

  ``flowlet``: a placed flow never moves; the NIC starts a new flowlet with a
  new source port after an idle gap (traffic.nic.entropy), which is a new flow
  here and is placed afresh.  ``controller-dlb``: the QP keeps its port, and ``tick``
  also moves a flow off a hot link (utilisation >= ``HOT`` carrying two or
  more active flows) to a path whose links are all <= ``COLD`` and carry no
  active flow; a moved flow is held ``HOLD_S`` (no flapping).  Moving a
  flow mid-burst may reorder its packets (the receiver counts them).

Placed entries whose byte counter has not grown for ``IDLE_S`` are deleted
(OpenFlow idle timeouts count whole seconds and would leave flowlets'
entries around as long; the policy keeps its own table in step).
"""

import json
import struct
from dataclasses import dataclass, field

from lab.modes import LB

from .groups import FF_GROUP_BASE
from .messages import ETH_TYPE_IPV4, FlowMod, Group, Output, SwitchState, match
from .policy import PRIO_IPV4, next_hops
from .topology import NIC

PRIO_AR = PRIO_IPV4 + 2              # a marked frame -> the port its mark names
MARK_BASE = 32                       # a port's mark: DSCP MARK_BASE + port (1-31)
STAGE_BIT = "01:00:00:00:00:00"      # the source address's group bit: marked by the stage
PRIO_LB_LEARN = PRIO_IPV4 + 1        # route copy + packet-in of RoCE packets
PRIO_LB_FLOW = 1500                  # one placed flow -> its uplink
COOKIE_LB = 0xFAB0000000000002       # placed flows; the resync diff never owns them
OFPP_CONTROLLER = 0xFFFFFFFD
IP_PROTO_UDP = 17
ROCE_PORT = 4791
POLL_S = 0.1          # port and flow statistics period
ACTIVE_S = 0.3        # a flow whose bytes grew this recently (or placed) is active
IDLE_S = 2.0          # a placed flow idle this long is removed
RESEND_S = 0.5        # packet-ins for a placed flow this long after: the entry is gone
HOT, COLD = 0.9, 0.5  # utilisation of a congested link / of a link a flow may move to
LIGHT = 0.05          # a measured flow under this share of its uplink's rate (ACKs,
                      # CNPs) neither counts as a link's flow nor is worth moving
HOLD_S = 0.5          # a moved flow stays put this long


def check_mode(mode):
    """The LB member named ``mode``; ValueError naming the choices otherwise."""
    return LB.parse(mode, "load-balancing mode")


def port_rates(topology_path):
    """{(dpid, port): rate_bps} from a topology.json (the Topology object drops rates)."""
    with open(topology_path, encoding="utf-8") as f:
        doc = json.load(f)
    return {(s["dpid"], p["port"]): p.get("rate_bps") for s in doc["switches"]
            for p in s["ports"]}


def deciders(topo, dpid):
    """The ports of switch ``dpid`` whose frames the adaptive stage decides: those
    facing a host or a switch of a lower tier (a NIC switch decides nothing; the
    emulator's dataplane.adaptive.model.plan has the same rule)."""
    sw = topo.by_dpid[dpid]
    if sw.kind == NIC:
        return ()
    return tuple(p.port for p in sw.ports
                 if p.to_host or (p.peer in topo.by_name and topo.by_name[p.peer].tier < sw.tier))


def adaptive_flows(topo, dpid, state):
    """The flows a switch whose ``state`` (SwitchState) has multi-path routes needs
    for data-plane adaptive routing: a RoCEv2 frame the stage marked (``STAGE_BIT``
    in its source address, DSCP ``MARK_BASE + port``) arriving at a deciding port
    goes out of that port, for every port of its select groups."""
    ports = set()
    for g in state.groups:
        if g.type == "select" and len(g.buckets) >= 2:
            for b in g.buckets:
                ports |= {a.port for a in b.actions if isinstance(a, Output)}
    return frozenset(
        FlowMod(0, PRIO_AR, match(in_port=d, eth_type=ETH_TYPE_IPV4,
                                  eth_src=(STAGE_BIT, STAGE_BIT), ip_proto=IP_PROTO_UDP,
                                  udp_dst=ROCE_PORT, ip_dscp=MARK_BASE + p), (Output(p),))
        for d in deciders(topo, dpid) for p in sorted(ports) if 1 <= p <= 63 - MARK_BASE)


def augment(topo, desired, mode):
    """``desired`` ({dpid: SwitchState}) plus the learn flows of a reactive mode,
    or the mark flows of an adaptive one."""
    if check_mode(mode).adaptive:
        return {dpid: SwitchState(st.flows | adaptive_flows(topo, dpid, st), st.groups)
                for dpid, st in desired.items()}
    if not check_mode(mode).reactive:
        return desired
    out = {}
    for sw in topo.switches:
        state = desired[sw.dpid]
        if not any(p.to_host for p in sw.ports):
            out[sw.dpid] = state          # placement happens at the source leaf
            continue
        extra = set()
        for f in state.flows:
            if (f.priority == PRIO_IPV4 and len(f.actions) == 1
                    and isinstance(f.actions[0], Group)
                    and f.actions[0].group_id < FF_GROUP_BASE):   # a select group
                m = dict(f.match, ip_proto=IP_PROTO_UDP, udp_dst=ROCE_PORT)
                extra.add(FlowMod(0, PRIO_LB_LEARN, match(**m),
                                  (Output(OFPP_CONTROLLER), f.actions[0])))
        out[sw.dpid] = SwitchState(state.flows | frozenset(extra), state.groups)
    return out


def parse_packet(data):
    """(ipv4 src, ipv4 dst, udp sport) of a RoCEv2 frame, else None."""
    if len(data) < 38 or data[12:14] != b"\x08\x00" or data[23] != IP_PROTO_UDP:
        return None
    ihl = (data[14] & 0x0F) * 4
    if len(data) < 14 + ihl + 4:
        return None
    sport, dport = struct.unpack_from("!HH", data, 14 + ihl)
    if dport != ROCE_PORT:
        return None
    return (".".join(map(str, data[26:30])), ".".join(map(str, data[30:34])), sport)


def flow_match(src, dst, sport):
    return match(eth_type=ETH_TYPE_IPV4, ip_proto=IP_PROTO_UDP, ipv4_src=src,
                 ipv4_dst=dst, udp_src=sport, udp_dst=ROCE_PORT)


@dataclass
class Placed:
    """One placed flow: where it goes and what its counters said."""
    dpid: int
    dst: str
    port: int
    links: tuple                   # ((dpid, port), ...) the path's links we track
    placed_at: float
    sent_at: float
    active_at: float
    moved_at: float = None
    bytes: int = 0
    rate_bps: float = 0.0
    history: list = field(default_factory=list)   # ports it was moved from


class Balancer:
    """State of the reactive modes: placed flows and measured link load."""

    def __init__(self, topo, mode=LB.default(), rates=None, live=None):
        self.topo = topo
        self.mode = check_mode(mode)
        self.rates = dict(rates or {})
        self.set_routes(topo.all_ports() if live is None else live)
        self.flows = {}            # (src, dst, sport) -> Placed
        self.tx = {}               # (dpid, port) -> (time, tx_bytes) of the last poll
        self.util = {}             # (dpid, port) -> utilisation over the last poll
        self.moves = 0

    @property
    def reactive(self):
        return self.mode.reactive

    def set_routes(self, live):
        self.routes = next_hops(self.topo, frozenset(live))

    # -- paths ------------------------------------------------------------
    def links_of(self, dpid, port, dst):
        """The links a flow to ``dst`` leaving ``dpid`` by ``port`` is known to use."""
        links = [(dpid, port)]
        peer = self.topo.peer_of(dpid, port)
        if peer is not None:
            down = self.routes.get(peer[0], {}).get(dst, ())
            if len(down) == 1:           # a spine's only way to the destination leaf
                links.append((peer[0], down[0]))
        return tuple(links)

    def active(self, f, now):
        return now - f.active_at <= ACTIVE_S

    def heavy(self, f):
        """Not a light flow: unmeasured yet (presumed heavy), or >= LIGHT of its uplink."""
        rate = self.rates.get(f.links[0])
        return f.bytes == 0 or not rate or f.rate_bps >= LIGHT * rate

    def count(self, now, exclude=None):
        """(dpid, port) -> active placed heavy flows using it."""
        n = {}
        for key, f in self.flows.items():
            if key != exclude and self.active(f, now) and self.heavy(f):
                for lk in f.links:
                    n[lk] = n.get(lk, 0) + 1
        return n

    def score(self, links, counts):
        return (max(counts.get(lk, 0) for lk in links),
                max(self.util.get(lk, 0.0) for lk in links))

    def choose(self, dpid, dst, now, exclude=None):
        """The least-loaded next-hop port from ``dpid`` toward ``dst`` (ties: lowest port)."""
        counts = self.count(now, exclude)
        ports = self.routes.get(dpid, {}).get(dst, ())
        return min(ports, key=lambda p: (self.score(self.links_of(dpid, p, dst), counts), p))

    # -- events -----------------------------------------------------------
    def packet_in(self, dpid, data, now):
        """Messages for a RoCE packet the learn flow sent up: place a new flow."""
        if not self.reactive:
            return []
        pkt = parse_packet(data)
        if pkt is None:
            return []
        src, dst, sport = pkt
        f = self.flows.get(pkt)
        if f is not None:
            if now - f.sent_at < RESEND_S:
                return []                # the entry is on its way
            f.sent_at = now              # still coming up: the switch lost it
            return [FlowMod(0, PRIO_LB_FLOW, flow_match(*pkt), (Output(f.port),), COOKIE_LB)]
        if len(self.routes.get(dpid, {}).get(dst, ())) < 2:
            return []
        port = self.choose(dpid, dst, now)
        self.flows[pkt] = Placed(dpid, dst, port, self.links_of(dpid, port, dst),
                                 now, now, now)
        return [FlowMod(0, PRIO_LB_FLOW, flow_match(src, dst, sport), (Output(port),), COOKIE_LB)]

    def port_stats(self, dpid, tx_bytes, now):
        """Record a port-statistics poll: {port: tx_bytes} of switch ``dpid``."""
        for port, b in tx_bytes.items():
            key = (dpid, port)
            last = self.tx.get(key)
            self.tx[key] = (now, b)
            rate = self.rates.get(key)
            if last is not None and now > last[0] and rate:
                self.util[key] = max(0, b - last[1]) * 8 / (now - last[0]) / rate

    def flow_stats(self, dpid, byte_counts, now):
        """Record a flow-statistics poll: {(src, dst, sport): byte_count} on ``dpid``."""
        for key, b in byte_counts.items():
            f = self.flows.get(key)
            if f is None or f.dpid != dpid:
                continue
            if b < f.bytes:          # the entry was re-added: counters restarted
                f.bytes = 0
            if b > f.bytes:
                f.rate_bps = (b - f.bytes) * 8 / POLL_S
                f.active_at = now
            f.bytes = b

    def tick(self, now):
        """Periodic decisions after a poll: expire idle flows; dlb moves hot ones.

        Returns [(dpid, message)], like ``rebalance`` and ``set_live``.
        """
        out = []
        for key, f in sorted(self.flows.items()):
            if now - f.active_at > IDLE_S:
                del self.flows[key]
                out.append((f.dpid, FlowMod(0, PRIO_LB_FLOW, flow_match(*key), (), COOKIE_LB,
                                            "delete")))
        if self.mode == LB.CONTROLLER_DLB:
            out += self.rebalance(now)
        return out

    def rebalance(self, now):
        """Move one flow off each hot link that carries several active flows."""
        out = []
        counts = self.count(now)
        for link in sorted(counts):
            if counts[link] < 2 or self.util.get(link, 0.0) < HOT:
                continue
            movable = sorted(k for k, f in self.flows.items()
                             if link in f.links and self.active(f, now) and self.heavy(f)
                             and (f.moved_at is None or now - f.moved_at >= HOLD_S))
            for key in movable:
                f = self.flows[key]
                best = self.choose(f.dpid, f.dst, now, exclude=key)
                links = self.links_of(f.dpid, best, f.dst)
                cnt, util = self.score(links, self.count(now, exclude=key))
                if best == f.port or cnt > 0 or util > COLD:
                    continue
                f.history.append(f.port)
                f.port, f.links, f.moved_at, f.sent_at = best, links, now, now
                self.moves += 1
                out.append((f.dpid, FlowMod(0, PRIO_LB_FLOW, flow_match(*key), (Output(best),),
                                            COOKIE_LB, "modify")))
                counts = self.count(now)
                break
        return out

    def set_live(self, live, now):
        """Liveness changed: re-place flows whose path lost a link; messages."""
        self.set_routes(live)
        out = []
        for key, f in sorted(self.flows.items()):
            if all(lk in live for lk in f.links) and \
                    f.port in self.routes.get(f.dpid, {}).get(f.dst, ()):
                continue
            if len(self.routes.get(f.dpid, {}).get(f.dst, ())) < 2:
                del self.flows[key]          # back to the route's own choice
                out.append((f.dpid, FlowMod(0, PRIO_LB_FLOW, flow_match(*key), (), COOKIE_LB,
                                            "delete")))
                continue
            best = self.choose(f.dpid, f.dst, now, exclude=key)
            f.port, f.links, f.sent_at = best, self.links_of(f.dpid, best, f.dst), now
            out.append((f.dpid, FlowMod(0, PRIO_LB_FLOW, flow_match(*key), (Output(best),),
                                        COOKIE_LB, "modify")))
        return out
