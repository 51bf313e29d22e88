"""The stage's candidates follow the control plane's repair.

On a switch an adaptive-routing group is the route's ECMP group: its members
are what the control plane programmed.  When a link dies, the switch at its end
skips the dead port by itself (the detection model's news, ``stage.link_news``),
but a remote switch only learns that one of its candidates no longer leads to
the destination (leaf2's uplink to spine1, for leaf1's hosts, once leaf1-spine1
is cut) when the control plane reprograms its group.  So the stage withdraws a
candidate when the controller's repair has reached the switches, and puts it
back when the controller's restore has: never sooner, and never under
``--failover none`` (no repair is pushed).

The news is the built-in controller's ``CONVERGED`` line of a port event,
logged once every switch it touched confirmed the push (a barrier reply, after
the switch-agent model's delays), read from the controller's log as it grows.
A controller app that logs no such lines leaves the candidates as installed.
"""

import threading
import time

from emulator.dataplane.adaptive import model
from emulator.dataplane.ovs.controller_proc import converged_events

POLL_S = 0.005                   # how often the controller's log is read


class RepairFollower:
    """Reads the controller's log at ``log_path`` and applies its port pushes to
    ``stage`` (``stage.set_routes``).  ``topo``: the run's topology document."""

    def __init__(self, stage, topo, log_path, poll_s=POLL_S, clock=time.monotonic_ns):
        self.stage, self.topo, self.log_path = stage, topo, log_path
        self.poll_s, self.clock = poll_s, clock
        self.names = {s["dpid"]: s["name"] for s in topo["switches"]}
        self.dead = set()                # (switch, port) the controller routes around
        self.events = []                 # one per push the stage followed
        self._offset = 0
        self._partial = ""
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self._offset = self._size()      # what was logged before: the start-up pushes
        self._thread = threading.Thread(target=self._run, name="ar-repair", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.poll()                      # a push logged just before the end

    def _size(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.seek(0, 2)
        except OSError:
            return 0

    def _run(self):
        while not self._stop.wait(self.poll_s):
            self.poll()

    def _new_lines(self):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        self._offset += len(data)
        text = self._partial + data.decode(errors="replace")
        lines = text.split("\n")
        self._partial = lines.pop()      # a line still being written
        return lines

    def poll(self):
        """Apply the port pushes logged since the last poll; returns how many."""
        pushes = [ev for ev in parse(self._new_lines()) if ev.get("event") == "port"]
        if not pushes:
            return 0
        for ev in pushes:
            name = self.names.get(ev.get("dpid"))
            if name is None:
                continue
            (self.dead.discard if ev.get("up") else self.dead.add)((name, ev["port"]))
        t_ns = self.clock()
        changed = self.stage.set_routes(model.repaired(self.topo, self.stage.plan,
                                                       self.stage.keys, self.dead))
        self.events.append({
            "t_ns": t_ns, "t_done_ns": int(pushes[-1].get("t_done", 0) * 1e9),
            "dead": sorted(f"{sw}:{p}" for sw, p in self.dead), **changed})
        return len(pushes)


def parse(lines):
    """The ``CONVERGED {json}`` events among whole log ``lines``."""
    return converged_events("\n".join(lines))
