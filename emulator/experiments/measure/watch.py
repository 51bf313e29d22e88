"""Watch a measurement: drop counters and CPU around it, then its fidelity verdict.

``with Watch(session) as w: <traffic>`` snapshots every drop counter and the
CPU clocks (``dataplane.observe.counters``) before and after the block, the machine's
CPU in 100 ms windows within it, and the CPU of the child processes reaped
inside it (traffic processes the block waited for); ``w.verdict(...)`` is ``fidelity.verdict`` on that window.
"""

import resource
import threading
import time

from emulator.dataplane.observe import counters
from emulator.experiments.measure import fidelity


def children_cpu():
    """CPU seconds of this process's reaped children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class Watch:
    def __init__(self, session):
        self.session = session
        self.delta = None

    def start(self):
        self.windows = counters.CpuWindows().start()
        self.before = counters.snapshot(self.session.net)
        self.cpu0 = children_cpu()
        self.t0 = time.monotonic()
        return self

    def stop(self):
        self.elapsed = time.monotonic() - self.t0
        self.children_cpu = children_cpu() - self.cpu0
        after = counters.snapshot(self.session.net)
        self.delta = counters.delta(self.before, after, self.session.topo,
                                    active_s=self.elapsed)
        self.delta["cpu_windows"] = self.windows.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.stop()
        else:
            self.windows.stop()
        return False

    def verdict(self, sent, lost=None, engine=None, latency=None, timing=False,
                frame_len=None, faulted=(), within=None, fault_drops=None):
        """The fidelity document of what ran inside the block; ``within``: the
        (start, end) monotonic seconds of the traffic itself, for the CPU windows."""
        if within is not None:
            self.delta = dict(self.delta, cpu_windows=self.windows.summary(within))
        engine = dict(engine or {})
        engine.setdefault("cpu_share", round(self.children_cpu / max(self.elapsed, 1e-9), 3))
        bound = fidelity.queue_bound_ms(self.session.topo, self.session.queue_ms) \
            if latency else None
        return fidelity.verdict(sent, self.delta, engine=engine, latency=latency,
                                bound_ms=bound, lost=lost, timing=timing,
                                frame_len=frame_len, faulted=faulted,
                                fault_drops=fault_drops)


class CounterSampler(threading.Thread):
    """Reads the switch interface counters every ``period_s`` until stopped."""

    def __init__(self, net, period_s):
        super().__init__(daemon=True)
        self.net, self.samples, self.halt = net, [], threading.Event()
        self.period_s = period_s

    def run(self):
        while not self.halt.is_set():
            self.samples.append((time.monotonic(), self.net.intf_counters()))
            self.halt.wait(self.period_s)

    def stop(self):
        self.halt.set()
        self.join(timeout=10)
        self.samples.append((time.monotonic(), self.net.intf_counters()))
