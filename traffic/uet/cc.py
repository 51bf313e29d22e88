"""UET congestion management of one PDC: NSCC (a window) and RCCC (credits), pure.

The caller passes the time.  Two models, both UE Specification 1.0.1 §3.6.

## NSCC

NSCC, the UET sender's congestion window of one PDC (pure: the caller passes the time).

Model (UE Specification 1.0.1 §3.6, network-signal congestion control, as the
UEC's reference simulator htsim implements it: ``UecSrc::updateCwndOnAck_NSCC``).
Every ACK brings two signals: the delay its packet met (its round trip minus the
base RTT, the smallest seen) and whether it was ECN-marked.  Four quadrants:

===================  =============================  ==================================
                     not marked                     marked
===================  =============================  ==================================
delay < target       proportional increase          nothing (one path is hot: the EV
                     (by how far below target)      policy moves away from it)
delay >= target      fair increase (gentle)         multiplicative decrease, by how
                                                    far the average delay is above
                                                    the target, at most once per RTT
===================  =============================  ==================================

Increases accumulate and are applied together ("fulfil") every ``8 MTU`` of
bytes acknowledged or every network RTT, divided by the window (so flows with a
larger window grow no faster: fairness), plus ``eta`` once per RTT.  A fast
increase when delay is near zero for a whole window.  Quick adapt: when
congestion is severe (a NACK, or delay above 4 targets) the window drops to
what was actually delivered in the last base RTT + target, once per that time.
A NACK (a trimmed packet) takes its bytes off the window; a timeout too.  The
window stays between one MTU and 1.5 BDP plus what the receiver may hold
unacknowledged (``maxwnd``; ``held_bytes``, its ACK coalescing: htsim's 16 KB is a
tenth of its 150 KB BDP and fits in the half BDP above the pipe, the lab's 26.8 KB
BDP leaves 13.4 KB there, less than one coalesced ACK's worth, so the bound adds it).

Scaling to the emulated rates.  htsim sets the constants from a reference
network of 100 Gbit/s and 12 us (``initNsccParams``): ``a`` = BDP / reference BDP,
``b`` = target delay / reference RTT; alpha = 4 MTU a b / target, fair increase
5 MTU a, eta 0.15 MTU a.  The lab keeps ``a`` as the ratio of BDPs (a BDP is the
same in bytes whatever the time scale: 40 Mbit/s over 10 ms holds what 40 Gbit/s
holds over 10 us) and takes the reference RTT to be the emulated network's own
(``network_rtt_ns``: frame times of its hops), so ``b`` is the target over that
RTT, 1 (0.75 with trimming, htsim's choice) as at the reference; the 1 us of
the fast increase is a twelfth of that RTT.  So the window moves by the same
share of a BDP per round trip as htsim's at 100 Gbit/s.

## RCCC

RCCC, receiver-credit congestion control: the target grants its link's rate (pure).

Model (UE Specification 1.0.1 §3.6, receiver-credit congestion control, as this
lab reads it).  An incast's senders cannot know how many others aim at the same
receiver; the receiver can.  So:

- a sender starts with ``initial`` bytes of credit (one BDP: the first round trip
  goes unsolicited) and afterwards sends only what it was granted; every request
  it sends carries its *credit target* (RUD_CC_REQ): the bytes it still has to
  send beyond its credit;
- the receiver's ``Scheduler`` hands out credit at its link's rate (a token
  bucket, ``share`` of the line), a ``quantum`` at a time, round-robin over the
  senders whose target is not yet covered; a grant rides the next ACK to that
  sender (ACK_CC with the credit CC state), or a CONTROL CREDIT packet once a
  sender is owed ``quantum`` bytes.

So the receiver's link is never offered much more than its rate, whatever the
number of senders, and each gets an equal share.
"""

from collections import OrderedDict
from dataclasses import dataclass

REF_BDP = 100e9 / 8 * 12e-6          # bytes: htsim's reference network, 100 Gbit/s x 12 us
BASE_SAMPLES = 8                     # round trips the measured base RTT is the shortest of
BASE_RISE = 2.0                      # ... at most this many network RTTs


@dataclass(frozen=True)
class NsccParams:
    line_bps: float
    mtu: int = 4096                   # bytes of payload per packet (htsim's MSS)
    network_rtt_ns: int = 4_000_000   # the emulated network's RTT: the reference RTT
    target_qdelay_ns: int = None      # default: the network RTT (0.75 of it with trimming)
    trimming: bool = False
    qa_gate: int = 3                  # quick adapt only below maxwnd / 2**qa_gate delivered
    gamma: float = 0.8
    delay_alpha: float = 0.0125       # the average delay's EWMA gain
    maxwnd_bdps: float = 1.5
    held_bytes: int = 0               # the receiver's ACK coalescing: added to the bound

    def __post_init__(self):
        if self.line_bps <= 0 or self.mtu <= 0 or self.network_rtt_ns <= 0 \
                or self.held_bytes < 0:
            raise ValueError("line_bps, mtu and network_rtt_ns > 0, held_bytes >= 0 required")
        if self.target_qdelay_ns is None:
            object.__setattr__(self, "target_qdelay_ns", int(
                self.network_rtt_ns * (0.75 if self.trimming else 1.0)))

    @property
    def bdp(self):
        return self.line_bps / 8 * self.network_rtt_ns / 1e9

    def maxwnd(self, rtt_ns):
        """The window's bound for a base RTT of ``rtt_ns``: ``maxwnd_bdps`` BDPs of it
        and what the receiver may hold unacknowledged."""
        return self.maxwnd_bdps * self.line_bps / 8 * rtt_ns / 1e9 + self.held_bytes

    @property
    def a(self):
        return self.bdp / REF_BDP

    @property
    def b(self):
        return self.target_qdelay_ns / self.network_rtt_ns


class Nscc:
    """The window of one PDC; ``cwnd`` bytes may be in flight."""

    def __init__(self, params, now=0):
        p = self.p = params
        self.mtu = p.mtu
        self.alpha = 4.0 * p.mtu * p.a * p.b / p.target_qdelay_ns     # bytes per ns, per byte
        self.fi = 5 * p.mtu * p.a
        self.eta = 0.15 * p.mtu * p.a
        self.fi_scale = 0.25 * p.a
        self.qa_threshold = 4 * p.target_qdelay_ns
        self.adjust_bytes = 8 * p.mtu
        self.fast_delay = p.network_rtt_ns / 12
        self.base_rtt = p.network_rtt_ns
        self.maxwnd = p.maxwnd(p.network_rtt_ns)
        self.first_rtts = []            # the first BASE_SAMPLES round trips (``_measure_base``)
        self.min_cwnd = p.mtu
        self.cwnd = self.maxwnd
        self.avg_delay = 0.0
        self.inc_bytes = 0.0
        self.received = self.achieved = 0
        self.bytes_to_ignore = self.bytes_ignored = 0
        self.qa_end = 0
        self.trigger_qa = False
        self.fi_count = 0
        self.increasing = False
        self.last_dec = self.last_adjust = now
        self.stats = {"proportional": 0, "fair": 0, "noop": 0, "decrease": 0, "quick_adapt": 0,
                      "nack": 0, "timeout": 0, "fast": 0}
        self.trace = [(now, round(self.cwnd))]

    def can_send(self, inflight, size):
        return inflight + size <= self.cwnd or inflight == 0

    # -- signals --------------------------------------------------------------------
    def on_ack(self, now, acked_bytes, rtt_ns=None, ecn=False):
        """An ACK of ``acked_bytes``; ``rtt_ns`` its packet's round trip (Karn), if any."""
        self.achieved += acked_bytes
        self.received += acked_bytes
        self.bytes_ignored += acked_bytes
        if rtt_ns is not None:
            if len(self.first_rtts) < BASE_SAMPLES:
                self._measure_base(rtt_ns)
            if rtt_ns < self.base_rtt:
                self._new_base(rtt_ns)
            self._update_delay(rtt_ns, ecn)
            delay = rtt_ns - self.base_rtt
        else:
            delay = self.avg_delay
        self._update(now, ecn, delay, acked_bytes)
        self._trace(now)

    def on_nack(self, now, nacked_bytes):
        """A packet was trimmed (its NACK): congestion for certain."""
        self.stats["nack"] += 1
        self.bytes_ignored += nacked_bytes
        self._update_delay(self.base_rtt + self.p.network_rtt_ns, True)
        self.trigger_qa = True
        if not self._quick_adapt(now, True, True, 0):
            self.cwnd -= nacked_bytes
            self._bounds()
        self._trace(now)

    def on_timeout(self, now, lost_bytes):
        """A packet's timer fired."""
        self.stats["timeout"] += 1
        self.cwnd = max(self.cwnd - lost_bytes, self.min_cwnd)
        self._trace(now)

    # -- inside ----------------------------------------------------------------------
    def _update(self, now, ecn, delay, acked):
        if self._quick_adapt(now, False, ecn, delay):
            return
        target = self.p.target_qdelay_ns
        if not ecn and delay >= target:
            self.stats["fair"] += 1
            self.inc_bytes += self.fi * acked
        elif not ecn:
            self.stats["proportional"] += 1
            self._proportional(acked, delay)
        elif delay >= target:
            self.stats["decrease"] += 1
            self._decrease(now)
        else:
            self.stats["noop"] += 1
        self._bounds()
        if self.received > self.adjust_bytes or now - self.last_adjust > self.p.network_rtt_ns:
            self._fulfil(now)
        self._bounds()

    def _proportional(self, acked, delay):
        if delay < self.fast_delay:
            self.fi_count += acked
            if self.fi_count > self.cwnd or self.increasing:
                self.cwnd += acked * self.fi_scale
                self.increasing = True
                self.stats["fast"] += 1
                return
        else:
            self.fi_count = 0
        self.increasing = False
        self.inc_bytes += self.alpha * acked * (self.p.target_qdelay_ns - delay)

    def _decrease(self, now):
        self.increasing = False
        self.fi_count = 0
        avg = self.avg_delay
        if avg > self.p.target_qdelay_ns and now - self.last_dec > self.base_rtt:
            self.cwnd *= max(1 - self.p.gamma * (avg - self.p.target_qdelay_ns) / avg, 0.5)
            self.cwnd = max(self.cwnd, self.min_cwnd)
            self.last_dec = now

    def _fulfil(self, now):
        self.cwnd += self.inc_bytes / self.cwnd
        if now - self.last_adjust >= self.p.network_rtt_ns:
            self.cwnd += self.eta
            self.last_adjust = now
        self.inc_bytes = 0.0
        self.received = 0

    def _quick_adapt(self, now, loss, skip, delay):
        done = False
        if self.bytes_ignored < self.bytes_to_ignore and skip:
            done = True
        elif now > self.qa_end:
            if self.qa_end != 0 and (self.trigger_qa or loss or delay > self.qa_threshold) \
                    and self.achieved < self.maxwnd / (1 << self.p.qa_gate):
                self.cwnd = max(self.achieved, self.min_cwnd)
                self.stats["quick_adapt"] += 1
                self.bytes_to_ignore = self.cwnd
                self.bytes_ignored = 0
                self.trigger_qa = False
                done = True
            self.achieved = 0
            self.qa_end = now + self.base_rtt + self.p.target_qdelay_ns
        if done:
            self.inc_bytes = 0.0
            self.received = 0
        return done

    def _update_delay(self, rtt, skip):
        delay = rtt - self.base_rtt
        a = self.p.delay_alpha
        if not skip and delay > self.p.target_qdelay_ns:
            self.avg_delay = a * self.base_rtt * 0.25 + (1 - a) * self.avg_delay
        else:
            self.avg_delay = a * delay + (1 - a) * self.avg_delay

    def _measure_base(self, rtt):
        """The base RTT as measured: the shortest of the first ``BASE_SAMPLES`` round
        trips, if longer than the network RTT, up to ``BASE_RISE`` of it.  The
        network RTT counts the links' frame times and the engines' passes, not the
        userspace switches' own latency per hop (0.2-0.4 ms a packet-hop at low
        rates, docs/platform.md); a real NIC's NSCC is given its fabric's measured
        base RTT.  On the default fabric the first round trips came within about
        1.1 network RTTs, so the bound moves little there
        (docs/results/2026-11-29-uet-timers.md)."""
        self.first_rtts.append(rtt)
        if len(self.first_rtts) < BASE_SAMPLES:
            return
        base = min(min(self.first_rtts), BASE_RISE * self.p.network_rtt_ns)
        if base > self.base_rtt:
            self.base_rtt = base
            self.maxwnd = self.p.maxwnd(base)

    def _new_base(self, rtt):
        """A round trip shorter than the base RTT: the base RTT, and the window's
        bound, follow it -- never below the network RTT's frame times (a shaper
        with tokens in its bucket passes a frame at once, so the emulated network's
        unloaded RTT leaves out the serialisation a real link has)."""
        rtt = max(rtt, self.p.network_rtt_ns)
        if rtt >= self.base_rtt:
            return
        self.base_rtt = rtt
        self.maxwnd = max(self.p.maxwnd(rtt), 2 * self.min_cwnd)

    def _bounds(self):
        self.cwnd = min(max(self.cwnd, self.min_cwnd), self.maxwnd)

    def _trace(self, now):
        c = round(self.cwnd)
        if c != self.trace[-1][1] and len(self.trace) < 20000:
            self.trace.append((now, c))

class Scheduler:
    """The receiving NIC's credit pacer over its senders (keys are opaque)."""

    def __init__(self, line_bps, mtu, now=0, share=0.98, quantum_mtus=2):
        self.rate = line_bps / 8 * share / 1e9          # bytes per ns
        self.quantum = quantum_mtus * mtu
        self.depth = 2 * self.quantum
        self.tokens, self.last = self.depth, now
        self.wanting = OrderedDict()                     # key -> bytes not yet granted
        self.owed = {}                                   # key -> granted, not yet sent
        self.granted = 0

    def demand(self, key, target):
        """Sender ``key`` says it still wants ``target`` bytes of credit."""
        if target > 0:
            self.wanting[key] = target
        else:
            self.wanting.pop(key, None)

    def poll(self, now):
        """Grant what the bucket holds, round-robin; returns the keys owed a quantum."""
        self.tokens = min(self.depth, self.tokens + (now - self.last) * self.rate)
        self.last = now
        ready = []
        while self.wanting and self.tokens >= self.quantum:
            key, want = next(iter(self.wanting.items()))
            g = min(self.quantum, want)
            self.tokens -= g
            self.granted += g
            self.owed[key] = self.owed.get(key, 0) + g
            if want - g > 0:
                self.wanting[key] = want - g
                self.wanting.move_to_end(key)
            else:
                del self.wanting[key]
            if self.owed[key] >= self.quantum and key not in ready:
                ready.append(key)
        return ready

    def take(self, key):
        """The credit owed to ``key``, now handed over (0 if none)."""
        return self.owed.pop(key, 0)

    def next_ns(self, now):
        """When the next quantum is in the bucket (ns), or None when nobody wants one."""
        if not self.wanting:
            return None
        need = self.quantum - self.tokens
        return now if need <= 0 else now + int(need / self.rate) + 1


class Credit:
    """A sender PDC's credit balance."""

    def __init__(self, initial):
        self.balance = initial
        self.received = 0

    def can_send(self, size):
        return self.balance >= size

    def sent(self, size):
        self.balance -= size

    def grant(self, amount):
        self.balance += amount
        self.received += amount
