"""The RC transport of one rank: a requester and a responder per QP, ACK/NAK frames.

``RankQPs`` glues ``transport`` (pure state machines) to a rank:

- data the rank sends goes through ``sent``; what must go again comes from
  ``resends`` (before any new packet: go-back-N keeps each QP in PSN order);
- data that arrives goes through ``arrived``, which says whether the
  packet is accepted (in order) and sends the ACK or NAK it calls for;
- ACKs and NAKs that arrive go to ``control``;
- ``poll`` runs the timers (retransmission, coalesced ACKs), and
  ``next_deadline`` says when the next one is due.

Packets are the rank's tuples ``(template, psn, flow, tag, step, index,
count)``.  A QP is keyed ``(peer, qp)`` on the sending side; incoming
ACKs name it by its QP number.  A QP that ran out of retries is *failed*:
its packets are dropped and ``failed`` lists it, as the NIC would report
"transport retry counter exceeded".
"""

import socket
from collections import deque

from traffic.roce.dcqcn import CnpPacer, Dcqcn
from traffic.roce.rcframes import ACKNOWLEDGE, CNP, SYN_ACK, SYN_NAK_SEQ, ControlTemplate
from traffic.roce.timely import Timely
from traffic.roce.transport import Requester, Responder, psn_diff


class RankQPs:
    """Every QP of one rank; ``send_frame(bytes)`` puts an ACK/NAK/CNP on the wire.

    With ``timely`` (``TimelyParams``), every QP is paced at the rate its
    ACKs' round-trip times set (first transmissions only: Karn's rule).
    With ``dcqcn`` (``DcqcnParams``), a QP gets a DCQCN reaction point at
    its first CNP (as NICs allocate a rate limiter then, with alpha = 1):
    ``may_send``/``charge`` pace it at its current rate, each CNP cuts it;
    and packets arriving CE-marked earn their sender a CNP (paced per QP).
    """

    def __init__(self, params, send_frame, my_mac, my_ip, dscp=26, dcqcn=None, ooo=False,
                 timely=None, rate_slack_ns=0, trace_limit=500):
        self.p = params
        # how far a rate-limited QP may catch up after a late look (a caller that
        # wakes on a tick sends what fell due meanwhile, as a bucket of that depth)
        self.slack = rate_slack_ns
        self.timely = timely     # TimelyParams: every QP paced by its RTT (traffic.roce.timely)
        self.sent_at = {}        # (peer, qp) -> deque of (psn, ns) of first transmissions
        self.ooo = ooo           # responders place out of order (spraying NICs)
        self.dcqcn = dcqcn
        self.rp = {}             # (peer, qp) -> Dcqcn
        self.next_ok = {}        # (peer, qp) -> earliest next send (ns) at the QP's rate
        self.pacer = CnpPacer(dcqcn.cnp_interval_ns) if dcqcn else None
        self.ce_received = self.cnps_sent = self.cnps_received = 0
        # (ns, peer, rate after the cut, alpha after it) of the first CNPs, and
        # (ns, peer, "nak"|"timeout") of the first go-backs: ``trace_limit`` each
        self.trace, self.events, self.trace_limit = [], [], trace_limit
        self.send_frame = send_frame
        self.my_mac, self.my_ip, self.dscp = my_mac, my_ip, dscp
        self.req = {}            # (peer, qp) -> Requester
        self.by_qpn = {}         # my QP number -> (peer, qp)
        self.resp = {}           # (peer ip bytes, dqpn) -> [Responder, ACK template, msn]
        self.retx = []           # keys with packets to send again (round-robin)
        # only QPs with a timer running are looked at by ``poll`` and ``next_deadline``
        # (a process serving many NICs has hundreds of idle ones)
        self.armed = set()       # requester keys whose retransmission timer may run
        self.acking = {}         # responder key -> state, while a coalesced ACK is due
        self.any_failed = False  # some QP ran out of retries (``failed`` says which)
        self.acks_sent = self.naks_sent = self.acks_received = 0
        self.control_corrupted = self.control_unknown = 0

    # -- requester side --------------------------------------------------------
    def add_qp(self, key, qpn):
        if key not in self.req:
            self.req[key] = Requester(self.p)
            self.by_qpn[qpn] = key
            if self.timely is not None:
                self.rp[key] = Timely(self.timely)
                self.sent_at[key] = deque()

    def usable(self, key):
        return not self.req[key].failed

    def sent(self, key, psn, packet, now, again=False):
        self.req[key].sent(psn, packet, now, again)
        self.armed.add(key)
        times = self.sent_at.get(key)
        if times is not None:
            if again:
                times.clear()     # Karn: no RTT from a range that went twice
            else:
                times.append((psn, now))

    def may_send(self, key, now):
        """The QP's rate allows a packet now (always, without DCQCN)."""
        return now >= self.next_ok.get(key, 0)

    def charge(self, key, nbytes, now):
        """A packet of ``nbytes`` of QP ``key`` leaves now: pace the next one."""
        rp = self.rp.get(key)
        if rp is None:        # no CNP yet: the QP runs at line rate (no rate limiter)
            return
        rp.sent(nbytes)
        floor = now - self.slack
        self.next_ok[key] = max(floor, self.next_ok.get(key, floor)) + int(
            nbytes * 8e9 / rp.rate_bps)

    def next_send_ns(self, now):
        """How long until some QP's rate allows a packet (ns, >= 0)."""
        waits = [t - now for t in self.next_ok.values() if t > now]
        return min(waits, default=0)

    def resends(self, limit, now=None):
        """Up to ``limit`` (key, psn, packet) to send again, round-robin over QPs
        (skipping QPs whose rate does not allow one yet)."""
        out = []
        blocked = set()
        while self.retx and len(out) < limit and len(blocked) < len(self.retx):
            for key in list(self.retx):
                if now is not None and not self.may_send(key, now):
                    blocked.add(key)
                    continue
                item = self.req[key].next_resend()
                if item is None:
                    self.retx.remove(key)
                    continue
                out.append((key,) + item)
                if now is not None:
                    self.charge(key, item[1][0].len, now)
                if len(out) >= limit:
                    break
        return out

    def control(self, c, now):
        """An ACK, NAK or CNP for one of this rank's QPs."""
        if not c.icrc_ok:
            self.control_corrupted += 1
            return
        key = self.by_qpn.get(c.dqpn)
        if key is None:
            self.control_unknown += 1
            return
        if c.opcode == CNP:
            self.cnps_received += 1
            if self.dcqcn is not None:
                rp = self.rp.get(key)
                if rp is None:
                    rp = self.rp[key] = Dcqcn(self.dcqcn, now)
                rp.cnp(now)
                if len(self.trace) < self.trace_limit:
                    self.trace.append((now, key[0], round(rp.rate_bps), round(rp.alpha, 4)))
            return
        r = self.req[key]
        if c.is_nak:
            if len(self.events) < self.trace_limit:
                self.events.append((now, key[0], "nak"))
            r.nak(c.psn, now)
            self.any_failed = self.any_failed or r.failed
            self._queue(key)
        elif c.is_ack:
            self.acks_received += 1
            r.ack(c.psn, now)
            times = self.sent_at.get(key)
            while times and psn_diff(times[0][0], c.psn) < 0:
                times.popleft()
            if times and times[0][0] == c.psn:
                self.rp[key].rtt(now - times.popleft()[1])

    def _queue(self, key):
        if self.req[key].resend and key not in self.retx:
            self.retx.append(key)

    # -- responder side ------------------------------------------------------------
    def prepare(self, peer_ip, peer_mac, ip_text, dqpn):
        """Build the responder and its ACK/CNP frames of one incoming QP now (scapy
        takes ms per frame: not while the first packets wait for an answer)."""
        st = self.resp.get((peer_ip, dqpn))
        if st is None:
            st = self.resp[(peer_ip, dqpn)] = [
                Responder(self.p, ooo=self.ooo),
                ControlTemplate(ACKNOWLEDGE, self.my_mac, peer_mac, self.my_ip, ip_text,
                                dqpn, self.dscp), 0,
                ControlTemplate(CNP, self.my_mac, peer_mac, self.my_ip, ip_text, dqpn,
                                self.dscp)]
        return st

    def arrived(self, peer_ip, peer_mac, ip_text, dqpn, psn, ackreq, now, ce=False):
        """True if the data packet is accepted (the next in order of its QP)."""
        st = self.resp.get((peer_ip, dqpn)) or self.prepare(peer_ip, peer_mac, ip_text, dqpn)
        if ce:
            self.ce_received += 1
            if self.pacer is not None and self.pacer((peer_ip, dqpn), now):
                self.cnps_sent += 1
                self.send_frame(st[3].frame())
        verdict, reply = st[0].data(psn, now, ackreq)
        if verdict == Responder.ACCEPT and ackreq:
            st[2] += 1                    # one more message completed (MSN)
        if reply:
            self._reply(st, reply)
        if st[0].first_unacked is not None:
            self.acking[(peer_ip, dqpn)] = st
        return verdict == Responder.ACCEPT

    def _reply(self, st, reply):
        kind, psn = reply
        if kind == "nak":
            self.naks_sent += 1
        else:
            self.acks_sent += 1
        self.send_frame(st[1].frame(psn, SYN_NAK_SEQ if kind == "nak" else SYN_ACK, st[2]))

    # -- timers -----------------------------------------------------------------------
    def poll(self, now):
        """Run the timers due at ``now``; returns the next deadline (``next_deadline``)."""
        for rp in self.rp.values():
            rp.advance(now)
        due = None
        for key in list(self.armed):
            r = self.req[key]
            if r.deadline is None:
                self.armed.discard(key)       # idle or failed: armed again by ``sent``
                continue
            if now >= r.deadline and r.poll(now):
                if len(self.events) < self.trace_limit:
                    self.events.append((now, key[0], "timeout"))
                self.any_failed = self.any_failed or r.failed
                self._queue(key)
            if r.deadline is not None and (due is None or r.deadline < due):
                due = r.deadline
        for rkey, st in list(self.acking.items()):
            if st[0].first_unacked is None:
                del self.acking[rkey]
                continue
            reply = st[0].poll(now)
            if reply:
                self._reply(st, reply)
                del self.acking[rkey]
            else:
                t = st[0].deadline()
                if due is None or t < due:
                    due = t
        return due

    def next_deadline(self):
        due = [self.req[k].deadline for k in self.armed if self.req[k].deadline is not None]
        due += [st[0].deadline() for st in self.acking.values()
                if st[0].first_unacked is not None]
        return min(due, default=None)

    def acked_through(self, key, psn):
        """Whether QP ``key`` has nothing outstanding up to ``psn`` (it was sent and
        acknowledged, or the QP failed: its packets will never be)."""
        r = self.req[key]
        if r.failed:
            return True
        for q in (r.window, r.resend):
            if q and psn_diff(q[0][0], psn) <= 0:
                return False
        return True

    def busy(self):
        """Some QP still has packets outstanding (and has not failed)."""
        return any(r.busy and not r.failed for r in self.req.values())

    def failed(self):
        return sorted(k for k, r in self.req.items() if r.failed)

    def per_qp(self):
        """Every QP's own counts: as requester {src_ip, qpn, peer, qp, sent_packets (first
        transmissions), outstanding, failed}; as responder {src_ip, qpn (the
        requester's), delivered_packets}.  A drill matches the two sides."""

        def text(ip):
            return socket.inet_ntoa(ip) if isinstance(ip, bytes) else ip
        qpn_of = {k: n for n, k in self.by_qpn.items()}
        req = [{"src_ip": text(self.my_ip), "qpn": qpn_of[k], "peer": k[0], "qp": k[1],
                "sent_packets": r.first_sent,
                "outstanding": r.outstanding, "failed": r.failed}
               for k, r in self.req.items()]
        resp = [{"src_ip": text(ip),
                 "qpn": dqpn, "delivered_packets": st[0].accepted}
                for (ip, dqpn), st in self.resp.items()]
        return {"requesters": req, "responders": resp}

    def counters(self):
        req, resp = self.req.values(), [st[0] for st in self.resp.values()]
        return {"retransmitted_packets": sum(r.retransmitted for r in req),
                "naks_received": sum(r.naks for r in req),
                "timeouts": sum(r.timeouts for r in req),
                "acks_sent": self.acks_sent, "naks_sent": self.naks_sent,
                "duplicates_received": sum(r.duplicates for r in resp),
                "out_of_sequence_received": sum(r.out_of_sequence for r in resp),
                "acks_received": self.acks_received,
                "control_corrupted": self.control_corrupted,
                "control_unknown_qp": self.control_unknown,
                "ce_received": self.ce_received, "cnps_sent": self.cnps_sent,
                "cnps_received": self.cnps_received}
