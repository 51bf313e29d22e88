"""ECN marking at every switch port's egress queue, without RED (nftables virtual queues).

Model.  A switch marks ECN-capable packets CE when its egress queue holds
more than K bytes (DCQCN's switches: RED with ECN, Kmin/Kmax/Pmax).  This
kernel has no RED (PLATFORM.md), so each switch port gets an nftables
netdev *egress* chain that runs before the port's TBF shaper:

    ip length > F/2 limit rate over <link rate in frames>/second burst <K/F> packets
        ip ecn { ect0, ect1 } ip ecn set ce

The limit is a token bucket that refills at the link's rate in frames of
the fabric's RoCE MTU (F bytes) and holds K/F of them: a frame finds no
token exactly when more than K bytes arrived beyond what the link drained
since (a virtual queue draining at the TBF's rate), and is marked.  The
bucket counts *packets*, not bytes, on purpose: in bytes mode nftables
sizes the bucket as one second of rate plus the burst (kernel
``nft_limit_init``: ``tokens = nsecs * (rate + burst) / rate``), so a
40 Mbit/s port would start marking only after 5 MB.  Measured on a veth
with a 40 Mbit/s TBF and K = 30 KB: a back-to-back burst of 40 frames of
4158 bytes was marked from the 8th frame on (30000 / 4158 = 7 frames of
credit), the bytes-mode rule marked none, and the same frames paced just
below the link rate were never marked.  Frames under half the MTU frame
(ACKs, CNPs, probes) neither count nor get marked.

``Ecn`` holds the thresholds:

- ``K`` (step marking): every ECN-capable frame over K is marked;
- ``KMIN:KMAX:PMAX`` (DCQCN/RED-like): four virtual queues between Kmin
  and Kmax mark with probability rising to Pmax, and one at Kmax marks all.

Only ECN-capable packets (ECT(0)/ECT(1)) are marked; the RoCEv2 ICRC masks
the TOS byte, so a marked frame keeps a valid ICRC, and nftables fixes the
IPv4 header checksum.  Per port, the packets marked are the CE packets that
leave minus those that arrived CE (counters at the chain's start and end).
Host NICs are not marked: their queue is the sender's own.
"""

import re
from dataclasses import dataclass

from emulator.dataplane.links.shaping import tbf_params
from emulator.dataplane.system import nft
from emulator.errors import ConfigError, EnvironmentProblem, RunFailed
from lab.modes import EcnAt
from traffic.roce.frames import frame_len_for_mtu

STEPS = 4                         # virtual queues between Kmin and Kmax
OFF = ("", "off", "none")         # --ecn words for no marking
AT = EcnAt.names()
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(B|KB|K|KIB|MB|M|MIB)?\s*$", re.I)
_UNIT = {None: 1, "B": 1, "K": 1000, "KB": 1000, "KIB": 1024, "M": 10 ** 6, "MB": 10 ** 6,
         "MIB": 1 << 20}


@dataclass(frozen=True)
class Ecn:
    """Marking thresholds in bytes; kmin == kmax is a step at K."""

    kmin: int
    kmax: int
    pmax: float = 1.0
    at: str = EcnAt.DEQUEUE      # where the queue is judged: dequeue (ecnq) or enqueue

    def __post_init__(self):
        if not 0 < self.kmin <= self.kmax or not 0 < self.pmax <= 1:
            raise ValueError("0 < Kmin <= Kmax and 0 < Pmax <= 1 required")
        if self.at not in AT:
            raise ValueError(f"marking at {self.at!r}: one of {', '.join(AT)}")

    @property
    def step(self):
        return self.kmin == self.kmax

    def levels(self):
        """[(depth bytes, marking probability)] of the virtual queues."""
        if self.step:
            return [(self.kmax, 1.0)]
        span = self.kmax - self.kmin
        return [(self.kmin + span * i // STEPS, self.pmax * (i + 1) / STEPS)
                for i in range(STEPS)] + [(self.kmax, 1.0)]

    def spec(self):
        """The thresholds as ``--ecn`` takes them back (bytes): ``K`` or ``KMIN:KMAX:PMAX``."""
        return str(self.kmax) if self.step else f"{self.kmin}:{self.kmax}:{self.pmax:g}"

    def text(self):
        if self.step:
            return f"step K={self.kmax} B at {self.at}"
        return f"Kmin={self.kmin} B Kmax={self.kmax} B Pmax={self.pmax:g} at {self.at}"


def _bytes(text, where):
    m = _SIZE.match(text)
    if not m:
        raise ConfigError(where, f"{text!r} is not a size like 30KB, 100KB or 20000")
    return int(float(m.group(1)) * _UNIT[m.group(2).upper() if m.group(2) else None])


def parse(text, where="--ecn", at=EcnAt.DEQUEUE):
    """'30KB' (step) or '20KB:80KB:0.2' (Kmin:Kmax:Pmax) -> Ecn marking ``at``
    dequeue or enqueue; None for 'off'."""
    if text is None or text.strip().lower() in OFF:
        return None
    parts = text.split(":")
    try:
        if len(parts) == 1:
            k = _bytes(parts[0], where)
            return Ecn(k, k, at=at)
        if len(parts) == 3:
            return Ecn(_bytes(parts[0], where), _bytes(parts[1], where), float(parts[2]),
                       at=at)
    except ValueError as e:
        raise ConfigError(where, f"{text!r}: {e}")
    raise ConfigError(where, f"{text!r} is K (30KB) or Kmin:Kmax:Pmax (100KB:400KB:1)")


def chain_rules(ecn, rate_bps, frame_len):
    """The nftables rules of one port's egress chain (frames of ``frame_len`` bytes)."""
    pps = max(1, round(rate_bps / 8 / frame_len))
    big = f"ip length > {frame_len // 2} "
    rules = ["ip ecn ce counter"]                     # arrived marked already
    for depth, p in ecn.levels():
        coin = "" if p >= 1 else f"numgen random mod 10000 < {max(1, round(p * 10000))} "
        rules.append(f"{big}limit rate over {pps}/second burst {max(1, depth // frame_len)} "
                     f"packets ip ecn {{ ect0, ect1 }} {coin}ip ecn set ce")
    rules.append("ip ecn ce counter")                 # leaves marked
    return rules


def record_marks(session, marker):
    """``marker``'s marks per port into ``session``'s results (a failed read is a
    teardown error, not an exception)."""
    try:
        marks = marker.marks()
        session.results["ecn"]["marked_packets"] = {k: v for k, v in marks.items() if v}
        session.results["ecn"]["marked_total"] = sum(marks.values())
    except (RunFailed, OSError) as e:
        session.teardown_errors.append(f"ECN counters: {e}")


class Marker:
    """The run's marking table ``fl<tag>ecn`` over ``ports`` [(ifname, rate_bps)]:
    one per network namespace of ``netns_of`` ({ifname: path}; a port not in it
    is in this namespace)."""

    def __init__(self, tag, ecn, ports, frame_len, netns_of=None):
        self.table = f"fl{tag}ecn"
        self.ecn = ecn
        self.frame_len = frame_len
        self.ports = sorted(ports)
        self.chains = {f"e{i}": ifname for i, (ifname, _) in enumerate(self.ports)}
        self.netns_of = dict(netns_of or {})
        self.spaces = sorted({self.netns_of.get(i) or "" for i, _ in self.ports})

    @classmethod
    def for_session(cls, session):
        """Mark on every switch port of ``session``'s fabric; noted in its results."""
        ports = [(p["intf"], p["rate_bps"]) for sw in session.topo["switches"]
                 for p in sw["ports"]]
        netns_of = {p["intf"]: session.net.switch_netns(sw["name"])
                    for sw in session.topo["switches"] for p in sw["ports"]}
        marker = cls(session.state.tag, session.ecn, ports,
                     frame_len_for_mtu(session.mtu), netns_of=netns_of).install()
        session.results["ecn"] = {"marking": session.ecn.text(), "ports": len(ports)}
        session.progress(f"ECN marking on {len(ports)} switch ports: {session.ecn.text()}")
        return marker

    def close(self, session):
        """Record the marks per port in ``session``'s results, then remove the table."""
        try:
            record_marks(session, self)
        finally:
            self.remove()

    def reset(self, ifnames):
        """Nothing to do: a virtual queue drains by the clock, whatever the link did."""

    def install(self):
        for ns in self.spaces:
            self._install(ns)
        return self

    def _install(self, ns):
        lines = [f"table netdev {self.table} {{"]
        for i, (ifname, rate) in enumerate(self.ports):
            if (self.netns_of.get(ifname) or "") != ns:
                continue
            lines += [f"  chain e{i} {{",
                      f"    type filter hook egress device \"{ifname}\" priority -10;"]
            lines += [f"    {r}" for r in chain_rules(self.ecn, rate, self.frame_len)]
            lines.append("  }")
        lines.append("}")
        try:
            nft.apply(ns, "\n".join(lines) + "\n", timeout=30)
        except RunFailed as e:
            raise EnvironmentProblem(f"nftables refused the ECN marker ({e}): marking needs "
                                     "nftables netdev egress hooks (Linux 5.16+, nft 1.0.1+)")
        return self

    def marks(self):
        """{ifname: packets this port marked CE} since install."""
        items = []
        for ns in self.spaces:
            doc = nft.table(ns, self.table, timeout=20)
            items += doc.get("nftables", [])
        seen = {}
        for item in items:
            rule = item.get("rule")
            if not rule:
                continue
            for expr in rule.get("expr", []):
                if "counter" in expr:
                    seen.setdefault(rule["chain"], []).append(expr["counter"]["packets"])
        return {self.chains[c]: max(0, v[-1] - v[0]) for c, v in seen.items()
                if c in self.chains and len(v) >= 2}

    def remove(self):
        for ns in self.spaces:
            nft.delete_table(ns, self.table, timeout=20, check=False)


# HPCC's DCQCN thresholds (100 KB / 400 KB at 25 Gbit/s: 32 / 128 us of queue), the
# same bytes here once time is scaled to the link rate; Pmax 1, not 0.2: within the
# 10 ms CNP interval (traffic.roce.dcqcn) a QP of a 7 -> 1 incast sends about 2 packets,
# so a 20 % chance per packet would leave most intervals without a CNP
# (docs/transport.md)
DEFAULT_ECN = "100KB:400KB:1"


def default_ecn(fabric, queue_ms, at=EcnAt.DEQUEUE):
    """``DEFAULT_ECN``, scaled down so Kmax is at most half the smallest switch-port
    queue of ``queue_ms``: marks must start well before a shallow buffer drops."""
    e = parse(DEFAULT_ECN, at=at)
    queue = min(tbf_params(lk.rate_bps, queue_ms)["limit"] for lk in fabric.links)
    if 2 * e.kmax <= queue:
        return e
    k = queue / (2 * e.kmax)
    return Ecn(max(1, int(e.kmin * k)), max(1, int(e.kmax * k)), e.pmax, at=at)
