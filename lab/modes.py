"""The names of a run's modes, defined once, with one default each.

Every mode is a ``StrEnum``: a member compares equal to its name and is
written as it in JSON and YAML, so documents and command lines keep their
text while code names the member (``LB.DLB``, not ``"dlb"``).  The emulator,
the controller and the traffic engine all take their modes from here; no
other module spells a mode's name (tests/unit/test_architecture.py).

* ``LB``          -- load balancing: the controller's (``ecmp``, ``flowlet``,
  ``controller-dlb``), the switches' data plane (``dlb``, ``packet``) or the
  sending NICs' (``spray``), docs/load-balancing.md;
* ``Entropy``     -- a sending NIC's path entropy (traffic.nic.entropy);
* ``Failover``    -- repair after a link or switch fails, docs/failover.md;
* ``Routing``     -- a dragonfly's routing, docs/dragonfly.md;
* ``Transport``   -- the collectives' transport, docs/transport.md and docs/uet.md;
* ``Delivery``    -- an Ultra Ethernet PDC's delivery mode (RUD, ROD), docs/uet.md;
* ``EvPolicy``    -- how an Ultra Ethernet sender picks each packet's entropy value;
* ``CC``          -- congestion control at the sending NICs;
* ``FlowControl`` -- link-level flow control, docs/lossless.md;
* ``EcnAt``       -- where a switch port judges its queue for ECN marks;
* ``PathSet``     -- the paths a throughput bound lets flows split over
  (emulator.fabric.analysis.bounds): a routing mode's ``path_set``;
* ``Control``     -- the switches' control plane: the OpenFlow controller, or
  eBGP between the switches (FRR, RFC 7938), docs/bgp.md;
* ``Peering``     -- how BGP's sessions are addressed on the fabric's links.
* ``Placement``   -- where a job of a shared cluster gets its hosts, docs/shared-clusters.md;
* ``TrafficClass``-- the link class a job's or a background flow's frames ask for.
"""

from enum import StrEnum


class Mode(StrEnum):
    """A mode: its members in the order users see them, ``DEFAULT`` named per enum."""

    @classmethod
    def names(cls):
        """Every member's name, in order (argparse ``choices``, error messages)."""
        return tuple(m.value for m in cls)

    @classmethod
    def parse(cls, text, what=None):
        """The member named ``text``; ValueError naming the choices otherwise."""
        try:
            return cls(text)
        except ValueError:
            raise ValueError(f"{what or cls.__name__} {text!r}: use one of "
                             f"{', '.join(cls.names())}") from None

    @classmethod
    def default(cls):
        return cls(cls._default)


class LB(Mode):
    ECMP = "ecmp"
    FLOWLET = "flowlet"
    CONTROLLER_DLB = "controller-dlb"
    DLB = "dlb"
    PACKET = "packet"
    SPRAY = "spray"

    @property
    def reactive(self):
        """The controller places each new flow (packet-in) and may move it."""
        return self in (LB.FLOWLET, LB.CONTROLLER_DLB)

    @property
    def adaptive(self):
        """The switches' data plane chooses the egress (dataplane.adaptive)."""
        return self in (LB.DLB, LB.PACKET)

    @property
    def entropy(self):
        """The sending NICs' path entropy under this mode."""
        return {LB.FLOWLET: Entropy.FLOWLET, LB.SPRAY: Entropy.SPRAY}.get(self, Entropy.QP)

    @property
    def reorders(self):
        """Responders must place packets out of order: the NICs change entropy
        mid-QP, or the switches move a flow mid-burst (RoCE NICs with
        adaptive-routing support accept it)."""
        return self.entropy != Entropy.QP or self.adaptive


LB._default = LB.ECMP


class Entropy(Mode):
    QP = "qp"               # one UDP source port per QP
    SPRAY = "spray"         # the next entropy value every packet
    FLOWLET = "flowlet"     # the next entropy value after an idle gap


Entropy._default = Entropy.QP


class Failover(Mode):
    NONE = "none"                     # port status logged, nothing repaired
    CONTROLLER = "controller"         # the controller recomputes and pushes routes
    FAST_FAILOVER = "fast-failover"   # switches' fast-failover groups, then the controller


Failover._default = Failover.FAST_FAILOVER


class Routing(Mode):
    MINIMAL = "minimal"     # at most one global hop
    VALIANT = "valiant"     # through a random intermediate group per flowlet
    UGAL = "ugal"           # the source router chooses by the group's global queues
    UGAL_L = "ugal-l"       # ... by its own ports' queues

    @property
    def adaptive(self):
        """Decided per flowlet by the routers' data plane (dataplane.adaptive)."""
        return self in (Routing.UGAL, Routing.UGAL_L)

    @property
    def path_set(self):
        """The paths this routing may take (UGAL's: minimal or through a third group)."""
        return {Routing.MINIMAL: PathSet.MINIMAL,
                Routing.VALIANT: PathSet.VALIANT}.get(self, PathSet.BOTH)


Routing._default = Routing.MINIMAL


class Transport(Mode):
    RC = "rc"               # RoCE reliable connection: ACK/NAK, go-back-N, timer
    UET = "uet"             # Ultra Ethernet Transport: PDS over UDP 4793, SACK, spraying
    NONE = "none"           # every packet once; a loss is a wrong chunk

    @property
    def reliable(self):
        """Lost packets are sent again (the run ends on acknowledgements)."""
        return self != Transport.NONE


Transport._default = Transport.RC


class Delivery(Mode):
    RUD = "rud"             # reliable, unordered delivery: a PSN per packet, SACK
    ROD = "rod"             # reliable, ordered delivery: one entropy value, go-back-N


Delivery._default = Delivery.RUD


class EvPolicy(Mode):
    OBLIVIOUS = "oblivious"  # the next entropy value of the set every packet
    REPS = "reps"            # reuse the values whose packets came back unmarked (REPS)


EvPolicy._default = EvPolicy.REPS


class CC(Mode):
    NONE = "none"
    DCQCN = "dcqcn"         # reacts to CNPs for ECN-marked packets
    TIMELY = "timely"       # reacts to ACK round-trip times
    NSCC = "nscc"           # UET: a window from delay over the base RTT and ECN marks
    RCCC = "rccc"           # UET: the receiver grants credits at its link rate

    @property
    def transport(self):
        """The transport whose frames this congestion control rides (None: any)."""
        return {CC.DCQCN: Transport.RC, CC.TIMELY: Transport.RC,
                CC.NSCC: Transport.UET, CC.RCCC: Transport.UET}.get(self)


CC._default = CC.NONE


class FlowControl(Mode):
    NONE = "none"           # lossy links: a full queue drops
    PFC = "pfc"             # priority flow control: pause frames
    CREDIT = "credit"       # credit-based, no drop by construction


FlowControl._default = FlowControl.NONE


class EcnAt(Mode):
    DEQUEUE = "dequeue"     # mark the packet that leaves while the queue is over K
    ENQUEUE = "enqueue"     # mark the one that arrives (RED's way)


EcnAt._default = EcnAt.DEQUEUE


class PathSet(Mode):
    MINIMAL = "minimal"     # one global hop (a dragonfly's), else the shortest paths
    VALIANT = "valiant"     # through an intermediate group drawn from all groups
    BOTH = "minimal+valiant"   # minimal or through a third group (UGAL's)


PathSet._default = PathSet.MINIMAL


class Control(Mode):
    OPENFLOW = "openflow"   # Open vSwitch bridges programmed by an OpenFlow controller
    BGP = "bgp"             # Linux routers running FRR: eBGP, BFD, kernel ECMP

    @property
    def routed(self):
        """The switches are routers (their own FIBs), not bridges a controller programs."""
        return self == Control.BGP


Control._default = Control.OPENFLOW


class Peering(Mode):
    NUMBERED = "numbered"       # an eBGP session per link over its /31
    UNNUMBERED = "unnumbered"   # over the interface's IPv6 link-local address (RFC 8950)


Peering._default = Peering.NUMBERED


class Placement(Mode):
    PACKED = "packed"       # fill a leaf's hosts before the next leaf's
    SPREAD = "spread"       # round-robin over the leaves
    RANDOM = "random"       # a seeded random draw of the free hosts
    EXPLICIT = "explicit"   # the hosts the jobs file lists


Placement._default = Placement.PACKED


class TrafficClass(Mode):
    LOSSLESS = "lossless"         # the RoCE data class (PFC's lossless priority)
    BEST_EFFORT = "best-effort"   # below it, where the links have classes


TrafficClass._default = TrafficClass.LOSSLESS

ENUMS = (LB, Entropy, Failover, Routing, Transport, Delivery, EvPolicy, CC, FlowControl, EcnAt,
         PathSet, Control, Peering, Placement, TrafficClass)
