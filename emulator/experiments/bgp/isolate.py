"""The prober's isolation on a routed fabric (``probe --control bgp``).

On the OpenFlow fabric the prober sets a suspect link's ports down with a
port-mod and the controller routes around it.  A BGP fabric's operator shuts
the link's interfaces (both ends, ``ip link set ... down``): the kernels drop
its next hops at once (``fabric.routing.fib``), BGP withdraws what only that
link reached, and the link is isolated once no router's FIB routes through
it (the FIB watch's convergence).  ``notify`` takes the same arguments as the
OpenFlow fabric's ``links.detect.Detector`` and answers the same timestamps.
"""

import time

from emulator.dataplane.faults import Injector
from emulator.experiments.bgp.drill import dead_parts


class RoutedIsolator:
    """Shuts and restores links of a BGP session's fabric (see the module docstring)."""

    def __init__(self, session, settle_s=0.5):
        self.s = session
        self.inj = Injector(session, nft_name="isolate")
        self.settle_s = settle_s
        self.down = []

    def _links(self, ports):
        """The link names of switch ports [(switch, port number)]."""
        out = []
        for sw, port in ports:
            entry = next(p for s in self.s.topo["switches"] if s["name"] == sw
                         for p in s["ports"] if p["port"] == port)
            name = f"{sw}-{entry['peer']}"
            if f"{entry['peer']}-{sw}" not in out and name not in out:
                out.append(name)
        return out

    def notify(self, ports, down, t_cut_ns=None, timeout=5.0):
        t0 = time.monotonic_ns()
        links = self._links(ports)
        for link in links:
            (self.inj.link_down if down else self.inj.link_up)(link)
        self.down = links if down else []
        t_done = time.monotonic_ns()
        acked = t_done
        if down:                     # until no FIB routes through them
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                conv = self.s.fib.convergence(t0, None, self._ends(links))
                if conv["converged_ms"] is not None and \
                        time.monotonic_ns() - t0 > conv["converged_ms"] * 1e6 + \
                        self.settle_s * 1e9:
                    acked = t0 + int(conv["converged_ms"] * 1e6)
                    break
                time.sleep(0.02)
        return {"t_notify_ns": t0, "t_sent_ns": t_done, "t_acked_ns": acked}

    def _ends(self, links):
        return dead_parts([{"kind": "link_down", "target": lk} for lk in links],
                          self.s.topo)[0]

    def close(self):
        self.inj.close()
