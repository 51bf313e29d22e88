"""RoCE reliable-connection (RC) transport of one QP (pure: the caller passes the time).

Model (InfiniBand Architecture vol. 1, 9.7, as RoCEv2 NICs implement it).

``Requester`` is the sending side of one QP.  Every data packet it sends
stays in its *window* until the responder acknowledges it.

- An ACK carries the PSN of the last packet received in order: everything
  up to it is done (cumulative).
- A NAK (PSN sequence error) carries the PSN the responder expected: the
  packets before it are done, and the requester *goes back N*: it sends
  again every packet from that PSN on, in order, before anything new.
- A retransmission timer runs while packets are outstanding: the local ACK
  timeout ``4.096 us x 2**timeout_exp`` (NCCL_IB_TIMEOUT).  When it fires,
  the requester goes back to the oldest unacknowledged packet and restarts
  the timer, doubled per consecutive timeout up to ``2**backoff_cap`` times.
- Every timeout and every NAK without progress uses one retry; forward
  progress (an ACK or NAK that acknowledges something new) gives them all
  back.  A requester that would need retry ``retry_cnt + 1``
  (NCCL_IB_RETRY_CNT) has *failed*: "transport retry counter exceeded",
  the error that stops a training job.

``Responder`` is the receiving side of one QP.

- It accepts only the PSN it expects.
- It acknowledges in-order packets, coalesced: at a packet with the AckReq
  bit (the last packet of a message), after ``ack_every`` packets, or
  ``ack_delay_ns`` after the first unacknowledged one.
- At the first packet past a gap it sends one NAK, then drops
  out-of-sequence packets silently until the expected PSN arrives.  A
  lost NAK is recovered by the requester's timer.
- A duplicate (a PSN already accepted, resent by a go-back) is dropped and
  answered with one ACK of the current state, so a requester whose ACK was
  lost stops resending.
- ``ooo``: a responder that places packets out of order (the NICs that
  spray one QP over many paths, with direct data placement) accepts any
  PSN ahead of the expected one once and ACKs only the in-order prefix.
  Reordering is not loss there, so it NAKs a gap only once ``ooo_window``
  packets have been placed beyond it (a loss, not a late packet); without
  that, every frame lost with a dead link waited out the requester's timer
  (seconds with deep queues).

PSNs are 24-bit and compared in serial-number arithmetic (``psn_diff``).
Packets are opaque to this module: the requester hands back what it was
given, for the caller to send again.
"""

from collections import deque
from dataclasses import dataclass

PSN_MASK = 0xFFFFFF
_HALF = 1 << 23


def psn_diff(a, b):
    """``a - b`` for 24-bit PSNs (serial arithmetic: -2**23 .. 2**23 - 1)."""
    d = (a - b) & PSN_MASK
    return d - (1 << 24) if d >= _HALF else d


@dataclass(frozen=True)
class RcParams:
    """Timers and limits of the RC transport (NCCL's names in the comments)."""

    timeout_exp: int = 15          # NCCL_IB_TIMEOUT: local ACK timeout 4.096 us * 2**exp
    retry_cnt: int = 7             # NCCL_IB_RETRY_CNT: retries before the QP fails
    backoff_cap: int = 3           # the timer doubles per timeout, up to 2**cap times
    ack_every: int = 32            # responder: one ACK per this many in-order packets
    ack_delay_ns: int = 8_000_000  # ... or this long after the first unacknowledged one
    ooo_window: int = 64           # ooo responder: a gap this many packets old is a loss

    def __post_init__(self):
        if not 0 <= self.timeout_exp <= 31:
            raise ValueError("timeout_exp: 0..31 (4.096 us * 2**exp)")
        if not 0 <= self.retry_cnt <= 7:
            raise ValueError("retry_cnt: 0..7 (a 3-bit field in the QP context)")
        if self.backoff_cap < 0 or self.ack_every < 1 or self.ack_delay_ns < 0 or \
                self.ooo_window < 1:
            raise ValueError("backoff_cap >= 0, ack_every >= 1, ack_delay_ns >= 0 and "
                             "ooo_window >= 1 required")

    @staticmethod
    def exp_for(seconds):
        """The smallest timeout exponent whose timeout is at least ``seconds``."""
        exp = 0
        while 4096e-9 * (1 << exp) < seconds and exp < 31:
            exp += 1
        return exp

    @property
    def timeout_ns(self):
        return 4096 * (1 << self.timeout_exp)

    def rto_ns(self, consecutive):
        """The timer after ``consecutive`` timeouts in a row."""
        return self.timeout_ns << min(consecutive, self.backoff_cap)

    def give_up_ns(self):
        """From a last sign of life to the QP's failure if nothing answers again."""
        return sum(self.rto_ns(k) for k in range(self.retry_cnt + 1))


class Requester:
    """The sending side of one QP."""

    def __init__(self, params=RcParams()):
        self.p = params
        self.window = deque()       # (psn, packet) sent, not yet acknowledged
        self.resend = deque()       # (psn, packet) to send again, before anything new
        self.deadline = None        # retransmission timer (ns), None when idle
        self.retries = 0            # retries used since the last forward progress
        self.timeouts_in_row = 0
        self.failed = False
        self.retransmitted = self.naks = self.timeouts = 0
        self.first_sent = 0         # packets sent the first time (distinct PSNs)

    # -- what the caller does ----------------------------------------------------
    def sent(self, psn, packet, now, again=False):
        """``packet`` with ``psn`` left now (``again``: it came from ``next_resend``)."""
        w = self.window
        if w and psn_diff(psn, w[-1][0]) < 0:
            # older than the newest sent: a resend leaving after packets the NIC
            # had already handed to its interface before the go-back (its transmit
            # ring).  Kept in PSN order, else an ACK would stop at the newer head
            # and the next go-back would start past the older packets: they were
            # never sent again, and the QP never recovered
            i = len(w)
            while i > 0 and psn_diff(w[i - 1][0], psn) > 0:
                i -= 1
            w.insert(i, (psn, packet))
        else:
            w.append((psn, packet))
        if again:
            self.retransmitted += 1
        else:
            self.first_sent += 1
        if self.deadline is None:
            self.deadline = now + self.p.rto_ns(self.timeouts_in_row)

    def next_resend(self):
        """(psn, packet) to send again next, or None."""
        return self.resend.popleft() if self.resend else None

    @property
    def busy(self):
        """Something is outstanding or waits to be sent again."""
        return bool(self.window or self.resend)

    @property
    def outstanding(self):
        """Packets sent and not yet acknowledged (in the window or to go again)."""
        return len(self.window) + len(self.resend)

    # -- what the responder says ----------------------------------------------------
    def ack(self, psn, now):
        """Cumulative ACK through ``psn``; True if it acknowledged something new."""
        progress = self._done_through(psn)
        if progress:
            self.retries = self.timeouts_in_row = 0
            self.deadline = now + self.p.rto_ns(0) if self.busy else None
        return progress

    def nak(self, psn, now):
        """NAK (sequence error): everything before ``psn`` arrived; go back to it."""
        if self.failed:
            return
        self.naks += 1
        if self._done_through((psn - 1) & PSN_MASK):
            self.retries = self.timeouts_in_row = 0
        if not self._use_retry():
            return
        self._go_back(psn)
        self.deadline = now + self.p.rto_ns(0) if self.busy else None

    def poll(self, now):
        """Fire the timer if it is due; True if it fired."""
        if self.failed or self.deadline is None or now < self.deadline:
            return False
        if not self.busy:
            self.deadline = None
            return False
        self.timeouts += 1
        self.timeouts_in_row += 1
        if not self._use_retry():
            return True
        self._go_back(self._oldest())
        self.deadline = now + self.p.rto_ns(self.timeouts_in_row)
        return True

    # -- inside ----------------------------------------------------------------------
    def _use_retry(self):
        self.retries += 1
        if self.retries > self.p.retry_cnt:
            self.failed = True
            self.deadline = None
            self.resend.clear()
            return False
        return True

    def _done_through(self, psn):
        progress = False
        for q in (self.window, self.resend):
            while q and psn_diff(q[0][0], psn) <= 0:
                q.popleft()
                progress = True
        return progress

    def _oldest(self):
        """The oldest PSN outstanding: the older head of the window and of the
        packets to go again (each in PSN order)."""
        heads = [q[0][0] for q in (self.window, self.resend) if q]
        return min(heads, key=lambda p: psn_diff(p, heads[0]))

    def _go_back(self, psn):
        """Send again, in PSN order, every outstanding packet from ``psn`` on."""
        again = [x for x in self.window if psn_diff(x[0], psn) >= 0]
        again += [x for x in self.resend if psn_diff(x[0], psn) >= 0]
        again.sort(key=lambda x: psn_diff(x[0], psn))
        self.window.clear()
        self.resend = deque(again)


class Responder:
    """The receiving side of one QP; ``data`` says what to do with each packet."""

    ACCEPT, DUPLICATE, OUT_OF_SEQUENCE = "accept", "duplicate", "out_of_sequence"

    def __init__(self, params=RcParams(), first_psn=0, ooo=False):
        self.p = params
        self.ooo = ooo
        self.ahead = set()          # ooo: PSNs accepted beyond the expected one
        self.ahead_ackreq = set()   # ... of them, those that asked for an ACK
        self.expected = first_psn & PSN_MASK
        self.nak_sent = False
        self.dup_acked = False
        self.unacked = 0
        self.first_unacked = None
        self.acks = self.naks = self.duplicates = self.out_of_sequence = 0
        self.accepted = 0           # distinct PSNs delivered (placed) to the application

    def data(self, psn, now, ackreq=False):
        """(verdict, reply) for a data packet; reply is None, ("ack", psn) or ("nak", psn)."""
        d = psn_diff(psn, self.expected)
        if d == 0:
            self.accepted += 1
            self.expected = (self.expected + 1) & PSN_MASK
            while self.ahead and self.expected in self.ahead:
                self.ahead.discard(self.expected)
                if self.expected in self.ahead_ackreq:
                    # the AckReq came early, out of order: it is due now that the
                    # gap before it is filled (the sender may wait for nothing else)
                    self.ahead_ackreq.discard(self.expected)
                    ackreq = True
                self.expected = (self.expected + 1) & PSN_MASK
            self.nak_sent = self.dup_acked = False
            self.unacked += 1
            if self.first_unacked is None:
                self.first_unacked = now
            if ackreq or self.unacked >= self.p.ack_every:
                return self.ACCEPT, self._ack()
            return self.ACCEPT, None
        if d < 0:
            self.duplicates += 1
            if self.dup_acked:
                return self.DUPLICATE, None
            self.dup_acked = True
            return self.DUPLICATE, self._ack()
        self.out_of_sequence += 1
        if self.ooo:
            if psn in self.ahead:
                self.duplicates += 1
                return self.DUPLICATE, None
            self.ahead.add(psn)
            self.accepted += 1
            if ackreq:
                self.ahead_ackreq.add(psn)
            if not self.nak_sent and len(self.ahead) >= self.p.ooo_window:
                self.nak_sent = True            # the gap outlived any reordering
                self.naks += 1
                return self.ACCEPT, ("nak", self.expected)
            return self.ACCEPT, None
        if self.nak_sent:
            return self.OUT_OF_SEQUENCE, None
        self.nak_sent = True
        self.naks += 1
        return self.OUT_OF_SEQUENCE, ("nak", self.expected)

    def deadline(self):
        """When the coalesced ACK is due (ns), or None."""
        return None if self.first_unacked is None else self.first_unacked + self.p.ack_delay_ns

    def poll(self, now):
        """The coalesced ACK if its delay has passed, else None."""
        due = self.deadline()
        if due is not None and now >= due:
            return self._ack()
        return None

    def _ack(self):
        self.acks += 1
        self.unacked = 0
        self.first_unacked = None
        return ("ack", (self.expected - 1) & PSN_MASK)
