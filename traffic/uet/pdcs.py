"""A NIC's UET packet delivery contexts: set-up, delivery, entropy, congestion, teardown.

``UetPdcs`` glues ``pds`` (delivery), ``ev`` (entropy values), ``cc``
(congestion control) and the frames to an engine (``traffic.ranks.rank``, or a
job's NICs, ``traffic.jobs.nic``), with the interface ``roce.qps.RankQPs`` has:
``sent``, ``resends``, ``poll``, ``next_deadline``, ``acked_through``, ``busy``,
``failed``, ``counters``.  Connections are keyed ``(peer, pdc)`` on the sending
side, as QPs are (``pdc`` in range(``--qps``)).

PDC life (UE Specification 1.0.1 §3.5, as this lab reads it):

- *open*: the first packet assigned to a closed PDC opens it: a source PDC id
  (16 bits) and a random start PSN; every packet carries SYN and its PSN offset
  from the start PSN until the first ACK arrives, which names the target's PDC
  id (the ACK's source id): the PDC is established, and its packets carry that
  id.  The target creates its side on the first SYN packet (start PSN = PSN -
  offset) and keys it by (initiator address, initiator's PDC id).
- *close*: a PDC idle for ``close_idle_ns`` (nothing queued, nothing
  outstanding) sends a CONTROL ``CLOSE_CMD`` with the next PSN; the target frees
  its side and answers with an ACK whose REQ says close; the initiator frees its
  own then.  A packet for a PDC that is closing opens a new one.  A job's end
  closes every PDC (``close_all``).

Each packet's entropy value comes from the PDC's EV policy at the moment it
leaves (``wire``) and is remembered by PSN, so what its ACK, NACK or timer says
reaches that EV (REPS).  RCCC: requests carry the PDC's credit target, and the
receiving NIC's ``cc.Scheduler`` grants credit by ACK or CONTROL CREDIT.
"""

import random
import socket
from dataclasses import dataclass

from lab.modes import CC, EvPolicy
from traffic.uet import ev as evs
from traffic.uet.cc import Credit, Nscc, NsccParams, Scheduler
from traffic.uet.control import ControlTemplate
from traffic.uet.frames import Wire
from traffic.uet.inbound import CLOSED, OPEN, SYN, Inbound
from traffic.uet.layout import (
    CTRL_CLOSE_CMD,
    CTRL_CREDIT,
    F_RETX,
    F_SYN,
    PSN_OFFSET_MASK,
    psn_diff,
)
from traffic.uet.pds import PdsParams, Sender


@dataclass(frozen=True)
class UetConfig:
    """What a NIC's PDCs are (``traffic.ranks.config.uet_config`` builds it)."""

    line_bps: float
    mtu: int = 4096
    frame_len: int = 4198                 # a full data frame's bytes
    pds: PdsParams = PdsParams()
    ev_policy: EvPolicy = EvPolicy.default()
    ev_set: int = 256
    cc: CC = CC.NSCC
    nscc: NsccParams = None
    initial_credit: int = 0               # RCCC: bytes a PDC may send unsolicited
    freeze_ns: int = 2_000_000_000        # REPS: how long a loss freezes exploring
    hold_ns: int = 10_000_000_000         # ... and keeps a lost packet's EV retired
    close_idle_ns: int = 2_000_000_000    # an idle PDC closes after this long


class _Init:
    """The initiator's side of one PDC (one connection key)."""

    __slots__ = ("key", "qpn", "state", "spdcid", "dpdcid", "sender", "ev", "cc", "pending",
                 "queued", "last_ns", "closing_psn", "opened_ns", "admitted")

    def __init__(self, key, qpn):
        self.key, self.qpn = key, qpn
        self.state, self.spdcid, self.dpdcid = CLOSED, None, 0
        self.sender = self.ev = self.cc = None
        self.pending = {}          # psn -> EV chosen when it last left
        self.queued = 0            # bytes assigned PSNs, not yet sent once
        self.admitted = 0          # bytes the window let go, not yet handed to ``sent``
        self.last_ns = 0
        self.closing_psn = None
        self.opened_ns = None


class UetPdcs(Inbound):
    """Every PDC of one NIC; ``send_frame(bytes)`` puts a control frame on the wire.

    ``params``: a ``traffic.ranks.config.UetConfig`` (delivery, EV policy and set,
    congestion control, the line rate, frame length, PDS timers)."""

    def __init__(self, params, send_frame, my_mac, my_ip, dscp=26, seed=None, peer_ip=None,
                 peer_mac=None):
        self.p = params
        self.send_frame = send_frame
        self.my_mac, self.my_ip, self.dscp = my_mac, my_ip, dscp
        self.peer_ip = peer_ip if peer_ip is not None else {}    # peer -> IP text
        self.peer_mac = peer_mac if peer_mac is not None else {}  # peer -> next-hop MAC
        self.my_ip_b = socket.inet_aton(my_ip)
        self.rng = random.Random(seed)
        self.init = {}             # key -> _Init
        self.by_spdcid = {}        # my PDC id -> _Init (open or opening)
        self.closing = {}          # my PDC id -> _Init waiting for its close ACK
        self.targets = {}          # (peer ip bytes, peer's PDC id) -> _Target
        self.templates = {}        # peer ip bytes -> ControlTemplate
        self.acking = {}           # target key -> _Target with a coalesced ACK due
        self.retx = []             # keys with packets to send again
        self.armed = set()         # keys whose timers may run
        self.idle = {}             # key -> when its PDC may close if still idle
        self.next_pdcid = self.rng.randrange(1, 1 << 15)
        self.sched = Scheduler(params.line_bps, params.mtu) if params.cc == CC.RCCC else None
        self.any_failed = False
        self.trace = []            # (DCQCN's cuts; none here)
        self.gone = {}             # counters of PDC sides freed (closed, replaced)
        self.gone_evs = []         # EV policies of freed PDCs
        self.c = {"pdcs_opened": 0, "pdcs_closed": 0, "targets_opened": 0, "targets_closed": 0,
                  "unknown_pdc": 0, "control_corrupted": 0, "control_unknown_qp": 0,
                  "ce_received": 0, "credit_frames_sent": 0, "close_acks_sent": 0}

    # -- the sending side ----------------------------------------------------------
    def add_qp(self, key, qpn):
        if key not in self.init:
            self.init[key] = _Init(key, qpn)

    def usable(self, key):
        i = self.init[key]
        return i.sender is None or not i.sender.failed

    def assign_psn(self, key, size, now=0):
        """The PSN of a new packet of ``size`` bytes on connection ``key`` (opens its
        PDC if needed)."""
        i = self.init[key]
        if i.state == CLOSED or i.closing_psn is not None:
            self._open(i, now)
        i.queued += size
        return i.sender.assign()

    def _open(self, i, now):
        if i.closing_psn is not None:            # a new PDC; the old one finishes closing
            old = _Init(i.key, i.qpn)
            for f in _Init.__slots__:
                setattr(old, f, getattr(i, f))
            self.closing[old.spdcid] = old
            self.by_spdcid.pop(old.spdcid, None)
            i.closing_psn = None
            i.pending = {}
        elif i.sender is not None:               # closed: its counts stay counted
            self._keep(i.sender.counters())
            self.gone_evs.append(i.ev)
        p = self.p
        i.spdcid = self._new_pdcid()
        i.state, i.dpdcid, i.opened_ns = SYN, 0, now
        i.sender = Sender(p.pds, self.rng.getrandbits(32))
        salt = self.rng.getrandbits(32)
        i.ev = evs.policy(p.ev_policy, p.ev_set, salt, seed=salt, single=p.pds.rod,
                          freeze_ns=p.freeze_ns, hold_ns=p.hold_ns)
        i.cc = Nscc(p.nscc, now) if p.cc == CC.NSCC else \
            Credit(p.initial_credit) if p.cc == CC.RCCC else None
        self.by_spdcid[i.spdcid] = i
        self.c["pdcs_opened"] += 1

    def _new_pdcid(self):
        while True:
            self.next_pdcid = self.next_pdcid % 0xFFFE + 1
            if self.next_pdcid not in self.by_spdcid and self.next_pdcid not in self.closing:
                return self.next_pdcid

    def wire(self, packet, now, again=False):
        """``packet`` as it leaves now: its EV, flags and PDC fields (frames.Wire)."""
        tpl, psn = packet[0], packet[1]
        i = self.init[packet_key(packet)]
        ev = i.ev.next(now)
        i.pending[psn] = ev
        s = i.sender
        flags = F_RETX if again else 0
        if i.state == SYN:
            flags |= F_SYN
            dpd = psn_diff(psn, s.start) & PSN_OFFSET_MASK
        else:
            dpd = i.dpdcid
        clear = psn_diff(s.low, psn) if s.out else 0
        credit = 0
        if isinstance(i.cc, Credit):
            credit = max(0, i.queued - i.cc.balance)
        return (Wire(tpl, ev, flags, i.spdcid, dpd, min(0, clear), credit),) + packet[1:]

    def admit(self, key, size, now):
        """Whether connection ``key``'s window or credit lets a packet of ``size`` go
        (if so, it is counted as on its way: a batch is admitted before it is sent)."""
        i = self.init[key]
        ok = self._room(i, size)
        if ok:
            i.admitted += size
        return ok

    @staticmethod
    def _room(i, size):
        cc = i.cc
        if i.sender is None or cc is None:
            return True
        if isinstance(cc, Credit):
            return cc.balance - i.admitted >= size
        return cc.can_send(i.sender.inflight + i.admitted, size)

    def sent(self, key, psn, packet, now, again=False):
        i = self.init[key]
        size = packet[0].len
        i.admitted = max(0, i.admitted - size)
        if not again:
            i.queued -= size
        ev = i.pending.pop(psn, 0xC000)
        i.sender.sent(psn, packet, size, now, ev, again)
        if isinstance(i.cc, Credit):
            i.cc.sent(size)
        i.last_ns = now
        self.armed.add(key)
        self.idle.pop(key, None)

    def next_send_ns(self, now):
        """How long until a window may open: ACKs open them, and an ACK wakes the
        engine anyway; the timers are ``next_deadline``'s."""
        return 50_000_000

    def resends(self, limit, now=None):
        """Up to ``limit`` (key, psn, packet) to send again, round-robin over PDCs
        whose window lets them."""
        out, blocked = [], set()
        while self.retx and len(out) < limit and len(blocked) < len(self.retx):
            for key in list(self.retx):
                i = self.init[key]
                if now is not None and not self._room(i, self.p.frame_len):
                    blocked.add(key)
                    continue
                item = i.sender.next_resend()
                if item is None:
                    self.retx.remove(key)
                    continue
                i.admitted += item[1][0].len
                out.append((key,) + item)
                if len(out) >= limit:
                    break
        return out

    def _queue(self, i):
        if i.sender.resend and i.key not in self.retx:
            self.retx.append(i.key)

    # -- what arrives ---------------------------------------------------------------
    def prepare(self, peer_ip, peer_mac, ip_text, dqpn=None):
        """Build the control frames to one peer now (scapy takes ms per frame)."""
        if peer_ip not in self.templates:
            self.templates[peer_ip] = ControlTemplate(self.my_mac, peer_mac, self.my_ip,
                                                      ip_text, self.dscp)
        return self.templates[peer_ip]

    def _keep(self, counts):
        for k, v in counts.items():
            self.gone[k] = self.gone.get(k, 0) + v

    def _closed(self, i):
        if self.closing.pop(i.spdcid, None) is not None:
            self._keep(i.sender.counters())
            self.gone_evs.append(i.ev)
        if self.init.get(i.key) is not None and self.init[i.key].spdcid == i.spdcid:
            cur = self.init[i.key]
            self.by_spdcid.pop(cur.spdcid, None)
            cur.state, cur.closing_psn = CLOSED, None
        self.c["pdcs_closed"] += 1

    # -- timers ----------------------------------------------------------------------
    def poll(self, now):
        """Run what is due at ``now``; returns the next deadline (``next_deadline``)."""
        for key in list(self.armed):
            i = self.init[key]
            s = i.sender
            if s is None or not s.busy or s.failed:
                self.armed.discard(key)
                if s is not None and not s.failed:
                    self.idle[key] = i.last_ns + self.p.close_idle_ns
                continue
            lost = s.poll(now)
            for ev, _ in lost:
                i.ev.feedback(ev, evs.LOST, now)
                if isinstance(i.cc, Nscc):
                    i.cc.on_timeout(now, self.p.frame_len)
            if s.failed:
                self.any_failed = True
            self._queue(i)
        for tkey, t in list(self.acking.items()):
            reply = t.receiver.poll(now)
            if reply:
                self._reply(t, reply)
            if t.receiver.first_unacked is None:
                del self.acking[tkey]
        for key, due in list(self.idle.items()):
            if now >= due:
                del self.idle[key]
                self._maybe_close(self.init[key], now)
        if self.sched is not None:
            for tkey in self.sched.poll(now):
                t = self.targets.get(tkey)
                if t is not None:
                    credit = self.sched.take(tkey)
                    self.c["credit_frames_sent"] += 1
                    self.send_frame(t.tpl.control(t.pdcid, t.peer_spdcid, CTRL_CREDIT,
                                                  t.receiver.expected, credit, ev=t.last_ev))
        return self.next_deadline(now)

    def _maybe_close(self, i, now):
        if i.state != OPEN or i.closing_psn is not None or i.queued or \
                (i.sender and (i.sender.busy or i.sender.resend)) or \
                now - i.last_ns < self.p.close_idle_ns:
            return
        self.close(i, now)

    def close(self, i, now):
        """Send PDC ``i``'s CLOSE_CMD (once its sender is idle)."""
        ip = self.peer_ip.get(i.key[0])
        if ip is None:
            return
        i.closing_psn = i.sender.assign()
        tpl = self.templates.get(socket.inet_aton(ip)) or \
            self.prepare(socket.inet_aton(ip), self.peer_mac[i.key[0]], ip)
        self.send_frame(tpl.control(i.spdcid, i.dpdcid, CTRL_CLOSE_CMD, i.closing_psn,
                                    ar=True, ev=i.ev.next(now)))

    def close_all(self, now):
        """Close every established, idle PDC (a job's end)."""
        for i in self.init.values():
            if i.state == OPEN and i.closing_psn is None and not i.queued and \
                    i.sender is not None and not i.sender.busy:
                self.close(i, now)

    def next_deadline(self, now=None):
        due = []
        for key in self.armed:
            d = self.init[key].sender.deadline()
            if d is not None:
                due.append(d)
        due += [t.receiver.deadline() for t in self.acking.values()
                if t.receiver.first_unacked is not None]
        due += list(self.idle.values())
        if self.sched is not None and now is not None:
            n = self.sched.next_ns(now)
            if n is not None:
                due.append(n)
        return min(due, default=None)

    # -- what the engines ask ------------------------------------------------------
    def acked_through(self, key, psn):
        """Nothing outstanding up to ``psn`` on ``key`` (a PSN of an earlier PDC,
        closed only once everything was acknowledged, is done)."""
        i = self.init[key]
        s = i.sender
        if s is None:
            return True
        if psn_diff(psn, s.start) < 0 or psn_diff(psn, s.next_psn) >= 0:
            return True
        return s.acked_through(psn)

    def busy(self):
        return any(i.sender is not None and i.sender.busy and not i.sender.failed
                   for i in self.init.values())

    def failed(self):
        return sorted(k for k, i in self.init.items() if i.sender and i.sender.failed)

    def last_retired_ns(self):
        """When an EV policy last retired an EV (its packet lost), or None."""
        last = [i.ev.last_retired_ns for i in self.init.values()
                if i.ev is not None and i.ev.last_retired_ns is not None]
        return max(last, default=None)

    def windows(self):
        """{key: [(ns, cwnd bytes)]} of every NSCC window (the trace a plot draws)."""
        return {k: list(i.cc.trace) for k, i in self.init.items() if isinstance(i.cc, Nscc)}

    def per_qp(self):
        """Every PDC's own counts, as ``RankQPs.per_qp`` (a PDC's id stands for the
        QP number on both sides)."""
        req = [{"src_ip": self.my_ip, "qpn": i.spdcid, "peer": k[0], "qp": k[1],
                "sent_packets": i.sender.sent_first if i.sender else 0,
                "outstanding": len(i.sender.out) if i.sender else 0,
                "failed": bool(i.sender and i.sender.failed)} for k, i in self.init.items()]
        resp = [{"src_ip": socket.inet_ntoa(ip), "qpn": spd,
                 "delivered_packets": t.receiver.placed}
                for (ip, spd), t in self.targets.items()]
        return {"requesters": req, "responders": resp}

    def counters(self):
        out = dict(self.c)
        keys = ("retransmitted_packets", "retransmitted_by_nack", "retransmitted_by_trim",
                "retransmitted_by_timeout", "timeouts", "naks_received", "acks_received")
        for k in keys:
            out[k] = 0
        for i in list(self.init.values()) + list(self.closing.values()):
            if i.sender is not None:
                for k, v in i.sender.counters().items():
                    if k in keys:
                        out[k] += v
        for k in keys:
            out[k] += self.gone.get(k, 0)
        for k in ("placed_packets", "placed_out_of_order", "duplicates_received",
                  "dropped_out_of_order", "trimmed_received", "acks_sent", "naks_sent"):
            out[k] = sum(t.receiver.counters()[k] for t in self.targets.values()) + \
                self.gone.get(k, 0)
        pols = [i.ev for i in list(self.init.values()) + list(self.closing.values())
                if i.ev is not None] + self.gone_evs
        out["evs_retired"] = sum(p.retired for p in pols)
        out["ev_marked"] = sum(p.counts[evs.ECN] for p in pols)
        out["ev_trimmed"] = sum(p.counts[evs.TRIM] for p in pols)
        out["ev_freezes"] = sum(getattr(p, "freezes", 0) for p in pols)
        ccs = [i.cc for i in self.init.values() if isinstance(i.cc, Nscc)]
        for k in ("quick_adapt", "decrease", "noop", "fair", "proportional"):
            out[f"nscc_{k}"] = sum(c.stats[k] for c in ccs)
        # the names RC's report and fidelity read
        out["out_of_sequence_received"] = out["placed_out_of_order"]
        out["cnps_sent"] = out["cnps_received"] = 0
        return out


def packet_key(packet):
    """(peer, pdc) of a packet tuple, from its flow id (``ranks.config.flow_id``)."""
    return (packet[2] >> 8) & 0xFFF, packet[2] & 0xFF
