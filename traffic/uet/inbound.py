"""What a NIC's UET PDCs do with an arriving frame (``pdcs.UetPdcs`` inherits it).

A data packet reaches its target side (created on the first SYN packet: start
PSN = PSN - the packet's offset, keyed by the initiator's address and PDC id),
is placed or counted there (``pds.Receiver``) and answered with ACK_CC or NACK;
a trimmed one is NACKed at once.  An ACK_CC, NACK or CONTROL packet acts on the
initiator's side it names: the delivery state, the EV policy's feedback, the
window (NSCC) or credit (RCCC), and the PDC's close.  The attributes are
``UetPdcs``'s (it sets them up); this class holds the methods only.
"""

from traffic.uet import ev as evs
from traffic.uet.cc import Credit, Nscc
from traffic.uet.control import parse_control
from traffic.uet.frames import parse_data
from traffic.uet.layout import (
    ACK_CC,
    CTRL,
    CTRL_CLOSE_CMD,
    CTRL_CREDIT,
    F_AR,
    F_RETX,
    NACK,
    NACK_TRIMMED,
    PSN_OFFSET_MASK,
)
from traffic.uet.pds import PLACED, Receiver

CLOSED, SYN, OPEN = "closed", "syn", "open"      # an initiator's PDC


class _Target:
    __slots__ = ("receiver", "pdcid", "peer_spdcid", "tpl", "last_ev", "last_ns", "peer_ip")

    def __init__(self, receiver, pdcid, peer_spdcid, tpl, peer_ip):
        self.receiver, self.pdcid, self.peer_spdcid, self.tpl = receiver, pdcid, peer_spdcid, tpl
        self.last_ev, self.last_ns, self.peer_ip = 0xC000, 0, peer_ip


class Inbound:
    """Arriving frames: the target sides and the acknowledgements of the initiators."""

    def receive(self, frame, n, now, peer_of):
        """A UET frame that arrived: data is placed (returns (Data, placed?)),
        acknowledgements act on the PDCs (returns None).  ``peer_of(ip bytes)``
        gives (peer MAC, peer IP text) to build a missing template with."""
        d = parse_data(frame, n)
        if d is not None:
            if d.dst != self.my_ip_b:
                return None
            return d, self._data(d, now, peer_of)
        c = parse_control(frame, n)
        if c is None or c.dst != self.my_ip_b:
            return None
        if not c.ok:
            self.c["control_corrupted"] += 1
        elif c.ptype == ACK_CC:
            self._ack(c, now)
        elif c.ptype == NACK:
            self._nack(c, now)
        elif c.ptype == CTRL:
            self._ctrl(c, now, peer_of)
        return None

    def _target(self, d, now, peer_of):
        key = (d.src, d.spdcid)
        t = self.targets.get(key)
        if t is None:
            if not d.syn:
                self.c["unknown_pdc"] += 1
                return None
            tpl = self.templates.get(d.src) or self.prepare(d.src, *peer_of(d.src))
            start = (d.psn - (d.dpdcid & PSN_OFFSET_MASK)) & 0xFFFFFFFF
            t = self.targets[key] = _Target(Receiver(self.p.pds, start), self._new_target_id(),
                                            d.spdcid, tpl, d.src)
            self.c["targets_opened"] += 1
        return t

    def _new_target_id(self):
        self.next_pdcid = self.next_pdcid % 0xFFFE + 1
        return self.next_pdcid

    def _data(self, d, now, peer_of):
        if not d.ok and not d.trimmed:
            return False                          # corrupted: the engine counts it
        t = self._target(d, now, peer_of)
        if t is None:
            return False
        t.last_ev, t.last_ns = d.ev, now
        if d.trimmed:
            _, reply = t.receiver.trimmed(d.psn, now)
            self._reply(t, reply)
            return False
        ecn = d.ecn == 3
        if ecn:
            self.c["ce_received"] += 1
        verdict, reply = t.receiver.data(d.psn, d.length, now, bool(d.flags & F_AR), ecn,
                                         bool(d.flags & F_RETX))
        if self.sched is not None:
            self.sched.demand((d.src, d.spdcid), d.credit_target)
        self._reply(t, reply)
        if t.receiver.first_unacked is not None:
            self.acking[(d.src, d.spdcid)] = t
        return verdict == PLACED

    def _reply(self, t, reply, close=False):
        if reply is None:
            return
        r = t.receiver
        if reply[0] == "ack":
            _, psn, ecn, retx = reply
            cack, base, bitmap, ooo = r.ack_fields(psn)
            credit = self.sched.take((t.peer_ip, t.peer_spdcid)) if self.sched else None
            self.send_frame(t.tpl.ack(t.pdcid, t.peer_spdcid, cack, psn, base, bitmap, ecn,
                                      retx, ooo, r.rcvd_bytes, t.last_ev, credit, close))
        else:
            _, psn, code = reply
            self.send_frame(t.tpl.nack(t.pdcid, t.peer_spdcid, psn, code, r.high,
                                       ev=t.last_ev))

    def _init_of(self, c):
        i = self.by_spdcid.get(c.dpdcid) or self.closing.get(c.dpdcid)
        if i is None:
            self.c["control_unknown_qp"] += 1
        return i

    def _ack(self, c, now):
        i = self._init_of(c)
        if i is None:
            return
        if i.state == SYN and i.spdcid == c.dpdcid:
            i.state, i.dpdcid = OPEN, c.spdcid
        if c.close:
            self._closed(i)
            return
        r = i.sender.ack(c.cack, c.ack_psn, c.sacked(), now, c.ecn)
        for ev, kind in r.evs:
            i.ev.feedback(ev, kind, now)
        if isinstance(i.cc, Nscc):
            i.cc.on_ack(now, r.acked_bytes, r.rtt_ns, c.ecn)
        elif isinstance(i.cc, Credit) and c.credit:
            i.cc.grant(c.credit)
        i.last_ns = now
        self._queue(i)
        if not i.sender.busy and not i.queued:
            self.idle[i.key] = now + self.p.close_idle_ns

    def _nack(self, c, now):
        i = self._init_of(c)
        if i is None:
            return
        again = i.sender.nack(c.psn, c.code, now)
        for ev, kind in again:
            if kind in (evs.TRIM, evs.LOST):
                i.ev.feedback(ev, kind, now)
        if again and c.code == NACK_TRIMMED and isinstance(i.cc, Nscc):
            i.cc.on_nack(now, self.p.frame_len)
        i.last_ns = now
        self._queue(i)

    def _ctrl(self, c, now, peer_of):
        if c.ctl_type == CTRL_CREDIT:
            i = self._init_of(c)
            if i is not None and isinstance(i.cc, Credit):
                i.cc.grant(c.payload)
            return
        if c.ctl_type == CTRL_CLOSE_CMD:
            t = self.targets.pop((c.src, c.spdcid), None)
            self.acking.pop((c.src, c.spdcid), None)
            if t is None:
                return
            self._keep(t.receiver.counters())
            self.c["targets_closed"] += 1
            self.c["close_acks_sent"] += 1
            self.send_frame(t.tpl.ack(t.pdcid, t.peer_spdcid, c.psn, c.psn, c.psn, 0,
                                      ev=t.last_ev, close=True))
