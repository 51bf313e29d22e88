"""BFD on every eBGP session: ``--bfd INTERVALxMULT``, and what detection should take.

Default: 300 ms x 3, FRR's documented BFD defaults (docs.frrouting.org, "BFD":
``receive-interval`` and ``transmit-interval`` default 300 ms,
``detect-multiplier`` 3), which SONiC's FRR-based BFD inherits: 900 ms to
detect a dead peer.  Data-center operators often lower it (e.g. ``--bfd
100x3``); below ~10 ms the daemons' scheduling on a 2-core machine starts to
decide, not the links.

Detection (RFC 5880 section 6.8.4): a session goes down when no control
packet arrived for ``multiplier`` x the peer's transmit interval.  FRR's
bfdd sends every 75-100 % of the interval (``ptm_bfd_start_xmt_timer``:
RFC 5880 section 6.5.2's jitter; 75-90 % when the multiplier is 1).  So:

* a path that stops carrying packets (100 % loss one way) is detected
  between (multiplier - 1) and multiplier intervals after it stopped, never
  later than ``detection_bound_ms`` (multiplier x interval);
* under random loss of a share p, detection waits for ``multiplier`` losses
  in a row (with the jitter, two losses in a row leave a gap of at most
  3 x 100 % = 3 intervals, not more): the number of packets until the first
  such run has the run-length distribution (``run_wait_pmf``), a geometric
  tail with mean (1/p^m - 1)/(1 - p) packets (Feller, vol. 1, XIII.7);
  ``detection_model`` simulates it with the jitter for the quantiles.
"""

import random
import re

from emulator.errors import ConfigError

DEFAULT = (300, 3)          # FRR's defaults: 300 ms x 3
TEXT_RE = re.compile(r"^\s*(\d+)\s*(?:ms)?\s*(?:[x*]\s*(\d+))?\s*$")
JITTER = (0.75, 1.0)        # FRR bfdd: each transmit interval 75-100 % of the nominal


def parse(text, where="--bfd"):
    """``INTERVALxMULT`` (``300x3``, ``50msx3``; ``INTERVAL`` alone: multiplier 3) ->
    (interval ms, multiplier); None -> ``DEFAULT``.  ConfigError otherwise."""
    if text is None:
        return DEFAULT
    m = TEXT_RE.match(str(text).lower())
    if not m:
        raise ConfigError(where, f"{text!r}: INTERVALxMULT in ms, e.g. 300x3 (FRR's default) "
                                 "or 50x3")
    interval, mult = int(m.group(1)), int(m.group(2) or 3)
    if not 10 <= interval <= 60000:     # FRR's range for receive/transmit-interval
        raise ConfigError(where, f"{text!r}: the interval is 10..60000 ms (FRR's range)")
    if not 2 <= mult <= 255:             # FRR's range for detect-multiplier
        raise ConfigError(where, f"{text!r}: the multiplier is 2..255 (FRR's range)")
    return interval, mult


def text(interval_ms, mult):
    return f"{interval_ms}x{mult}"


def detection_bound_ms(interval_ms, mult, slack=0.2):
    """The longest a dead path may go undetected: multiplier x interval, plus ``slack``
    (the share the daemons' scheduling may add)."""
    return interval_ms * mult * (1 + slack)


def expected_packets(p, m):
    """Mean number of packets until the first run of ``m`` losses, each lost with
    probability ``p`` (0 < p <= 1)."""
    if not 0 < p <= 1:
        raise ValueError(f"loss {p}: in (0, 1]")
    if p == 1:
        return float(m)
    return (1 / p ** m - 1) / (1 - p)


def run_wait_pmf(p, m, n_max):
    """[P(the first run of m losses ends at packet n)] for n = 0..n_max (exact: a
    Markov chain on the current run's length)."""
    state = [0.0] * m          # probability of a current run of length i (no run of m yet)
    state[0] = 1.0
    pmf = [0.0] * (n_max + 1)
    for n in range(1, n_max + 1):
        nxt = [0.0] * m
        nxt[0] = sum(state) * (1 - p)
        for i in range(m - 1):
            nxt[i + 1] = state[i] * p
        pmf[n] = state[m - 1] * p
        state = nxt
    return pmf


def detection_model(p, interval_ms, mult, trials=20000, seed=1, jitter=JITTER):
    """Sorted detection times (ms after the loss started) of ``trials`` simulated
    sessions: packets every U(jitter) x interval, each lost with probability ``p``,
    the loss starting at a uniform phase; detected once ``mult`` x interval passes
    with nothing received."""
    rng = random.Random(seed)
    out = []
    limit = mult * interval_ms
    for _ in range(trials):
        last = -rng.uniform(*jitter) * interval_ms * rng.random()  # last arrival before
        t = last
        while True:
            t += rng.uniform(*jitter) * interval_ms
            if t - last > limit:
                out.append(last + limit)
                break
            if rng.random() >= p:
                last = t
    return sorted(max(0.0, x) for x in out)


def quantiles(values, qs=(0.5, 0.9, 0.99)):
    """{q: value} of sorted ``values`` (nearest rank)."""
    if not values:
        return {q: None for q in qs}
    return {q: values[min(len(values) - 1, int(q * len(values)))] for q in qs}
