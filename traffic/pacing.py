"""Token-bucket pacing on an injected monotonic clock (pure, unit-tested).

Tokens are bits (rate in bit/s) or packets (rate in packet/s, cost 1 per
packet).  The bucket holds at most ``depth`` tokens: a sender that fell
behind (scheduler, a long sleep) may catch up by one burst, never more, so
the long-run rate stays the target and bursts stay bounded.
"""

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
