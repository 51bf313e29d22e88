"""BFD hold-down: a gray failure that flaps is routed around once (pure, no I/O).

A link that loses frames without losing carrier (a gray failure) makes its
BFD session flap: three missed intervals take it down, a few frames getting
through bring it back, and every flap would move traffic back onto the lossy
link and make the controller recompute the fabric.  Real switches hold a
BFD-down link down for a while after its session comes back (Junos
``holddown-interval``, Cisco's BFD dampening, SONiC's link event damping):

* a port whose liveness fails while its carrier is up (BFD/CFM down: LIVE
  cleared without LINK_DOWN) is down at once, as without hold-down;
* when it comes back, it is announced up only after it has stayed up for the
  hold-down (``base_s``); going down again meanwhile restarts the wait and
  doubles the hold-down, up to ``max_s``;
* a failure after the port was announced up again starts at ``base_s``;
* a carrier loss (a cut) is not dampened: its restore is announced at once,
  unless a BFD hold-down of the same port is still running.

The default base, 3 s, outlasts a BFD session's slow start: a session that
comes back runs at one-second intervals (RFC 5880 6.8.3; Open vSwitch
too) until its poll sequence gets through, so for about three seconds it
cannot see the loss that took it down.  Held for less, a link still losing
half its frames would carry traffic again before BFD could notice.

``event()`` and ``expire()`` return what the controller announces; the
controller asks again at ``next_deadline()``.
"""

UP, DOWN, HELD = "up", "down", "held"


class HoldDown:
    def __init__(self, base_s=3.0, max_s=30.0):
        if base_s < 0 or max_s < base_s:
            raise ValueError(f"hold-down {base_s}s..{max_s}s: need 0 <= base <= max")
        self.base_s = base_s
        self.max_s = max_s
        self.state = {}      # port -> UP | DOWN | HELD (announced down in DOWN and HELD)
        self.hold = {}       # port -> its current hold-down (s)
        self.until = {}      # port -> when a HELD port is announced up
        self.flaps = {}      # port -> BFD downs in its current episode
        self.damped = set()  # ports whose current down period began with a BFD down

    @property
    def enabled(self):
        return self.base_s > 0

    def held(self):
        """Ports physically up but still announced down."""
        return {p for p, s in self.state.items() if s == HELD}

    def event(self, port, live, gray, now):
        """A liveness change of ``port`` at ``now``: True/False to announce up/down,
        None to announce nothing (held, or no change)."""
        st = self.state.get(port, UP)
        if not live:
            # a port that comes back from a cut reports its carrier before its
            # liveness: that "carrier up, not live" is no BFD failure
            if gray and self.enabled and st != DOWN:
                again = st == HELD and port in self.hold
                self.hold[port] = min(self.max_s, 2 * self.hold[port]) if again else self.base_s
                self.flaps[port] = self.flaps.get(port, 0) + 1 if again else 1
                self.damped.add(port)
            elif st == UP:
                self.damped.discard(port)      # a plain cut of a stable port
            self.until.pop(port, None)
            self.state[port] = DOWN
            return False if st == UP else None
        if st == UP:
            return None
        if port in self.damped:
            self.state[port] = HELD
            self.until[port] = now + self.hold[port]
            return None
        self.state[port] = UP
        return True

    def expire(self, now):
        """Ports whose hold-down ran out by ``now``: announce them up (sorted)."""
        done = sorted(p for p, t in self.until.items() if t <= now)
        for p in done:
            del self.until[p]
            self.state[p] = UP
            self.damped.discard(p)
        return done

    def next_deadline(self):
        return min(self.until.values(), default=None)


def parse_holddown(text):
    """``BASE:MAX`` (seconds) or ``0`` (off) -> HoldDown; ValueError if malformed."""
    parts = str(text).strip().split(":")
    try:
        vals = [float(x) for x in parts]
    except ValueError:
        vals = []
    if len(vals) == 1 and vals[0] == 0:
        return HoldDown(0.0, 0.0)
    if len(vals) != 2:
        raise ValueError(f"BFD hold-down {text!r}: BASE:MAX in seconds (e.g. 3:30), or 0 for off")
    return HoldDown(*vals)
