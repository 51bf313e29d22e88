"""ECN marking at dequeue: a switch port marks the packet that *leaves* while its
queue is over the threshold (eBPF on both ends of the link).

Model.  Where a switch marks matters to the control loop.  Marked at
enqueue (dataplane.lossless.ecn), a packet carries "the queue was long when I
arrived" and then waits the whole queue out before the receiver can echo
it: the congestion signal is as late as the queue is long (200 ms behind a
1 MB queue at 40 Mbit/s).  Marked at dequeue, as HPCC's ns-3 switch model
does (``SwitchNotifyDequeue``) and as "mark-front" proposes, the signal
leaves with the packet at the head and is only a propagation delay old.

This kernel has no RED and no qdisc hook after the TBF, so the queue is
counted on both sides of it, exactly, in one BPF array map (one entry per
switch port: bytes in, bytes out, packets marked):

- *in*: a tc ``clsact`` egress program on the switch port (it runs after
  nftables' egress chains, where injected loss drops, and before the TBF)
  adds each frame's length, unless the TBF's byte limit will drop it;
- *out*: an XDP program (generic mode, before any packet socket or tc
  ingress sees the frame) on the link's other end, in the next switch or
  the host's namespace, adds the length of each frame the TBF released.

``in - out`` is the port's queue when the frame left (HPCC's
``egress_bytes`` after removing it).  ECN-capable IPv4 frames over half
the MTU frame are marked CE with DCQCN's RED profile: never at or below
Kmin, always above Kmax, with probability Pmax (q - Kmin)/(Kmax - Kmin)
between; Kmin == Kmax is a step at K.  The IPv4 checksum is updated
(RFC 1624); the RoCEv2 ICRC masks the TOS byte.

The programs are C (``dataplane/bpf/ecnq.bpf.c``, the marking in
``ecn_mark.h``), loaded once per port with that port's entry and thresholds
as constants (``programs``); ``ENTRY`` and ``CONFIG`` are their structs as
Python packs them.
"""

from emulator.dataplane import bpf
from emulator.dataplane.links import shaping
from emulator.dataplane.lossless.ecn import record_marks
from emulator.dataplane.system.netlink import NetlinkError, ns_sockets
from emulator.errors import EnvironmentProblem, RunFailed
from emulator.fabric.addressing import switch_intf
from traffic.roce.frames import frame_len_for_mtu

ENTRY = bpf.Layout("ecnq_entry", [("in_bytes", "Q"), ("out_bytes", "Q"), ("marks", "Q"),
                                   ("spare", "Q")])
# the per-port constants of ecnq.bpf.c (its const volatile ``cfg``)
CONFIG = bpf.Layout("ecnq_cfg", [("index", "Q"), ("limit", "q"), ("red.kmin", "q"),
                                 ("red.kmax", "q"), ("red.pmul", "Q"), ("red.min_len", "Q")])
MAP = "ecnq_queues"
XDP_PASS, TC_ACT_OK = 2, 0
XDP_FLAGS_SKB_MODE = 2
PSCALE = 1 << 16                      # marking probability in 1/65536ths
TC_EGRESS = 0xFFFFFFF3                # clsact's egress parent (ffff:fff3)


def red(kmin, kmax, pmax, min_len):
    """ecn_mark.h's ``struct red`` (CONFIG's ``red.*``): CE never at or below
    ``kmin`` bytes behind, always above ``kmax``, with probability ``pmax``
    (q - kmin)/(kmax - kmin) between, on frames longer than ``min_len``."""
    return {"red.kmin": kmin, "red.kmax": kmax, "red.pmul": max(1, round(pmax * PSCALE)),
            "red.min_len": min_len}


def programs(queues, index, limit, kmin, kmax, pmax, min_len, chain=None):
    """The two programs of port ``index`` on map ``queues`` (a ``bpf.Map`` of
    ENTRY values): ``ecnq_in`` (tc egress) counts a frame into the queue unless
    the TBF's ``limit`` bytes would drop it, ``ecnq_out`` (XDP on the far end)
    counts it out and marks it by the queue it leaves behind (see the module
    doc); a frame ``ecnq_out`` passes goes on to slot ``index`` of ``chain`` (a
    program array: the next stage, if any).  Returns their fds (``bpf.Programs``)."""
    # the limit as a 32-bit signed immediate held it before the programs were C
    config = CONFIG.pack_fields(index=index, limit=min(limit, 2 ** 31 - 1),
                                **red(kmin, kmax, pmax, min_len))
    maps = {MAP: queues, **({bpf.CHAIN_MAP: chain} if chain is not None else {})}
    return bpf.load("ecnq", config, CONFIG, maps, value_layouts=[ENTRY])


class Attached:
    """eBPF programs of a run on interfaces, and their map: ``attach_tc`` and
    ``attach_xdp`` attach a loaded one (remembered in ``attached``, so a failure
    half-way leaves nothing after ``remove``); ``remove`` takes them all off."""

    def __init__(self):
        self.map = None
        self.attached = []                 # (kind, netns, ifname)
        self.chain = None                  # the program array its XDP programs hand on by
        self.slots = {}                    # (netns, ifname) -> slot in ``chain``

    def attach_tc(self, ipr, idx, ns, ifname, fd, name):
        """Program ``fd`` as a direct-action classifier on the egress of interface
        ``idx`` (the filter holds it: the caller closes ``fd``)."""
        ipr.tc("add", "clsact", index=idx)
        self.attached.append(("tc", ns, ifname))
        ipr.tc("add-filter", "bpf", index=idx, handle=1, fd=fd, name=name,
               parent=TC_EGRESS, classid=1, direct_action=True)

    def attach_xdp(self, ipr, idx, ns, ifname, fd, name):
        """Program ``fd`` as the (generic-mode) XDP program of interface ``idx``."""
        ipr.link("set", index=idx, xdp={"attrs": [("IFLA_XDP_FD", fd),
                                                  ("IFLA_XDP_FLAGS", XDP_FLAGS_SKB_MODE)]})
        self.attached.append(("xdp", ns, ifname))

    def chain_slots(self):
        """{(netns, ifname): (program array, slot)}: where a next stage's XDP
        program goes on each interface whose XDP hook this feature holds."""
        return {k: (self.chain, slot) for k, slot in self.slots.items()}

    def remove(self):
        errors = detach(self.attached)
        self.attached = []
        for m in (self.map, self.chain):
            if m is not None:
                m.close()
        self.map = self.chain = None
        self.slots = {}
        return errors


class DequeueMarker(Attached):
    """The run's dequeue marking over ``ports``: [(ifname, peer netns path or None,
    peer ifname, rate_bps)], queues limited as the TBFs of ``queue_ms``/``frame``;
    ``own_ns``: {ifname: namespace path} of ports outside this namespace (a datapath
    instance's)."""

    def __init__(self, ecn, ports, frame_len, queue_ms, frame, own_ns=None):
        super().__init__()
        self.own_ns = dict(own_ns or {})
        self.ecn = ecn
        self.ports = sorted(ports)
        self.frame_len = frame_len
        self.limits = [shaping.tbf_params(rate, queue_ms, frame)["limit"]
                       for _, _, _, rate in self.ports]

    @classmethod
    def for_session(cls, session):
        """Mark at dequeue on every switch port of ``session``'s fabric."""
        by_name = {sw["name"]: sw for sw in session.topo["switches"]}
        ports, own_ns = [], {}
        for sw in session.topo["switches"]:
            for p in sw["ports"]:
                if p["peer_kind"] == "host":
                    ns = f"/proc/{session.net.hosts[p['peer']].pid}/ns/net"
                    peer = p["peer_port"]
                else:
                    ns = session.net.switch_netns(p["peer"])
                    peer = switch_intf(by_name[p["peer"]]["bridge"], p["peer_port"])
                ports.append((p["intf"], ns, peer, p["rate_bps"]))
                own_ns[p["intf"]] = session.net.switch_netns(sw["name"])
        marker = cls(session.ecn, ports, frame_len_for_mtu(session.mtu),
                     session.net.queue_ms, session.net.frame, own_ns).install()
        session.results["ecn"] = {"marking": session.ecn.text(), "ports": len(ports)}
        session.progress(f"ECN marking on {len(ports)} switch ports: {session.ecn.text()}")
        return marker

    def install(self):
        self.map = bpf.Map(ENTRY.size, max(1, len(self.ports)))
        self.chain = bpf.prog_array(len(self.ports))
        m = self.ecn
        try:
            with ns_sockets() as ipr_in:
                for i, ((ifname, ns, peer, _), limit) in enumerate(zip(self.ports,
                                                                       self.limits)):
                    own = self.own_ns.get(ifname)
                    with programs(self.map, i, limit, m.kmin, m.kmax, m.pmax,
                                  self.frame_len // 2, self.chain) as fds:
                        ipr = ipr_in(own)
                        self.attach_tc(ipr, _index(ipr, ifname), own, ifname,
                                       fds["ecnq_in"], f"ecnq_in{i}")
                        ipr = ipr_in(ns)
                        self.attach_xdp(ipr, _index(ipr, peer), ns, peer, fds["ecnq_out"],
                                        f"ecnq_out{i}")
                        self.slots[(ns, peer)] = i
        except Exception as e:
            self.remove()
            if isinstance(e, NetlinkError):
                raise EnvironmentProblem(
                    f"the kernel refused to attach the dequeue ECN marker ({e}): it needs "
                    "tc clsact with cls_bpf and XDP; --ecn-at enqueue marks with nftables")
            raise
        return self

    def entries(self):
        """[(in, out, marks)] per port, in ``self.ports`` order."""
        return [ENTRY.unpack(self.map.lookup(i))[:3] for i in range(len(self.ports))]

    def marks(self):
        """{ifname: packets this port marked CE} since install."""
        return {p[0]: e[2] for p, e in zip(self.ports, self.entries())}

    def backlog(self):
        """{ifname: bytes in - out}: the queue the marker sees (0 when idle)."""
        return {p[0]: e[0] - e[1] for p, e in zip(self.ports, self.entries())}

    def reset(self, ifnames):
        """Count the queues of ``ifnames`` afresh from their TBFs' backlog.

        An interface set down purges its TBF, and a TBF whose peer is down
        sends into the void: bytes counted in that never come out.  Called
        once such a link is up again (dataplane.faults), so a port does not
        mark forever for a queue it no longer has."""
        wanted = [(i, p[0]) for i, p in enumerate(self.ports) if p[0] in set(ifnames)]
        with ns_sockets() as ipr_in:
            for i, ifname in wanted:
                ipr = ipr_in(self.own_ns.get(ifname))
                idx = _index(ipr, ifname, missing_ok=True)
                if idx is None:
                    continue
                backlog = shaping.stats(ipr, idx)[0]
                marks = ENTRY.unpack(self.map.lookup(i))[2]
                self.map.update(i, ENTRY.pack(backlog, 0, marks, 0))

    def close(self, session):
        """Record the marks per port in ``session``'s results, then detach."""
        try:
            record_marks(session, self)
        finally:
            session.teardown_errors += [f"ECN marker: {e}" for e in self.remove()]


def detach(attached):
    """Take off the programs of ``attached`` [("tc" | "xdp", netns, ifname)] (clsact
    and its filters, or XDP), last first; returns the errors.  An interface
    already gone took its programs with it."""
    errors = []
    with ns_sockets() as ipr_in:
        for kind, ns, ifname in reversed(attached):
            try:
                ipr = ipr_in(ns)
                idx = _index(ipr, ifname, missing_ok=True)
                if idx is None:
                    continue
                if kind == "tc":
                    ipr.tc("del", "clsact", index=idx)
                else:
                    ipr.link("set", index=idx,
                             xdp={"attrs": [("IFLA_XDP_FD", -1),
                                            ("IFLA_XDP_FLAGS", XDP_FLAGS_SKB_MODE)]})
            except Exception as e:            # its namespace went first
                errors.append(f"{ifname}: {e}")
    return errors


def _index(ipr, ifname, missing_ok=False):
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        if missing_ok:
            return None
        raise RunFailed(f"ECN marker: no interface {ifname}")
    return found[0]


