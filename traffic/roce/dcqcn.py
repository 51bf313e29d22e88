"""DCQCN rate control of one QP (Zhu et al., SIGCOMM 2015), pure: the caller passes the time.

Reaction point (the sender's NIC), per QP, with the paper's names:

- current rate RC and target rate RT start at the line rate; alpha at 1;
- on a CNP: RT = RC, RC = RC (1 - alpha/2), alpha = (1 - g) alpha + g, and
  the increase state restarts (timer, byte counter, both stage counts);
- every ``alpha_timer`` without a CNP: alpha = (1 - g) alpha;
- a rate-increase event happens every ``increase_timer`` (count T) and
  every ``byte_counter`` bytes sent (count BC).  Each event sets
  RC = (RT + RC) / 2 after moving RT: not at all while max(T, BC) < F
  (fast recovery), by Rai while one of them is past F (additive increase),
  by i x Rhai once both are (hyper increase, i = min(T, BC) - F + 1).

Notification point (the receiver's NIC): at most one CNP per QP per
``cnp_interval`` for packets arriving with ECN CE (``CnpPacer``).

The paper's constants are for 40 Gbit/s and microsecond RTTs; the lab's
links run at a few to tens of Mbit/s, where a 4 KB frame takes milliseconds
and the emulated bandwidth-delay product is 1-3 frames, so the paper's
ratios to the RTT and to the frame time cannot both hold.  What each keeps:

* the timers (alpha, rate increase) and the NP's CNP interval keep their
  length in *frame times at the line rate*: 20 ms and 10 ms at
  ``REFERENCE_BPS`` (40 Mbit/s, where they were tuned: 24 and 12 frames of
  4170 bytes), ten times that at 4 Mbit/s.  A QP learns of congestion only
  through its own frames (a CNP needs a marked one), so the pace of its
  increases must be set in frames it sends: with timers fixed in ms, a QP at
  an eighth of 4 Mbit/s (a frame every 67 ms) saw three increase events
  between two of its frames, and every cut was undone before it could show
  (docs/dragonfly.md).  At 40 Mbit/s nothing changes;
* g (the paper's 1/256 per alpha period), the byte counter (bytes, hence
  frames), F, and Rai/Rhai/the minimum rate as fractions of the line rate
  (the paper's 40 Mbit/s is line/1000; line/40 recovers within a run of
  seconds).

The CNP interval (the paper's 50 us, about its timers' 55 us; half of them
here) keeps a QP from being cut for every marked packet of a queue it has
already stopped feeding (docs/transport.md has the sweep).
"""

from dataclasses import dataclass

MS = 1_000_000
REFERENCE_BPS = 40e6      # the line rate the timers were tuned at (docs/transport.md)


@dataclass(frozen=True)
class DcqcnParams:
    line_bps: float
    g: float = 1 / 256
    alpha_timer_ns: int = None               # default 20 ms x REFERENCE_BPS / line
    increase_timer_ns: int = None            # default 20 ms x REFERENCE_BPS / line
    byte_counter: int = 256 * 1024
    fast_recovery_steps: int = 5             # F
    rai_bps: float = None                    # default line / 40
    rhai_bps: float = None                   # default line / 8
    min_bps: float = None                    # default line / 100
    cnp_interval_ns: int = None              # default 10 ms x REFERENCE_BPS / line

    def __post_init__(self):
        if self.line_bps <= 0 or not 0 < self.g < 1:
            raise ValueError("line_bps > 0 and 0 < g < 1 required")
        for name, frac in (("rai_bps", 40), ("rhai_bps", 8), ("min_bps", 100)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, self.line_bps / frac)
        scale = REFERENCE_BPS / self.line_bps    # the same frame times at any line rate
        for name, ms in (("alpha_timer_ns", 20), ("increase_timer_ns", 20),
                         ("cnp_interval_ns", 10)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, int(round(ms * MS * scale)))
            elif getattr(self, name) <= 0:
                raise ValueError(f"{name}: > 0 required")


class Dcqcn:
    """The reaction point of one QP; ``rate_bps`` is what it may send at now."""

    def __init__(self, params, now):
        self.p = params
        self.rc = self.rt = params.line_bps
        self.alpha = 1.0
        self.t = self.b = 0
        self.bytes = 0
        self.next_alpha = now + params.alpha_timer_ns
        self.next_increase = now + params.increase_timer_ns
        self.cnps = 0

    @property
    def rate_bps(self):
        return self.rc

    def cnp(self, now):
        p = self.p
        self.cnps += 1
        self.rt = self.rc
        self.rc = max(p.min_bps, self.rc * (1 - self.alpha / 2))
        self.alpha = (1 - p.g) * self.alpha + p.g
        self.t = self.b = 0
        self.bytes = 0
        self.next_alpha = now + p.alpha_timer_ns
        self.next_increase = now + p.increase_timer_ns

    def sent(self, nbytes):
        self.bytes += nbytes
        while self.bytes >= self.p.byte_counter:
            self.bytes -= self.p.byte_counter
            self.b += 1
            self._increase()

    def advance(self, now):
        """Run the alpha and rate-increase timers up to ``now``."""
        p = self.p
        if now >= self.next_alpha:
            k = (now - self.next_alpha) // p.alpha_timer_ns + 1
            self.alpha *= (1 - p.g) ** k
            self.next_alpha += k * p.alpha_timer_ns
        events = 0
        while now >= self.next_increase:
            self.next_increase += p.increase_timer_ns
            if events < 64:                 # after a long idle the rate is at line anyway
                self.t += 1
                self._increase()
                events += 1

    def _increase(self):
        p = self.p
        f = p.fast_recovery_steps
        if max(self.t, self.b) < f:
            pass                                    # fast recovery: toward RT
        elif min(self.t, self.b) < f:
            self.rt += p.rai_bps                    # additive increase
        else:
            self.rt += (min(self.t, self.b) - f + 1) * p.rhai_bps   # hyper increase
        self.rt = min(self.rt, p.line_bps)
        self.rc = min((self.rt + self.rc) / 2, p.line_bps)


class CnpPacer:
    """The notification point: whether a CE-marked arrival on a QP earns a CNP now."""

    def __init__(self, interval_ns):
        self.interval = interval_ns
        self.last = {}
        self.sent = 0

    def __call__(self, qp, now):
        last = self.last.get(qp)
        if last is not None and now - last < self.interval:
            return False
        self.last[qp] = now
        self.sent += 1
        return True
