"""Entropy values of one PDC: which UDP source port each packet leaves with (pure).

Model.  A UET sender owns ``n`` entropy values (EVs, ``--ev-set N``); the
switches' ECMP hash turns each into a path.  Two policies (``lab.modes.EvPolicy``):

* ``Oblivious`` -- every packet takes the next EV of a random permutation of the
  set, drawn anew each round (htsim's ``UecMpOblivious``): traffic sprays evenly
  whatever the paths do.
* ``Reps`` -- Recycled Entropy Packet Spraying (Bonato et al., arXiv 2407.21625;
  htsim's ``UecMpReps``): an EV whose packet came back acknowledged and unmarked
  goes into a small circular buffer (8 entries); a packet reuses the oldest fresh
  one, or explores a random EV of the set when none is fresh.  An EV whose packet
  came back ECN-marked or trimmed is not recycled.  A packet lost (its timer
  fired) *retires* its EV: exploration skips it for ``hold_ns``, and the sender
  *freezes* for ``freeze_ns``: it stops exploring and cycles the buffer's EVs,
  recycled or not, so it keeps to paths that worked; a retired EV leaves the
  buffer, so a path that worked before it died is not cycled on.  After a freeze it
  explores 16 packets, as htsim does.  (htsim freezes only with trimming on, and
  retires nothing; retiring is this lab's addition, so that a dead path's values
  stay out of exploration: ``retired`` and ``last_retired_ns`` say when.)

``ev_of(i)`` is EV i's UDP source port, in 49152..65535 like RoCE's entropy, drawn
from the PDC's ``salt`` so that PDCs of one NIC use different ports.  Feedback
kinds: ``GOOD``, ``ECN``, ``TRIM`` (a NACK for a trimmed packet), ``LOST`` (timer).
"""

import random
import struct
import zlib
from collections import deque

from lab.modes import EvPolicy

GOOD, ECN, TRIM, LOST = "good", "ecn", "trim", "lost"
BUFFER = 8
EXPLORE_AFTER_FREEZE = 16


def sport(salt, i):
    """The UDP source port of EV ``i`` of a PDC salted ``salt``."""
    return 0xC000 | (zlib.crc32(struct.pack("!II", salt, i)) & 0x3FFF)


class _Policy:
    def __init__(self, n, salt, seed=None):
        if n < 1:
            raise ValueError("an EV set holds at least one value")
        self.n, self.salt = n, salt
        self.rng = random.Random(salt if seed is None else seed)
        self.ports = [sport(salt, i) for i in range(n)]
        self.by_port = {p: i for i, p in enumerate(self.ports)}
        self.counts = {GOOD: 0, ECN: 0, TRIM: 0, LOST: 0}
        self.retired = 0            # EVs retired (their packet lost)
        self.last_retired_ns = None
        self.retired_at = {}        # EV -> when retired

    def ev_of(self, i):
        return self.ports[i]

    def feedback(self, port, kind, now):
        """What became of a packet sent with source port ``port``."""
        self.counts[kind] += 1
        i = self.by_port.get(port)
        if i is not None:
            self._feedback(i, kind, now)

    def _feedback(self, i, kind, now):
        pass

    def state(self):
        return {"evs": self.n, "feedback": dict(self.counts), "retired": self.retired,
                "last_retired_ns": self.last_retired_ns}


class Single(_Policy):
    """One EV for the PDC's life (ROD, or ``--ev-set 1``)."""

    def next(self, now):
        return self.ports[0]


class Oblivious(_Policy):
    """The next EV of a random permutation every packet, a new permutation each round."""

    def __init__(self, n, salt, seed=None):
        super().__init__(n, salt, seed)
        self.order, self.pos = list(range(n)), n

    def next(self, now):
        if self.pos >= self.n:
            self.rng.shuffle(self.order)
            self.pos = 0
        i = self.order[self.pos]
        self.pos += 1
        return self.ports[i]


class Reps(_Policy):
    """REPS with freezing and retirement (see the module docstring)."""

    def __init__(self, n, salt, seed=None, freeze_ns=2_000_000_000, hold_ns=10_000_000_000,
                 buffer=BUFFER):
        super().__init__(n, salt, seed)
        self.freeze_ns, self.hold_ns = freeze_ns, hold_ns
        self.fresh = deque(maxlen=buffer)      # EVs recycled, oldest first
        self.ring = deque(maxlen=buffer)       # the last EVs recycled (cycled when frozen)
        self.frozen_until = None
        self.explore = 0
        self.freezes = 0
        self.ring_pos = 0

    def next(self, now):
        if self.frozen_until is not None and now >= self.frozen_until:
            self.frozen_until = None
            self.fresh.clear()
            self.explore = EXPLORE_AFTER_FREEZE
        if self.explore > 0:
            self.explore -= 1
            return self.ports[self._explore(now)]
        if self.frozen_until is not None and self.ring:
            if self.fresh:
                i = self.fresh.popleft()
            else:
                self.ring_pos = (self.ring_pos + 1) % len(self.ring)
                i = self.ring[self.ring_pos]
            return self.ports[i]
        if self.fresh:
            return self.ports[self.fresh.popleft()]
        return self.ports[self._explore(now)]

    def _explore(self, now):
        """A random EV that is not retired (any, if every one is)."""
        for _ in range(8):
            i = self.rng.randrange(self.n)
            t = self.retired_at.get(i)
            if t is None or now - t >= self.hold_ns:
                return i
        live = [i for i in range(self.n) if self.retired_at.get(i) is None
                or now - self.retired_at[i] >= self.hold_ns]
        return self.rng.choice(live) if live else self.rng.randrange(self.n)

    def _feedback(self, i, kind, now):
        if kind == GOOD:
            self.retired_at.pop(i, None)
            self.fresh.append(i)
            self.ring.append(i)
        elif kind == LOST:
            if i not in self.retired_at:
                self.retired += 1
            self.retired_at[i] = now
            self.last_retired_ns = now
            # a value that worked before the path died leaves the cycle too: a freeze
            # that kept cycling it lost a packet in every few, each after a timer
            for buf in (self.fresh, self.ring):
                if i in buf:
                    kept = [x for x in buf if x != i]
                    buf.clear()
                    buf.extend(kept)
            if self.frozen_until is None and self.explore == 0:
                self.freezes += 1
                self.frozen_until = now + self.freeze_ns

    def state(self):
        return dict(super().state(), freezes=self.freezes)


def policy(kind, n, salt, seed=None, single=False, **kw):
    """The EV policy ``kind`` (lab.modes.EvPolicy) over ``n`` values; one value
    for the PDC's life when ``single`` (ROD) or ``n`` is 1."""
    if single or n == 1:
        return Single(1, salt, seed)
    if EvPolicy(kind) == EvPolicy.REPS:
        return Reps(n, salt, seed, **kw)
    return Oblivious(n, salt, seed)
