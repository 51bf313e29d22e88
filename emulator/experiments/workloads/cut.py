"""A link cut during a collective (``compare --cut LINK``).

The link goes down ``start_s`` after the collective's first frames cross the
fabric (the switch ports' counters grew) and comes back ``duration_s`` later,
with the modelled loss-of-signal detection (``detect_s``, default 1 ms, as the
drill's).  Under ``--failover none`` nothing but the switches' own data plane
moves the flows that crossed it.  The report gives the cut's times and, where
the adaptive stage runs, how soon the first frame left by another uplink
(timestamped at the eBPF decision).
"""

import threading
import time

from emulator.dataplane.faults import Injector

START_BYTES = 1 << 16        # the collective has started: this much crossed the switches
                             # (the ranks' start barrier crosses them too, in small frames)


class Cut:
    """Cuts ``link`` on ``session`` around the collective (a ``with`` block)."""

    def __init__(self, session, link, start_s, duration_s, detect_s=0.001):
        self.s, self.link = session, link
        self.start_s, self.duration_s, self.detect_s = start_s, duration_s, detect_s
        self.halt = threading.Event()
        self.inj = None
        self.down = self.up = None
        self.error = None

    def _bytes(self):
        return sum(c[0] for c in self.s.net.intf_counters().values() if c)

    def _run(self):
        try:
            base, deadline = self._bytes(), time.monotonic() + 120
            while self._bytes() - base < START_BYTES:        # the collective began
                if self.halt.wait(0.002) or time.monotonic() > deadline:
                    return
            if self.halt.wait(self.start_s):
                return
            self.down = self.inj.link_down(self.link)
            self.halt.wait(self.duration_s)
            self.up = self.inj.link_up(self.link)
        except Exception as e:          # noqa: BLE001 - reported with the run
            self.error = f"{type(e).__name__}: {e}"

    def __enter__(self):
        self.inj = Injector(self.s, detect=self.detect_s)
        self._thread = threading.Thread(target=self._run, daemon=True, name="cut")
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.halt.set()
        self._thread.join(timeout=30)
        try:
            if self.down is not None and self.up is None:
                self.up = self.inj.link_up(self.link)        # the collective ended first
        finally:
            self.inj.close()
        return False

    def faulted(self):
        """The cut link's names ('a->b', both ways): its losses are the fault's."""
        a, _, b = self.link.replace("-", ":").partition(":")
        return {f"{a}->{b}", f"{b}->{a}"}

    def result(self):
        """The cut as it happened, and the data plane's reaction to it."""
        out = {"link": self.link, "error": self.error, "happened": self.down is not None}
        if self.down is None:
            return out
        t_cut = self.down["t_cut_ns"]
        out["detect_ms"] = self.detect_s * 1e3
        out["held_ms"] = round((self.up["t_ns"] - t_cut) / 1e6, 1) if self.up else None
        stage = getattr(self.s, "adaptive", None)
        if stage is not None:
            entries = stage.entries()
            first = [entries[p]["evac_ns"] for p in self.down["detect"]["ports"]
                     if p in entries and p in stage.downs
                     and entries[p]["evac_ns"] >= stage.downs[p]]
            if first:
                out["first_elsewhere_after_cut_ms"] = round((min(first) - t_cut) / 1e6, 3)
        return out
