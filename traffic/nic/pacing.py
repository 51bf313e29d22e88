"""Token-bucket pacing on an injected monotonic clock (pure, unit-tested).

Tokens are bits (rate in bit/s) or packets (rate in packet/s, cost 1 per
packet).  The bucket holds at most ``depth`` tokens: a sender that fell
behind (scheduler, a long sleep) may catch up by one burst, never more, so
the long-run rate stays the target and bursts stay bounded.
"""

import math
import time


class TokenBucket:
    """``rate`` tokens per second, at most ``depth`` tokens banked."""

    def __init__(self, rate, depth, now_ns):
        if rate <= 0 or depth <= 0:
            raise ValueError("rate and depth must be positive")
        self.rate = float(rate)
        self.depth = float(depth)
        self.tokens = float(depth)      # start with one burst available
        self.last_ns = now_ns

    def refill(self, now_ns):
        """Add the tokens earned since the last call; return the balance."""
        if now_ns > self.last_ns:
            self.tokens = min(self.depth,
                              self.tokens + (now_ns - self.last_ns) * self.rate / 1e9)
            self.last_ns = now_ns
        return self.tokens

    def consume(self, cost):
        """Spend ``cost`` tokens (the balance may go negative by one packet)."""
        self.tokens -= cost

    def wait_ns(self, cost):
        """Nanoseconds until ``cost`` tokens are available (0 if they are)."""
        missing = cost - self.tokens
        return 0 if missing <= 0 else int(missing * 1e9 / self.rate) + 1


def sleep_ns(ns):
    """Sleep for ``ns`` nanoseconds (pacing waits only, never fixed sleeps)."""
    if ns > 0:
        time.sleep(ns / 1e9)


DEFAULT_LAG_NS = 20_000_000        # a stream this far behind skips, by default


class Schedule:
    """Packet k of a paced stream is due at ``start_ns + k * interval_ns``.

    The engine asks ``due(now)`` how many packets to send now; it wakes on a
    tick, so a packet leaves up to one tick late by design and what fell due
    within a tick leaves as one small burst (a NIC's pacer is no smoother at
    this scale: the link's shaper spaces them out).  A stream more than
    ``max_lag_ns`` behind its schedule (the process did not get the CPU) does
    not catch up with a burst the network would see as congestion: the
    packets beyond the lag are skipped and counted (``skipped``), an emulation
    shortfall, never a network loss.  Packets sent more than ``late_ns``
    after they were due are counted in ``late``; those sent more than
    ``DEFAULT_LAG_NS`` after, which a stream at the default lag would have
    skipped, in ``caught_up`` (a larger ``max_lag_ns`` let them leave).
    """

    def __init__(self, interval_ns, start_ns, max_lag_ns=DEFAULT_LAG_NS,
                 late_ns=3_000_000, end_ns=None):
        if interval_ns <= 0:
            raise ValueError("interval must be positive")
        self.interval = float(interval_ns)
        self.start = start_ns
        self.max_lag = max(max_lag_ns, self.interval)
        self.late_after = late_ns
        self.end = end_ns
        self.k = 0                    # next packet index
        self.sent = self.skipped = self.late = self.caught_up = 0
        self.max_late_ns = 0

    def scheduled(self, now_ns):
        """Packets due by ``now_ns`` since the start (capped at the end)."""
        t = now_ns if self.end is None else min(now_ns, self.end - 1)
        if t < self.start:
            return 0
        return int((t - self.start) // self.interval) + 1

    def due(self, now_ns, limit):
        """Packets to send now (at most ``limit``); marks them sent."""
        want = self.scheduled(now_ns) - self.k
        if want <= 0:
            return 0
        backlog = int(self.max_lag // self.interval) + 1
        if want > backlog:                 # fell behind: skip, don't burst
            self.skipped += want - backlog
            self.k += want - backlog
            want = backlog
        n = min(want, limit)
        late = now_ns - (self.start + self.k * self.interval)
        if late > self.max_late_ns:
            self.max_late_ns = int(late)
        if late > self.late_after:
            self.late += n
        if late > DEFAULT_LAG_NS:          # packets k .. k+n-1: those due before now - lag
            behind = math.ceil((now_ns - DEFAULT_LAG_NS - self.start) / self.interval)
            self.caught_up += max(0, min(n, behind - self.k))
        self.k += n
        self.sent += n
        return n

    def next_ns(self):
        """When the next packet is due (None once the stream has ended)."""
        t = self.start + self.k * self.interval
        if self.end is not None and t >= self.end:
            return None
        return int(t)

    def done(self, now_ns):
        return self.end is not None and now_ns >= self.end and \
            self.k >= self.scheduled(now_ns)
