"""The pause model's process: polls every switch port's lossless buffer and pauses,
resumes, watches and mitigates the upstream queues (dataplane.lossless.pfc).

Run by ``dataplane.lossless.pfc.Pfc`` as ``python -m emulator.dataplane.lossless.pfc_agent CONFIG``
with the accounting map's descriptor inherited.  Every ``poll_s`` (every
``idle_s``, up to 2 ms, while all buffers are under half their xoff) it reads
the map (mapped into memory: no system call), runs each switch port's
``IngressPause`` and, on a change, sends the upstream's gate change
(a prepared netlink message in the upstream's namespace; a kick frame
after a resume).  Every ``wd_poll_s`` the watchdog of each queue that is
asked to pause, and a search for a cycle of stuck paused queues.

Commands on standard input, one per line: ``storm KEY on|off`` (interface
end KEY pauses its peer forever, or stops), ``exit PATH`` (write the
counters as JSON to PATH and exit).
"""

import json
import math
import mmap
import os
import select
import socket
import struct
import sys
import time

from emulator.dataplane.lossless import pfc
from emulator.dataplane.lossless.backlogs import Backlogs
from emulator.fabric import lossless
from lab.modes import FlowControl
from traffic.nic.netns import entered

W = pfc.WORDS
ING, XOFF, CROSS, LAST, FLAGS, EG_IN, EG_OUT = (pfc.E_ING // 8, pfc.E_XOFF // 8,
                                                pfc.E_CROSS_NS // 8, pfc.E_LAST_NS // 8,
                                                pfc.E_FLAGS // 8, pfc.E_EG_IN // 8,
                                                pfc.E_EG_OUT // 8)
PAUSES, PAUSED_NS = pfc.E_PAUSES // 8, pfc.E_PAUSED_NS // 8
DROPS, LATE = pfc.E_ING_DROPS // 8, pfc.E_LATE // 8
QUEUED, CORR = pfc.E_QUEUED // 8, pfc.E_CORR // 8


class Gates:
    """The lossless gate of every interface end, closed and opened by netlink in
    its namespace; a kick frame after each opening."""

    def __init__(self, ports, frame):
        self.nl, self.kick, self.msgs, kicks = {}, {}, {}, {}
        self.errors = []
        for p in ports:
            ns = p["netns"]
            with entered(ns):
                if ns not in self.nl:
                    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                      0)
                    s.bind((0, 0))
                    s.setblocking(False)
                    self.nl[ns] = s
                if (ns, p["ifname"]) not in kicks:      # one per interface, for every class
                    k = socket.socket(socket.AF_PACKET, socket.SOCK_RAW | socket.SOCK_CLOEXEC)
                    k.bind((p["ifname"], 0))
                    kicks[(ns, p["ifname"])] = k
                self.kick[p["key"]] = kicks[(ns, p["ifname"])]
            limit = pfc.HOST_QUEUE if p["kind"] == "host" else pfc.SWITCH_QUEUE
            open_rate = min(p["rate_bps"] * pfc.GATE_OPEN_FACTOR // 8, 2 ** 32 - 1)
            cls = p.get("cls", 0)
            self.msgs[p["key"]] = (
                ns, pfc.gate_message(p["ifindex"], 1, frame, limit, cls=cls),
                pfc.gate_message(p["ifindex"], open_rate, 2 * frame, limit, cls=cls))

    def set(self, key, closed):
        """Close or open ``key``'s gate; an interface gone down (a cut link) cannot
        be kicked and says so in ``errors``, the model goes on."""
        ns, close_msg, open_msg = self.msgs[key]
        try:
            self.nl[ns].send(close_msg if closed else open_msg)
            if not closed:
                self.kick[key].send(pfc.kick_frame())
        except OSError as e:
            self._error(f"gate {key}: {e.strerror or e}")

    def _error(self, text):
        if len(self.errors) < 20:
            self.errors.append(text)

    def drain(self):
        """Read the kernel's answers; keep the errors."""
        for s in self.nl.values():
            while True:
                try:
                    buf = s.recv(65536)
                except BlockingIOError:
                    break
                except OSError as e:            # ENOBUFS: answers lost, not the gates
                    self._error(f"netlink: {e.strerror or e}")
                    break
                off = 0
                while off + 20 <= len(buf):
                    n, mtype = struct.unpack_from("=IH", buf, off)
                    if mtype == 2:
                        err = struct.unpack_from("=i", buf, off + 16)[0]
                        if err:
                            self._error(os.strerror(-err))
                    off += max(n, 20)


class Agent:
    def __init__(self, cfg, mv, gates, clock=time.monotonic, backlogs=None):
        self.cfg = cfg
        self.pc = lossless.PfcConfig(**cfg["pfc"])
        self.mv = mv
        self.gates = gates
        self.clock = clock
        self.ports = {p["key"]: p for p in cfg["ports"]}
        self.switch_ports = [p["key"] for p in cfg["ports"] if p["kind"] == "switch"]
        self.pause = {k: lossless.IngressPause(self.ports[k]["xoff"], self.ports[k]["xon"])
                      for k in self.switch_ports}
        self.requested = {k: None for k in self.ports}      # egress key: paused by its peer since
        self.storming = {}                                   # storming end -> since
        self.storms = {k: [] for k in self.ports}            # (start, end) per storming end
        self.closed = {k: None for k in self.ports}          # egress key: gate closed since
        self.closed_s = {k: 0.0 for k in self.ports}
        self.wd = {k: lossless.Watchdog(self.pc.wd_detect_s, self.pc.wd_restore_s,
                                        mitigate=self.pc.wd_action != "off")
                   for k in self.ports}
        self.reactions = []                                  # (ingress key, ns)
        self.deadlocks = lossless.CycleWatch()
        self.next_wd = 0.0
        fastest = max((p["rate_bps"] for p in cfg["ports"]), default=1)
        # half of xoff (>= 1.5 frames) at the fastest link, bounded to 0.5-2 ms
        self.idle_s = max(self.pc.poll_s, min(0.002, lossless.frame_time_s(
            fastest, cfg["frame"]) * max(1.5, self.pc.xoff_frames / 2) * 0.8))
        self.backlogs = backlogs
        if backlogs is not None:      # two ports a look; a whole read within a watchdog
            backlogs.per_look = max(2, math.ceil(   # poll at the idle pace on big fabrics
                len(backlogs.ports) * self.idle_s / self.pc.wd_poll_s))
        self.idle = {}                     # key: (EG_IN, EG_OUT, ING) at the last idle look
        self.lost = {}                     # port key: bytes counted, neither queued nor gone
        self.by_switch = {}
        for k in self.switch_ports:
            self.by_switch.setdefault(self.ports[k]["node"], []).append(k)
        self.reconciled = 0
        self.drops_seen = list(mv[DROPS::W])

    # -- the gate of an egress queue follows its peer's request and the watchdog --
    def _apply(self, egress, now):
        want = self.requested[egress] is not None and not self.wd[egress].mitigating
        if want == (self.closed[egress] is not None):
            return
        self.gates.set(egress, want)
        if want:
            self.closed[egress] = now
            self.mv[self.ports[egress]["peer_key"] * W + PAUSES] += 1
        else:
            self.closed_s[egress] += now - self.closed[egress]
            self.mv[egress * W + PAUSED_NS] += int((now - self.closed[egress]) * 1e9)
            self.closed[egress] = None

    def _request(self, end, now):
        """Interface end ``end`` asks its peer's queue to pause or not."""
        egress = self.ports[end]["peer_key"]
        ing = self.pause.get(end)
        asked = (end in self.storming) or (ing is not None and ing.paused_since is not None)
        if not asked:
            self.requested[egress] = None
        elif self.requested[egress] is None:
            self.requested[egress] = now
        self._apply(egress, now)

    def poll(self, now):
        """One look at every ingress buffer; returns how long to wait before the
        next: ``poll_s`` while any port is past half its xoff or pauses, else
        ``idle_s`` (a port at link rate needs longer than that to climb the
        other half: it is seen on the way)."""
        mv = self.mv
        occ = [i - c for i, c in zip(mv[ING::W], mv[CORR::W])]
        busy = False
        for k in self.switch_ports:
            busy = busy or occ[k] * 2 >= self.pause[k].xoff or \
                self.pause[k].paused_since is not None
            ev = self.pause[k].update(occ[k], now)
            if ev is None:
                continue
            if ev == "resume":
                up = self.ports[k]["peer_key"]
                cross, last = mv[k * W + CROSS], mv[up * W + LAST]
                start, _ = self.pause[k].episodes[-1]
                held = not any(t >= start for _, t in self.wd[up].events)
                if cross and held:        # the gate stayed shut all the pause: it stopped
                    self.reactions.append((k, max(0, last - cross)))
                mv[k * W + CROSS] = 0
            self._request(k, now)
        self.blame_drops()
        if now >= self.next_wd:
            self.next_wd = now + self.pc.wd_poll_s
            self.watch(now)
        if self.backlogs is not None:
            try:
                backlog = self.backlogs.step()
            except OSError as e:                 # a port's answer late: the next read
                self.gates._error(f"qdisc read: {e}")
            else:
                if backlog is not None:
                    self.reconcile(backlog)
        return self.pc.poll_s if busy or self.storming else self.idle_s

    def blame_drops(self):
        """Ingress drops since the last look are the pause model's, come too late:
        an upstream paused within the reaction time the headroom covers sends no
        more than the headroom (``E_LATE``; the verdict counts them as emulation
        drops).  Only an upstream that ignores pauses (the watchdog's
        ``forward``) overflows a port by the network's doing."""
        drops = list(self.mv[DROPS::W])
        if drops == self.drops_seen:
            return
        for k in self.switch_ports:
            new = drops[k] - self.drops_seen[k]
            up = self.ports[k]["peer_key"]
            if new > 0 and not (self.wd[up].mitigating and self.pc.wd_action == "forward"):
                self.mv[k * W + LATE] += new
        self.drops_seen = drops

    def watch(self, now):
        mv = self.mv
        stuck = {}
        for k, wd in self.wd.items():
            if self.requested[k] is None and not wd.mitigating:
                wd.stuck = False
                wd.last_sent = mv[k * W + EG_OUT]
                continue
            backlog = mv[k * W + EG_IN] - mv[k * W + EG_OUT]
            ev = wd.update(now, self.requested[k], backlog, mv[k * W + EG_OUT])
            if ev == "storm" and self.pc.wd_action == "drop":
                mv[k * W + FLAGS] |= pfc.FLAG_DROP
            elif ev == "restore":
                mv[k * W + FLAGS] &= ~pfc.FLAG_DROP
            if ev:
                self._apply(k, now)
            if wd.stuck and self.ports[k]["kind"] == "switch":
                peer = self.ports[self.ports[k]["peer_key"]]
                if peer["kind"] == "switch":
                    stuck.setdefault(self.ports[k]["node"], set()).add(peer["node"])
        if self.backlogs is not None:
            self.backlogs.start()               # read a few ports at each look (poll)
        self.deadlocks.update(lossless.paused_cycle(stuck), now)

    def reconcile(self, backlog):
        """Forget counts of frames no queue holds any more.

        A frame lost inside a switch (an injected loss at its egress, a port
        that went down before the reroute) was counted into its ingress port
        and never queued: a port whose count exceeds what it has queued by more
        than two frames at two looks in a row gets the smaller excess, less one
        frame that may still be inside Open vSwitch, corrected (``E_CORR``, the
        agent's own word: no race with the programs).  A link
        set down purges its queue, and those frames never reach the far end: a
        switch whose every queue was empty at two looks in a row, with the same
        counts, holds nothing, and its counts are set to match."""
        mv = self.mv
        frame = self.cfg["frame"]
        for k in self.switch_ports:
            gap = mv[k * W + ING] - mv[k * W + CORR] - mv[k * W + QUEUED]
            before = self.lost.get(k, 0)
            if gap > 2 * frame and before > 2 * frame:
                fix = min(gap, before) - frame
                mv[k * W + CORR] += fix
                self.reconciled += 1
                gap -= fix
            self.lost[k] = gap
        for node, keys in self.by_switch.items():
            if any(backlog.get(k, 1) for k in keys):
                for k in keys:
                    self.idle.pop(k, None)
                continue
            for k in keys:
                now = (mv[k * W + EG_IN], mv[k * W + EG_OUT], mv[k * W + ING],
                       mv[k * W + QUEUED])
                if self.idle.get(k) == now and (now[0] != now[1] or
                                                now[2] != mv[k * W + CORR] or now[3]):
                    mv[k * W + EG_IN] = now[1]
                    mv[k * W + CORR] = now[2]
                    mv[k * W + QUEUED] = 0
                    self.reconciled += 1
                    now = (now[1], now[1], now[2], 0)
                self.idle[k] = now

    def storm(self, end, on, now):
        if on and end not in self.storming:
            self.storming[end] = now
        elif not on and end in self.storming:
            self.storms[end].append((self.storming.pop(end), now))
        self._request(end, now)

    def report(self, now, t0):
        """The counters of every interface end (see docs/lossless.md)."""
        mv, rate = self.mv, {k: p["rate_bps"] for k, p in self.ports.items()}
        out = {}
        for k, p in self.ports.items():
            sent_eps = list(self.pause[k].episodes) if k in self.pause else []
            if k in self.pause and self.pause[k].paused_since is not None:
                sent_eps.append((self.pause[k].paused_since, now))
            storms = self.storms[k] + ([(self.storming[k], now)] if k in self.storming else [])
            peer = p["peer_key"]
            frames = 0 if self.pc.mode == FlowControl.CREDIT else sum(
                lossless.pause_frames(b - a, rate[peer], self.pc.quanta)
                for a, b in sent_eps + storms)
            closed = self.closed_s[k] + (now - self.closed[k] if self.closed[k] else 0.0)
            e = {"peer": self.ports[peer]["node"], "pauses_sent": len(sent_eps) + len(storms),
                 "longest_pause_s": round(max((b - a for a, b in sent_eps), default=0.0), 4),
                 "pause_frames_sent": frames, "paused_s": round(closed, 4),
                 "ingress_drops": mv[k * W + DROPS],
                 "late_pause_drops": mv[k * W + LATE],
                 "watchdog_drops": mv[k * W + pfc.E_WD_DROPS // 8],
                 "watchdog": [(ev, round(t - t0, 4)) for ev, t in self.wd[k].events],
                 "ecn_marks": mv[k * W + pfc.E_MARKS // 8]}
            if k in self.pause:
                peak = mv[k * W + pfc.E_PEAK // 8]
                e.update({"xoff": p["xoff"], "headroom": p["headroom"], "peak_bytes": peak,
                          "headroom_used": max(0, peak - p["xoff"])})
            if storms:
                e["storms"] = [(round(a - t0, 4), round(b - t0, 4)) for a, b in storms]
            out[p["name"]] = e
        for k, p in self.ports.items():          # frames received = the peer's sent
            out[p["name"]]["pause_frames_received"] = \
                out[self.ports[p["peer_key"]]["name"]]["pause_frames_sent"]
        storms = []
        for k, p in self.ports.items():
            egress = p["peer_key"]
            for a, b in self.storms[k] + ([(self.storming[k], None)] if k in self.storming
                                          else []):
                det = next((t for ev, t in self.wd[egress].events if ev == "storm" and t >= a),
                           None)
                res = next((t for ev, t in self.wd[egress].events
                            if ev == "restore" and b is not None and t >= b), None)
                storms.append({"end": p["name"], "queue": self.ports[egress]["name"],
                               "start": round(a - t0, 4),
                               "duration_s": None if b is None else round(b - a, 4),
                               "detected_after_s": None if det is None or (b is not None and
                                                                           det > b)
                               else round(det - a, 4),
                               "restored_after_stop_s": None if res is None
                               else round(res - b, 4)})
        return {"ports": out, "storms": storms, "t0_ns": int(t0 * 1e9),
                "reactions": [{"port": self.ports[k]["name"], "ns": ns,
                               "frames": round(ns / 1e9 / lossless.frame_time_s(
                                   rate[self.ports[k]["peer_key"]], self.cfg["frame"]), 2)}
                              for k, ns in self.reactions],
                "deadlocks": [{"cycle": c["cycle"], "t": round(c["t"] - t0, 4)}
                              for c in self.deadlocks.named],
                "gate_errors": self.gates.errors, "reconciled": self.reconciled}


def main(argv):
    with open(argv[0]) as f:
        cfg = json.load(f)
    size = -(-cfg["map_bytes"] // mmap.PAGESIZE) * mmap.PAGESIZE
    mm = mmap.mmap(cfg["map_fd"], size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    mv = memoryview(mm).cast("q")
    gates = Gates(cfg["ports"], cfg["frame"])
    try:        # a pause is a link-level reaction: run before the datapath's threads
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(cfg.get("rt_priority", 10)))
    except (OSError, AttributeError):
        pass    # without real-time scheduling the reaction is longer: it is measured
    agent = Agent(cfg, mv, gates, backlogs=Backlogs(cfg["ports"]))
    t0 = time.monotonic()
    agent.next_wd = t0
    stdin = sys.stdin.buffer.raw
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    try:
        return loop(agent, gates, stdin, t0)
    finally:                    # whatever ended the model, no gate stays shut
        for key, since in agent.closed.items():
            if since is not None:
                gates.set(key, False)


def loop(agent, gates, stdin, t0):
    buf = b""
    wait = agent.pc.poll_s
    while True:
        ready, _, _ = select.select([stdin], [], [], wait)
        now = time.monotonic()
        if ready:
            chunk = os.read(stdin.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                words = line.decode().split()
                if words[:1] == ["storm"]:
                    agent.storm(int(words[1]), words[2] == "on", now)
                elif words[:1] == ["exit"]:
                    with open(words[1], "w") as f:
                        json.dump(agent.report(time.monotonic(), t0), f)
                    return 0
        wait = agent.poll(now)
        gates.drain()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
