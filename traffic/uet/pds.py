"""Reliable delivery of one PDC: RUD and ROD, sender and receiver (pure: the caller passes the time).

Model (UE Specification 1.0.1 §3.5, as this lab reads it; docs/uet.md).

``Sender`` is the initiator's side of one packet delivery context (PDC).  Every
packet carries its own PSN (32-bit, from the PDC's start PSN on) and stays
outstanding until acknowledged.

- An ACK (ACK_CC) carries the cumulative PSN (everything through it arrived),
  the PSN that made it go (``ack_psn``: its round trip is a delay sample, when it
  went once: Karn) and a 64-bit SACK bitmap of the PSNs past the cumulative one:
  each packet it names is done, whatever its order (RUD).
- A NACK names one PSN: it goes again at once, before anything new.  Its code
  says why: ``TRIMMED`` (a switch cut it: the network's signal of congestion),
  ``ROD_OOO`` (ROD: the receiver wants that PSN and drops what comes after it,
  so everything from it on goes again, in order: go-back-N).
- A timer per packet: a packet not acknowledged ``rto`` after it left is lost and
  goes again (a retransmission by timeout).  ``rto`` follows the round trips
  (``srtt + 4 rttvar``, RFC 6298's, Karn's samples only) between ``rto_min_ns``
  and ``rto_ns``, doubled per retry of the most-retried packet since the last
  progress, up to ``2**backoff_cap``;
  a packet that timed out ``retry_cnt`` + 1 times with no progress since its
  first fails the PDC (the job's error, as RC's "retry counter exceeded").  The
  count is the packet's own: a window of packets lost together on a dead path
  expires one after another, and those are one loss each, not retries of one
  packet (RC counts its one timer's expiries: one PSN at a time is outstanding
  for it, go-back-N).
- Retransmissions are counted by cause: ``retx_nack``, ``retx_trim``,
  ``retx_timeout``.

``Receiver`` is the target's side.  RUD places every packet where it belongs at
once (``PLACED``; out of order when it is not the next one), counts a PSN it
already has as a ``DUPLICATE``, and acknowledges:

- coalesced: once ``ack_bytes`` arrived unacknowledged, or ``ack_delay_ns`` after
  the first of them;
- at once for a packet that asks (AR: the last of a message on its PDC), that is
  ECN-marked (its ACK echoes the mark), a duplicate, or the PDC's first; an AR
  that came ahead of a gap asks again once the gap is filled (htsim's rule).

A trimmed packet (its DSCP says a switch cut it) is NACKed at once with code
``TRIMMED`` (an ACK if it arrived whole meanwhile).  ROD accepts only the next
PSN in order: a later one is dropped and NACKed (``ROD_OOO``, the PSN it wants)
once per gap; a duplicate is ACKed.

PSNs compare in serial arithmetic (``frames.psn_diff``).  Packets are opaque.
"""

from collections import deque
from dataclasses import dataclass

from traffic.uet.layout import NACK_ROD_OOO, NACK_TRIMMED, PSN_MASK, psn_diff

SACK_BITS = 64
ACK_BYTES = 16384       # a receiver's ACK coalescing: htsim's, four 4 KB packets


@dataclass(frozen=True)
class PdsParams:
    """Timers and limits of a PDC (times in ns of the emulated network)."""

    rto_ns: int = 134_217_728       # the retransmission timer's upper bound
    rto_min_ns: int = 20_000_000    # ... and lower bound
    backoff_cap: int = 3            # doubling per retry of the worst packet, up to 2**cap
    retry_cnt: int = 7              # a packet's timeouts without progress before failing
    ack_bytes: int = ACK_BYTES      # coalescing: ACK once this many bytes arrived ...
    ack_delay_ns: int = 4_000_000   # ... or this long after the first unacknowledged one
    window: int = 4096              # PSNs a receiver tracks past its cumulative PSN
    rod: bool = False               # reliable ordered delivery (one EV, go-back-N)

    def __post_init__(self):
        if not 0 < self.rto_min_ns <= self.rto_ns or self.retry_cnt < 0 or \
                self.backoff_cap < 0 or self.ack_bytes < 1 or self.ack_delay_ns < 0 or \
                self.window < SACK_BITS:
            raise ValueError("0 < rto_min_ns <= rto_ns, retry_cnt >= 0, backoff_cap >= 0, "
                             "ack_bytes >= 1, ack_delay_ns >= 0, window >= 64 required")

    def give_up_ns(self):
        """From a last sign of life to failing, if nothing answers."""
        return sum(self.rto_ns << min(k, self.backoff_cap) for k in range(self.retry_cnt + 1))


class _Out:
    __slots__ = ("packet", "size", "sent_ns", "sends", "ev", "waiting", "expiries", "epoch")

    def __init__(self, packet, size, now, ev):
        self.packet, self.size, self.sent_ns, self.sends, self.ev = packet, size, now, 1, ev
        self.waiting = False        # queued to go again
        self.expiries = 0           # its timeouts since the PDC last made progress ...
        self.epoch = 0              # ... counted in this progress epoch (Sender.epoch)


class AckResult:
    """What one ACK did: bytes newly acknowledged, a delay sample (ns, or None),
    and the (EV, feedback kind) of every packet it acknowledged."""

    __slots__ = ("acked_bytes", "rtt_ns", "evs", "progress")

    def __init__(self):
        self.acked_bytes, self.rtt_ns, self.evs, self.progress = 0, None, [], False


class Sender:
    """The initiator's side of one PDC (see the module docstring)."""

    def __init__(self, params, start_psn):
        self.p = params
        self.start = start_psn & PSN_MASK
        self.next_psn = self.start
        self.sent_next = self.start     # past the highest PSN sent (new PSNs leave in order)
        self.low = self.start           # the lowest PSN that may still be outstanding
        self.out = {}                   # psn -> _Out
        self.order = deque()            # (sent_ns, psn) in send order (the timers)
        self.resend = deque()           # psns to send again, first first
        self.inflight = 0               # bytes sent and neither acknowledged nor lost
        self.srtt = self.rttvar = None
        self.timeouts_in_row = 0
        self.epoch = 0                  # progress so far: ACKs that acknowledged bytes
        self.failed = False
        self.retx_nack = self.retx_trim = self.retx_timeout = 0
        self.timeouts = self.nacks = self.acks = self.sent_first = 0
        self.last_progress_ns = None

    # -- sending ----------------------------------------------------------------------
    def assign(self):
        """The PSN of the next new packet."""
        psn = self.next_psn
        self.next_psn = (psn + 1) & PSN_MASK
        return psn

    def sent(self, psn, packet, size, now, ev, again=False):
        o = self.out.get(psn)
        if o is None:
            if again:                   # acknowledged while it waited: nothing to do
                return
            self.out[psn] = _Out(packet, size, now, ev)
            self.sent_first += 1
            if psn_diff(psn, self.sent_next) >= 0:
                self.sent_next = (psn + 1) & PSN_MASK
        else:
            o.sent_ns, o.ev, o.waiting = now, ev, False
            o.sends += 1
        self.inflight += size
        self.order.append((now, psn))

    def next_resend(self):
        """(psn, packet) to send again next, or None."""
        while self.resend:
            psn = self.resend.popleft()
            o = self.out.get(psn)
            if o is not None and o.waiting:
                return psn, o.packet
        return None

    @property
    def busy(self):
        return bool(self.out)

    def acked_through(self, psn):
        """Everything through ``psn`` was acknowledged (or the PDC failed)."""
        if self.failed:
            return True
        self._advance_low()
        return not self.out or psn_diff(psn, self.low) < 0

    # -- what comes back -------------------------------------------------------------
    def ack(self, cack, ack_psn, sacked, now, ecn=False):
        """An ACK_CC: cumulative through ``cack``, made to go by ``ack_psn``, and the
        PSNs of its SACK bitmap (``sacked``)."""
        r = AckResult()
        self.acks += 1
        o = self.out.get(ack_psn)
        if o is not None and o.sends == 1 and not o.waiting:
            r.rtt_ns = now - o.sent_ns
            self._sample(r.rtt_ns)
        self._advance_low()
        while self.out and psn_diff(self.low, cack) <= 0:
            self._done(self.low, r, ecn and self.low == ack_psn)
            self.low = (self.low + 1) & PSN_MASK
        for psn in sacked:
            self._done(psn, r, ecn and psn == ack_psn)
        self._done(ack_psn, r, ecn)
        if r.acked_bytes:
            r.progress = True
            self.timeouts_in_row = 0
            self.last_progress_ns = now
            self.epoch += 1             # every packet's count of timeouts starts again
        return r

    def _done(self, psn, r, ecn):
        o = self.out.pop(psn, None)
        if o is None:
            return
        if not o.waiting:
            self.inflight -= o.size
        r.acked_bytes += o.size
        r.evs.append((o.ev, "ecn" if ecn else "good"))

    def nack(self, psn, code, now):
        """A NACK of ``psn``; returns [(EV, kind)] of the packets it sends again."""
        self.nacks += 1
        if code == NACK_ROD_OOO:
            return self._go_back(psn)
        o = self.out.get(psn)
        if o is None or o.waiting:
            return []
        if code == NACK_TRIMMED:
            self.retx_trim += 1
            kind = "trim"
        else:
            self.retx_nack += 1
            kind = "nack"
        self._queue(psn, o)
        return [(o.ev, kind)]

    def _go_back(self, psn):
        """ROD: everything outstanding from ``psn`` on goes again, in PSN order."""
        out = []
        for p in sorted((p for p in self.out if psn_diff(p, psn) >= 0),
                        key=lambda p: psn_diff(p, psn)):
            o = self.out[p]
            if not o.waiting:
                self.retx_nack += 1
                self._queue(p, o)
                out.append((o.ev, "nack"))
        return out

    def _queue(self, psn, o):
        o.waiting = True
        self.inflight -= o.size
        self.resend.append(psn)

    # -- timers ------------------------------------------------------------------------
    def rto(self):
        p = self.p
        base = p.rto_ns if self.srtt is None else self.srtt + 4 * self.rttvar
        base = int(min(max(base, p.rto_min_ns), p.rto_ns))
        return base << min(self.timeouts_in_row, p.backoff_cap)

    def deadline(self):
        """When the oldest packet in flight times out (ns), or None."""
        order, out = self.order, self.out
        while order:
            t, psn = order[0]
            o = out.get(psn)
            if o is None or o.waiting or o.sent_ns != t:
                order.popleft()          # acknowledged, queued again, or sent again since
                continue
            return t + self.rto()
        return None

    def poll(self, now):
        """Fire the timers due: [(EV, "lost")] of the packets that go again."""
        if self.failed:
            return []
        lost = []
        due = self.deadline()
        if due is None or now < due:
            return lost
        rto = self.rto()
        worst = 0
        while self.order:
            t, psn = self.order[0]
            o = self.out.get(psn)
            if o is None or o.waiting or o.sent_ns != t:
                self.order.popleft()
                continue
            if now < t + rto:
                break
            self.order.popleft()
            self.timeouts += 1
            self.retx_timeout += 1
            if o.epoch != self.epoch:
                o.epoch, o.expiries = self.epoch, 0
            o.expiries += 1
            worst = max(worst, o.expiries)
            self._queue(psn, o)
            lost.append((o.ev, "lost"))
        if lost:
            # the backoff follows the most-retried packet since the last progress: a
            # window lost together backs off once, not once per packet's expiry
            self.timeouts_in_row = max(self.timeouts_in_row, worst)
            if worst > self.p.retry_cnt:
                self.failed = True
                self.resend.clear()
        return lost

    def _sample(self, rtt):
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt

    def _advance_low(self):
        while self.low != self.sent_next and self.low not in self.out:
            self.low = (self.low + 1) & PSN_MASK

    def counters(self):
        return {"retransmitted_packets": self.retx_nack + self.retx_trim + self.retx_timeout,
                "retransmitted_by_nack": self.retx_nack, "retransmitted_by_trim": self.retx_trim,
                "retransmitted_by_timeout": self.retx_timeout, "timeouts": self.timeouts,
                "naks_received": self.nacks, "acks_received": self.acks,
                "sent_packets": self.sent_first}


# ---- the target's side ------------------------------------------------------------

PLACED, DUPLICATE, DROPPED = "placed", "duplicate", "dropped"


class Receiver:
    """The target's side of one PDC, from its start PSN (see the module docstring).

    ``data`` and ``trimmed`` return (verdict, reply); a reply is None, ("ack",
    ack_psn, ecn, retx) or ("nack", psn, code).  ``ack_fields(ack_psn)`` gives
    what the ACK carries: (cumulative PSN, SACK base, bitmap, out-of-order count).
    """

    def __init__(self, params, start_psn):
        self.p = params
        self.expected = start_psn & PSN_MASK    # the next PSN in order
        self.above = set()                      # PSNs received past ``expected``
        self.unacked_bytes = 0
        self.first_unacked = None
        self.rcvd_bytes = 0
        self.nack_for = None                    # ROD: the PSN a NACK asked for
        self.placed = self.placed_ooo = self.duplicates = self.dropped = 0
        self.trimmed_received = self.acks = self.nacks = 0
        self.high = start_psn & PSN_MASK        # the highest PSN received + 1
        self.last_psn = start_psn & PSN_MASK    # the last packet placed (a delayed ACK's)
        self.ack_request = False                # an AR came out of order: ACK once in order

    def data(self, psn, size, now, ar=False, ecn=False, retx=False):
        d = psn_diff(psn, self.expected)
        if d < 0 or psn in self.above:
            self.duplicates += 1
            return DUPLICATE, self._ack(psn, ecn, retx)
        if d >= self.p.window:
            self.dropped += 1                   # beyond what is tracked: never ours
            return DROPPED, None
        if self.p.rod and d > 0:
            self.dropped += 1
            if self.nack_for != self.expected:
                self.nack_for = self.expected
                self.nacks += 1
                return DROPPED, ("nack", self.expected, NACK_ROD_OOO)
            return DROPPED, None
        if d == 0:
            self.expected = (self.expected + 1) & PSN_MASK
            while self.expected in self.above:
                self.above.discard(self.expected)
                self.expected = (self.expected + 1) & PSN_MASK
            if self.ack_request and not self.above:
                self.ack_request = False        # the gap an early AR left is filled
                ar = True
        else:
            self.above.add(psn)
            self.placed_ooo += 1
            if ar:
                self.ack_request = True
        if psn_diff(psn, self.high) >= 0:
            self.high = (psn + 1) & PSN_MASK
        self.placed += 1
        first = self.rcvd_bytes == 0
        self.rcvd_bytes += size
        self.unacked_bytes += size
        if ar or ecn or first or retx or self.unacked_bytes >= self.p.ack_bytes:
            return PLACED, self._ack(psn, ecn, retx)
        if self.first_unacked is None:
            self.first_unacked = now
        self.last_psn = psn
        return PLACED, None

    def trimmed(self, psn, now):
        """A trimmed packet of ``psn`` arrived: NACK it at once (ACK if it is here)."""
        self.trimmed_received += 1
        if psn_diff(psn, self.expected) < 0 or psn in self.above:
            return DUPLICATE, self._ack(psn, False, False)
        self.nacks += 1
        return DROPPED, ("nack", psn, NACK_TRIMMED)

    def deadline(self):
        """When a coalesced ACK is due (ns), or None."""
        return None if self.first_unacked is None else self.first_unacked + self.p.ack_delay_ns

    def poll(self, now):
        """The coalesced ACK if its delay passed, else None."""
        due = self.deadline()
        if due is not None and now >= due:
            return self._ack(self.last_psn, False, False)
        return None

    def _ack(self, psn, ecn, retx):
        self.acks += 1
        self.unacked_bytes = 0
        self.first_unacked = None
        return ("ack", psn, ecn, retx)

    def ack_fields(self, ack_psn):
        """(cumulative PSN, SACK base, bitmap, out-of-order count) of an ACK made to go
        by ``ack_psn``: the bitmap covers the 64 PSNs from the first past the
        cumulative one, or up to ``ack_psn`` if that lies further."""
        cack = (self.expected - 1) & PSN_MASK
        base = (self.expected + 1) & PSN_MASK
        if psn_diff(ack_psn, base) >= SACK_BITS:
            base = (ack_psn - SACK_BITS + 1) & PSN_MASK
        bitmap = 0
        for psn in self.above:
            off = psn_diff(psn, base)
            if 0 <= off < SACK_BITS:
                bitmap |= 1 << off
        return cack, base, bitmap, len(self.above)

    def counters(self):
        return {"placed_packets": self.placed, "placed_out_of_order": self.placed_ooo,
                "duplicates_received": self.duplicates, "dropped_out_of_order": self.dropped,
                "trimmed_received": self.trimmed_received, "acks_sent": self.acks,
                "naks_sent": self.nacks}
