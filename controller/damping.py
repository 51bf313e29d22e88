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
  unless a BFD hold-down of the same port is still running.  Open vSwitch
  often reports a cut as "carrier up, not live" first and the carrier loss
  a moment later, so a down period counts as a BFD failure only if no
  carrier loss is seen before the port comes back.

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
        self.damped = set()  # ports whose current down period is a BFD failure
        self.from_hold = set()  # ports that went down again while held

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
            if st == UP:
                # a new episode; a cut often reports "carrier up, not live" first,
                # so it is a BFD one only until a carrier loss is seen
                self.from_hold.discard(port)
                if gray and self.enabled:
                    self.damped.add(port)
                    self.hold[port], self.flaps[port] = self.base_s, 1
                else:
                    self.damped.discard(port)
            elif st == HELD:
                self.from_hold.add(port)           # a hold-down still runs
                if gray and self.enabled:          # flapped while held: hold longer
                    self.hold[port] = min(self.max_s, 2 * self.hold[port])
                    self.flaps[port] = self.flaps.get(port, 0) + 1
            elif not gray and port not in self.from_hold:
                self.damped.discard(port)          # the carrier went: a cut, not BFD
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
            self.from_hold.discard(p)
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
