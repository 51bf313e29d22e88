"""TIMELY rate control of one QP (Mittal et al., SIGCOMM 2015), pure: delay, not marks.

The sender measures the round-trip time of its packets from their ACKs (a
retransmitted packet gives no sample: Karn's rule) and sets its rate from
the RTT and its gradient, with no help from the switches:

- RTT below ``t_low``: additive increase by delta;
- RTT above ``t_high``: multiplicative decrease, rate x (1 - beta (1 - t_high / RTT));
- in between, from the EWMA-smoothed RTT difference normalised by
  ``min_rtt`` (the gradient): gradient <= 0 adds delta (5 x delta after five
  such samples in a row: hyper-active increase); gradient > 0 cuts the rate
  by beta x gradient.

The paper's thresholds are tens of microseconds (Tlow 50 us, Thigh 500 us,
minRTT 20 us); the lab's RTT is milliseconds (OVS userspace, 40 Mbit/s
links, a full 4 KiB frame alone takes 0.8 ms per hop), so they are scaled:
``min_rtt`` 5 ms, ``t_low`` 4 ms, ``t_high`` 25 ms (about an 80 kB queue at
40 Mbit/s on top of the base RTT), delta line/40.
"""

from dataclasses import dataclass

MS = 1_000_000


@dataclass(frozen=True)
class TimelyParams:
    line_bps: float
    t_low_ns: int = 4 * MS
    t_high_ns: int = 25 * MS
    min_rtt_ns: int = 5 * MS
    alpha: float = 0.875             # weight of the newest RTT difference
    beta: float = 0.8
    hai_after: int = 5
    delta_bps: float = None          # default line / 40
    min_bps: float = None            # default line / 100

    def __post_init__(self):
        if self.line_bps <= 0 or not 0 < self.t_low_ns < self.t_high_ns:
            raise ValueError("line_bps > 0 and 0 < t_low < t_high required")
        if self.delta_bps is None:
            object.__setattr__(self, "delta_bps", self.line_bps / 40)
        if self.min_bps is None:
            object.__setattr__(self, "min_bps", self.line_bps / 100)


class Timely:
    """The rate of one QP; feed ``rtt`` with each RTT sample (ns)."""

    def __init__(self, params):
        self.p = params
        self.rate_bps = params.line_bps
        self.prev = None
        self.rtt_diff = 0.0
        self.negative = 0
        self.samples = 0

    def sent(self, nbytes):
        """(The pacing's hook; TIMELY counts no bytes.)"""

    def advance(self, now):
        """(The pacing's hook; TIMELY has no timers.)"""

    def rtt(self, sample):
        p = self.p
        self.samples += 1
        if self.prev is None:
            self.prev = sample
            return
        new_diff = sample - self.prev
        self.prev = sample
        self.rtt_diff = (1 - p.alpha) * self.rtt_diff + p.alpha * new_diff
        gradient = self.rtt_diff / p.min_rtt_ns
        if sample < p.t_low_ns:
            self.negative = 0
            self.rate_bps += p.delta_bps
        elif sample > p.t_high_ns:
            self.negative = 0
            self.rate_bps *= 1 - p.beta * (1 - p.t_high_ns / sample)
        elif gradient <= 0:
            self.negative += 1
            self.rate_bps += (p.hai_after if self.negative >= p.hai_after else 1) * p.delta_bps
        else:
            self.negative = 0
            self.rate_bps *= 1 - p.beta * min(gradient, 1.0)
        self.rate_bps = min(p.line_bps, max(p.min_bps, self.rate_bps))
