"""The lossless fabric of a run: PFC attached to every link end, the pause agent,
and the counters in the run's results (dataplane.lossless.pfc has the mechanism)."""

import json
import os
import select
import struct
import sys

from emulator.dataplane import bpf
from emulator.dataplane.lossless import pfc as pfc_bpf
from emulator.dataplane.lossless.ecn import record_marks
from emulator.dataplane.lossless.ecnq import Attached
from emulator.dataplane.lossless.pfc import (
    E_ING_DROPS,
    E_LATE,
    E_LIMIT,
    E_MARKS,
    E_WD_DROPS,
    E_XOFF,
    ENTRY_SIZE,
    HOST_QUEUE,
    SWITCH_QUEUE,
    WORDS,
    add_lossless_class,
    programs,
)
from emulator.dataplane.ovs.controller_proc import REPO
from emulator.dataplane.system import ovs
from emulator.dataplane.system.netlink import ns_sockets
from emulator.dataplane.system.proc import PIPE, Child, TimedOut
from emulator.errors import RunFailed
from emulator.fabric import lossless
from emulator.fabric.lossless import deadlock_plan
from lab.modes import EcnAt, FlowControl
from traffic.roce.frames import frame_len_for_mtu


class Pfc(Attached):
    """PFC over every link of a running fabric: programs attached on both ends of
    every link, thresholds in the map, the agent process polling it.

    ``ends``: [{key, name, node, kind, ifname, netns, rate_bps, peer_key, base,
    stamp, phase}] in key order (each switch's ports consecutive, from ``base``;
    ``phase``: its egress starts a routing phase).  ``classes`` lossless
    priorities: the map holds a block of entries per class, the agent models
    each class of each end as an end of its own."""

    def __init__(self, ends, frame, cfg=lossless.PfcConfig(), ecn=None, min_len=0,
                 env=None, workdir=None, classes=1):
        super().__init__()
        self.ends = ends
        self.classes = classes
        self.frame = frame
        self.cfg = cfg
        self.ecn = ecn
        self.min_len = min_len
        self.env = env
        self.workdir = workdir
        self.agent = None
        self.by_name = {e["name"]: e for e in ends}

    @classmethod
    def for_session(cls, session, cfg=lossless.PfcConfig()):
        classes = lossless.routing_classes(session.fabric, session.routing)
        phases = lossless.phase_ports(session.topo) if classes > 1 else set()
        ends, host_ends, key_of = [], [], {}
        for sw in session.topo["switches"]:
            base = len(ends)
            for local, p in enumerate(sw["ports"]):
                if local >= 255:
                    raise RunFailed(f"lossless: {sw['name']} has more than 255 ports")
                key_of[(sw["name"], p["port"])] = len(ends)
                ends.append({"key": len(ends), "node": sw["name"], "kind": "switch",
                             "name": f"{sw['name']}:{p['name']}", "ifname": p["intf"],
                             "netns": session.net.switch_netns(sw["name"]),
                             "rate_bps": p["rate_bps"], "base": base, "stamp": local + 1,
                             "phase": (sw["name"], p["port"]) in phases,
                             "peer": (p["peer"], p["peer_port"]), "peer_kind": p["peer_kind"]})
        for e in list(ends):
            peer, port = e["peer"]
            if e["peer_kind"] != "host":
                e["peer_key"] = key_of[(peer, port)]
                continue
            key = len(ends) + len(host_ends)
            host_ends.append({"key": key, "node": peer, "kind": "host", "name": f"{peer}:{port}",
                              "ifname": port, "rate_bps": e["rate_bps"], "base": -1,
                              "netns": f"/proc/{session.net.hosts[peer].pid}/ns/net",
                              "stamp": 0, "phase": False, "peer_key": e["key"]})
            e["peer_key"] = key
        ends += host_ends
        for e in ends:
            e.pop("peer", None)
            e.pop("peer_kind", None)
        ecn = session.ecn if session.ecn is not None and session.ecn.at == EcnAt.DEQUEUE else None
        pfc = cls(ends, session.net.frame, cfg, ecn=ecn,
                  min_len=frame_len_for_mtu(session.mtu) // 2, env=session.child_env(),
                  workdir=session.dir, classes=classes)
        pfc.install()
        session.progress(f"lossless fabric ({cfg.mode}) on {len(ends)} interface ends: "
                         + pfc.describe())
        if classes > 1:
            session.progress(f"lossless priorities {pfc.priorities()}, one per routing phase "
                             f"of {session.routing} routing: a frame leaving by one of "
                             f"{len(phases)} global link ends moves to the next")
        return pfc

    def priorities(self):
        """The lossless priorities, one per class (the first is the RoCE class's)."""
        return [lossless.LOSSLESS_PRIORITY + c for c in range(self.classes)]

    def describe(self):
        rates = sorted({e["rate_bps"] for e in self.ends if e["kind"] == "switch"})
        t = lossless.thresholds(rates[0], self.frame, self.cfg) if rates else {}
        return (f"xoff {t.get('xoff')} B, xon {t.get('xon')} B, headroom {t.get('headroom')} B "
                f"per ingress port at {rates[0] / 1e6:g} Mbit/s; watchdog "
                f"{self.cfg.wd_detect_s * 1e3:g}/{self.cfg.wd_restore_s * 1e3:g} ms "
                f"({self.cfg.wd_action})" if rates else "no switch ports")

    def install(self):
        n = len(self.ends)
        self.map = bpf.Map(ENTRY_SIZE, n * self.classes, flags=bpf.F_MMAPABLE)
        self.chain = bpf.prog_array(n)
        try:
            for e in self.ends:
                if e["kind"] == "switch":
                    t = lossless.thresholds(e["rate_bps"], self.frame, self.cfg)
                    e.update(t)
                    entry = [0] * WORDS
                    entry[E_XOFF // 8], entry[E_LIMIT // 8] = t["xoff"], t["limit"]
                    for c in range(self.classes):
                        self.map.update(c * n + e["key"], struct.pack(f"<{WORDS}q", *entry))
            with ns_sockets() as sock:
                for e in self.ends:
                    ipr = sock(e["netns"])
                    idx = ipr.link_lookup(ifname=e["ifname"])[0]
                    e["ifindex"] = idx
                    for c in range(1, self.classes):
                        add_lossless_class(ipr, idx, e["rate_bps"], self.frame,
                                           SWITCH_QUEUE if e["kind"] == "switch"
                                           else HOST_QUEUE, c)
                    up = self.ends[e["peer_key"]]
                    with programs(
                            self.map, e["key"], e["base"] if e["kind"] == "switch" else -1,
                            up["key"], up["base"] if up["kind"] == "switch" else -1,
                            e["stamp"], self.ecn if up["kind"] == "switch" else None,
                            self.min_len, self.chain, classes=self.classes, nends=n,
                            phase=e["phase"]) as fds:
                        self.attach_tc(ipr, idx, e["netns"], e["ifname"], fds["pfc_egress"],
                                       f"pfc_eg{e['key']}")
                        self.attach_xdp(ipr, idx, e["netns"], e["ifname"],
                                        fds["pfc_ingress"], f"pfc_in{e['key']}")
                        self.slots[(e["netns"], e["ifname"])] = e["key"]
            self._start_agent()
        except Exception:
            self.remove()
            raise
        return self

    def _start_agent(self):

        path = os.path.join(self.workdir, "pfc-agent.json")
        cfg = {"map_fd": self.map.fd, "map_bytes": ENTRY_SIZE * len(self.ends) * self.classes,
               "frame": self.frame, "ports": self.class_ends(),
               "pfc": {k: getattr(self.cfg, k) for k in self.cfg.__dataclass_fields__}}
        with open(path, "w") as f:
            json.dump(cfg, f)
        self.agent = Child.start(
            [sys.executable, "-m", "emulator.dataplane.lossless.pfc_agent", path],
            "the PFC agent", cwd=REPO, stdin=PIPE, stdout=PIPE, pass_fds=(self.map.fd,),
            env=self.env)
        ready, _, _ = select.select([self.agent.stdout], [], [], 20)
        line = self.agent.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            self.agent.kill(timeout=5)
            raise RunFailed("the PFC agent did not start (see the run's output)")

    def class_ends(self):
        """The agent's ends: each end once per lossless class, class c's keys, names
        and nodes offset (``NAME#c``, ``NODE#c``: a cycle of stuck paused queues is
        one class's, as a buffer dependency between classes only climbs) and its
        gate the class's own."""
        n, out = len(self.ends), []
        for c in range(self.classes):
            tag = f"#{c}" if c else ""
            for e in self.ends:
                out.append(e | {"key": c * n + e["key"], "peer_key": c * n + e["peer_key"],
                                "name": e["name"] + tag, "node": e["node"] + tag, "cls": c})
        return out

    def storm(self, end_name, on):
        """Interface end ``end_name`` (``node:port``) pauses its peer forever, or stops."""
        if self.cfg.mode != FlowControl.PFC:
            raise RunFailed("a PFC storm needs flow_control pfc (credits have no pause "
                            "frames to storm)")
        self._command(f"storm {self.by_name[end_name]['key']} {'on' if on else 'off'}")

    def check(self):
        """RunFailed if the agent is gone: the pauses are no longer modelled."""
        if self.agent is None or self.agent.poll() is not None:
            raise RunFailed("the PFC agent exited"
                            + (f" (status {self.agent.returncode})" if self.agent else "")
                            + ": the lossless fabric is no longer modelled")

    def _command(self, line):
        self.check()
        self.agent.stdin.write(line.encode() + b"\n")
        self.agent.stdin.flush()

    def stop_agent(self):
        """The agent's counters (dict), the agent stopped."""
        if self.agent is None:
            return None
        path = os.path.join(self.workdir, "pfc-counters.json")
        try:
            self._command(f"exit {path}")
            self.agent.wait(timeout=10)
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError, TimedOut) as e:
            raise RunFailed(f"the PFC agent's counters: {e}")
        finally:
            self.agent.kill(timeout=5)
            self.agent = None

    def marks(self):
        """{switch end name: packets it marked CE} (dequeue ECN in the gate's XDP)."""
        return {e["name"]: self._words(e["key"])[E_MARKS // 8]
                for e in self.ends if e["kind"] == "switch"}

    def drops(self):
        """``drop_counts``' first part: what the network lost."""
        return self.drop_counts()[0]

    def drop_counts(self):
        """({interface end, named as dataplane.observe.counters names queues: frames of the
        lossless class the network lost on the link it sends on}, {the same ends:
        the emulator's}), each map entry read once.  The network's: ingress drops at
        the far end (headroom exceeded) the pause agent did not blame on its own
        lateness, and the watchdog's drops of its queue; the emulator's: those it
        did (pfc_agent.Agent.blame_drops)."""
        self.check()
        words = {e["key"]: self._words(e["key"]) for e in self.ends}
        network, late = {}, {}
        for e in self.ends:
            up = self.ends[e["peer_key"]]
            name = up["ifname"] if up["kind"] == "switch" else f"{up['node']}:{up['ifname']}"
            w = words[e["key"]]
            n = w[E_LATE // 8]
            network[name] = (network.get(name, 0) + w[E_ING_DROPS // 8] - n
                             + words[up["key"]][E_WD_DROPS // 8])
            late[name] = late.get(name, 0) + n
        return network, late

    def live(self):
        """[(end name, buffer bytes, pauses it sent, s its queue was paused, ingress drops,
        watchdog drops)] now, for telemetry (pauses count when they begin, paused time
        when they end)."""
        self.check()
        out = []
        for e in self.ends:
            w = self._words(e["key"])
            out.append((e["name"], w[pfc_bpf.E_ING // 8] - w[pfc_bpf.E_CORR // 8], w[pfc_bpf.E_PAUSES // 8],
                        w[pfc_bpf.E_PAUSED_NS // 8] / 1e9, w[pfc_bpf.E_ING_DROPS // 8],
                        w[pfc_bpf.E_WD_DROPS // 8]))
        return out

    def _words(self, key):
        """End ``key``'s map words, summed over the lossless classes."""
        n = len(self.ends)
        rows = [struct.unpack(f"<{WORDS}q", self.map.lookup(c * n + key))
                for c in range(self.classes)]
        return tuple(map(sum, zip(*rows)))

    def close(self, session):
        """Counters into ``session.results["lossless"]``, then everything detached."""
        try:
            counters = self.stop_agent()
            if self.ecn is not None:
                record_marks(session, self)
            session.results["lossless"] = summarize(counters, self)
        except Exception as e:              # teardown goes on: the fabric must go
            session.teardown_errors.append(str(e))
        finally:
            session.teardown_errors += [f"PFC: {e}" for e in self.remove()]

    def remove(self):
        if self.agent is not None:
            self.agent.kill(timeout=5)
        return super().remove()


def summarize(counters, pfc):
    """``results["lossless"]``: the settings, per interface end the counters that
    moved, and the run's totals (reaction in frame times, median and max)."""
    ports = counters["ports"]
    moved = {n: {k: v for k, v in c.items() if v not in (0, [], 0.0)}
             for n, c in ports.items()
             if c["pause_frames_sent"] or c["pause_frames_received"] or c["ingress_drops"]
             or c["watchdog"] or c["watchdog_drops"]}
    frames = sorted(r["frames"] for r in counters["reactions"])
    thresholds = {e["name"]: {k: e[k] for k in ("xoff", "xon", "headroom", "limit")}
                  for e in pfc.ends if e["kind"] == "switch"}
    return {
        "flow_control": pfc.cfg.mode, "lossless_priority": lossless.LOSSLESS_PRIORITY,
        "lossless_priorities": pfc.priorities(),
        "settings": {k: getattr(pfc.cfg, k) for k in pfc.cfg.__dataclass_fields__},
        "thresholds": dict(sorted(thresholds.items())[:1]) | {"ports": len(thresholds)},
        "pause_frames": sum(c["pause_frames_sent"] for c in ports.values()),
        "pauses": sum(c["pauses_sent"] for c in ports.values()),
        "paused_s_max": max((c["paused_s"] for c in ports.values()), default=0.0),
        "longest_pause_s": max((c["longest_pause_s"] for c in ports.values()), default=0.0),
        "ingress_drops": sum(c["ingress_drops"] for c in ports.values()),
        "late_pause_drops": sum(c["late_pause_drops"] for c in ports.values()),
        "watchdog_drops": sum(c["watchdog_drops"] for c in ports.values()),
        "headroom_used_max": max((c.get("headroom_used", 0) for c in ports.values()),
                                 default=0),
        "watchdog_events": sorted(
            ((ev, t, n) for n, c in ports.items() for ev, t in c["watchdog"]),
            key=lambda x: x[1]),
        "deadlocks": counters["deadlocks"], "storms": counters["storms"],
        "agent_t0_ns": counters["t0_ns"],          # the times above count from it
        "reaction_frames": {"count": len(frames),
                            "median": frames[len(frames) // 2] if frames else None,
                            "p95": frames[int(0.95 * (len(frames) - 1))] if frames else None,
                            "max": frames[-1] if frames else None},
        "gate_errors": counters["gate_errors"],
        "ports": moved,
    }


MISROUTE_COOKIE = 0xDEAD10C


def misroute(injector, on):
    """Install (or remove) fabric.lossless.deadlock_plan's routes on the running
    fabric: OpenFlow flows above the controller's (priority 1200), under a
    cookie of their own; logged as a fault event."""
    s, t = injector.s, injector.clock()
    routes, _ = deadlock_plan(s.topo)
    by_name = {sw["name"]: sw for sw in s.topo["switches"]}
    by_switch = {}
    for name, in_ports, dsts, out in routes:
        number = {p["name"]: p["port"] for p in by_name[name]["ports"]}
        by_switch.setdefault(name, "")
        by_switch[name] += "".join(
            f"cookie={MISROUTE_COOKIE:#x},priority=1200,ip,in_port={number[i]},"
            f"nw_dst={d},actions=output:{number[out]}\n" for i in in_ports for d in dsts)
    for name, lines in by_switch.items():
        target = s.net.ovs(name).target(by_name[name]["bridge"])
        args = ["add-flows", target, "-"] if on else \
            ["del-flows", target, f"cookie={MISROUTE_COOKIE:#x}/-1"]
        try:
            ovs.ofctl("-O", "OpenFlow13", *args, input=lines if on else None, timeout=20)
        except RunFailed as e:
            raise RunFailed(f"deadlock routes on {name}: {e}") from None
    return injector._log("deadlock" if on else "deadlock_stop", "routes", t,
                         switches=sorted(by_switch))
