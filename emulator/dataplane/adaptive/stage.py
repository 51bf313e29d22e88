"""The run's adaptive-routing stage: maps, programs on the ports, the detection
model's news, and the decisions' counts at the end (dataplane.adaptive.model
has the model; dataplane/bpf/ar.bpf.c the programs).

Per tracked port (a candidate of some route): ``ar_egress`` on its tc egress and
``ar_ingress`` counting out on the link's far end.  Per deciding port:
``ar_ingress`` deciding.  An interface that is both gets one program doing both.
Where the lossless fabric or dequeue ECN marking already holds an interface's
XDP hook or tc egress, this stage's program is chained after theirs (their
program tail-calls it; a second tc filter).
"""

import struct
import time

from emulator.dataplane import bpf
from emulator.dataplane.adaptive import model
from emulator.dataplane.adaptive.repair import RepairFollower
from emulator.dataplane.links import shaping
from emulator.dataplane.lossless.ecnq import XDP_FLAGS_SKB_MODE, detach
from emulator.dataplane.system.netlink import NetlinkError, ns_sockets
from emulator.errors import EnvironmentProblem, RunFailed
from emulator.fabric.addressing import switch_intf
from lab.modes import LB, Failover
from traffic.roce.frames import frame_len_for_mtu

PORT = bpf.Layout("ar_port", model.PORT_FIELDS)
CONTROL = bpf.Layout("ar_ctl", model.CONTROL_FIELDS)
CONFIG = bpf.Layout("ar_cfg", model.CONFIG_FIELDS)
TC_EGRESS = 0xFFFFFFF3
TC_PRIO = 1                      # before the lossless/ECN filter (prio 49152 by default)


def session_ports(session):
    """The running fabric's switch ports as a stage takes them: ``ifaces``
    {(switch, port): (netns, ifname)}, ``far`` (their links' other ends),
    ``rates`` {(switch, port): bit/s} and ``chain`` (the interfaces whose XDP hook
    PFC or dequeue marking holds: (netns, ifname) -> program array slot)."""
    by_name = {sw["name"]: sw for sw in session.topo["switches"]}
    ifaces, far, rates = {}, {}, {}
    for sw in session.topo["switches"]:
        for p in sw["ports"]:
            key = (sw["name"], p["port"])
            ifaces[key] = (session.net.switch_netns(sw["name"]), p["intf"])
            rates[key] = p["rate_bps"]
            if p["peer_kind"] == "host":
                far[key] = (f"/proc/{session.net.hosts[p['peer']].pid}/ns/net",
                            p["peer_port"])
            else:
                far[key] = (session.net.switch_netns(p["peer"]),
                            switch_intf(by_name[p["peer"]]["bridge"], p["peer_port"]))
    chain = {}
    for owner in (getattr(session, "pfc", None), getattr(session, "marker", None)):
        if owner is not None and hasattr(owner, "chain_slots"):
            chain.update(owner.chain_slots())
    return ifaces, far, rates, chain


def _index(ipr, ifname):
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise RunFailed(f"adaptive routing: no interface {ifname}")
    return found[0]


class AdaptiveStage:
    """Adaptive routing (``mode``: dlb or packet) on a running fabric.

    ``ifaces``: {(switch, port): (netns path or None, ifname)} of switch ports
    and ``far``: {(switch, port): (netns, ifname)} of their links' other ends;
    ``rates`` {(switch, port): bit/s}; ``dscp``: the class decided."""

    FOLLOWS_REPAIR = True               # its candidates follow the controller's pushes
    RESCUES = True                      # a dead port's egress decides its frames again

    def __init__(self, mode, topo, ifaces, far, rates, frame, queue_ms, dscp=26,
                 flowlet_frames=model.FLOWLET_FRAMES, chain=None, plan=None):
        self.mode = mode
        self.topo = topo
        self.plan = plan or model.plan(topo)
        self.ifaces, self.far, self.rates = ifaces, far, rates
        self.frame, self.queue_ms, self.dscp = frame, queue_ms, dscp
        self.flowlet_frames = flowlet_frames
        self.chain = chain              # another feature's hooks: (netns, ifname) -> slot
        self.keys = {tp: k for k, tp in enumerate(self.plan["tracked"])}
        self.sw_index = {s["name"]: i for i, s in enumerate(topo["switches"])}
        self.maps = {}
        self.attached = []              # (kind, netns, ifname) for detach
        self.slots = []                 # (prog array, key) filled in a chain
        self.downs = {}                 # port name -> ns it was told down
        self.started_ns = None
        self.routes = dict(self.plan["routes"])   # as installed now (None: withdrawn)
        self.follower = None            # adaptive.repair: the control plane's pushes
        self.settled = {}               # key -> bytes decided towards it never sent, counted
        self.rescues = {}               # key -> frames rescued at its egress, counted
        self.cuts = []                  # per dead port come back: what its cut lost

    @classmethod
    def for_session(cls, session):
        ifaces, far, rates, chain = session_ports(session)
        stage = cls(cls.session_mode(session), session.topo, ifaces, far, rates,
                    frame_len_for_mtu(session.mtu), session.net.queue_ms,
                    flowlet_frames=session.flowlet_frames or model.FLOWLET_FRAMES,
                    chain=chain).install()
        session.progress(stage.describe())
        log = getattr(session.controller, "log_path", None)
        if cls.FOLLOWS_REPAIR and session.failover != Failover.NONE and log:
            stage.follower = RepairFollower(stage, session.topo, log).start()
        return stage

    @staticmethod
    def session_mode(session):
        return session.lb

    def describe(self):
        p = self.plan
        n_sw = len({sw for sw, _ in p["deciders"]})
        rate = min((self.rates[t] for t in p["tracked"]), default=None)
        t = model.timers(self.frame, rate, self.flowlet_frames) if rate else None
        how = (f"flowlet timer {self.flowlet_frames} frame times "
               f"({t['flowlet_ns'] / 1e6:.1f} ms at {rate / 1e6:g} Mbit/s)"
               if self.mode == LB.DLB and t
               else "shortest local queue per packet")
        return (f"adaptive routing in the data plane ({self.mode}): {n_sw} switches decide "
                f"{len(p['routes'])} routes over {len(p['tracked'])} ports; {how}")

    # ---- install -----------------------------------------------------------

    def _port_entry(self, key):
        rate = self.rates[key]
        t = model.timers(self.frame, rate)
        limit = shaping.tbf_params(rate, self.queue_ms, self.frame)["limit"]
        values = dict.fromkeys(model.PORT_NAMES, 0)
        values.update(mark=model.mark(key[1]), frame=self.frame, half_ns=t["half_ns"],
                      load_full=t["load_full"], limit=limit)
        return PORT.pack_fields(**values)

    def _base(self):
        """The program config every port of this stage starts from."""
        return dict(sw=0, up_key=-1, decide=0, mode=model.MODES.get(self.mode, 0),
                    dscp=self.dscp, flowlet_ns=0, pend_ns=0, key=-1,
                    move_band=model.MOVE_BAND)

    def _decider_rate(self, sw):
        """The rate a decider of ``sw`` times its flowlets by: its tracked ports'
        slowest (the switch's slowest port if it tracks none)."""
        rate = min(r for (s, _), r in self.rates.items() if s == sw)
        return min((self.rates[t] for t in self.plan["tracked"] if t[0] == sw), default=rate)

    def _configs(self):
        """{(netns, ifname): (cfg values for the ingress program)} and [(netns, ifname,
        key)] for the egress program."""
        xdp, base = {}, self._base()
        for tp, k in self.keys.items():
            xdp.setdefault(self.far[tp], dict(base))["up_key"] = k
        for sw, port in self.plan["deciders"]:
            t = model.timers(self.frame, self._decider_rate(sw), self.flowlet_frames)
            xdp.setdefault(self.ifaces[(sw, port)], dict(base)).update(
                sw=self.sw_index[sw], decide=1, flowlet_ns=t["flowlet_ns"],
                pend_ns=t["pend_ns"])
        tc = [(*self.ifaces[tp], k) for tp, k in self.keys.items()]
        return xdp, tc

    WHAT = "adaptive routing"            # in the kernel's refusal

    def _maps(self):
        """The stage's maps, empty: ports, their controls, routes, flowlets."""
        n_ports = max(1, len(self.keys))
        return {
            "ar_ports": bpf.Map(PORT.size, n_ports),
            "ar_ctls": bpf.Map(CONTROL.size, n_ports),
            "ar_routes": bpf.Map(model.ROUTE.size, max(1, len(self.plan["routes"])),
                                 kind=bpf.maps.MAP_HASH, key_size=model.ROUTE_KEY.size),
            "ar_flowlets": bpf.Map(model.FLOWLET_SIZE,
                                   max(1, len(self.topo["switches"]) * model.FLOWSETS)),
        }

    def _fill_routes(self):
        for key, ports in self.plan["routes"].items():
            self._write_route(key, ports)

    def install(self):
        """Maps made and filled, programs attached; on any failure all removed."""
        self.maps = self._maps()
        try:
            for tp, k in self.keys.items():
                self.maps["ar_ports"].update(k, self._port_entry(tp))
            self._fill_routes()
            self._attach(*self._configs())
        except Exception as e:
            self.remove()
            if isinstance(e, NetlinkError):
                raise EnvironmentProblem(f"the kernel refused to attach {self.WHAT} ({e}): "
                                         "it needs tc clsact with cls_bpf and XDP")
            raise
        self.started_ns = time.monotonic_ns()
        return self

    def _load(self, values, program):
        return bpf.load("ar", CONFIG.pack_fields(**values), CONFIG, self.maps,
                        value_layouts=[PORT, CONTROL], programs=[program])

    def _attach(self, xdp, tc):
        base = self._base()
        with ns_sockets() as sock:
            for (ns, ifname), values in sorted(xdp.items(), key=lambda kv: kv[0][1]):
                ipr = sock(ns)
                idx = _index(ipr, ifname)
                with self._load(values, "ar_ingress") as fds:
                    slot = (self.chain or {}).get((ns, ifname))
                    if slot is not None:              # after the other feature's program
                        prog_array, key = slot
                        prog_array.update(key, struct.pack("<I", fds["ar_ingress"]))
                        self.slots.append(slot)
                        continue
                    ipr.link("set", index=idx,
                             xdp={"attrs": [("IFLA_XDP_FD", fds["ar_ingress"]),
                                            ("IFLA_XDP_FLAGS", XDP_FLAGS_SKB_MODE)]})
                    self.attached.append(("xdp", ns, ifname))
            for ns, ifname, key in tc:
                ipr = sock(ns)
                idx = _index(ipr, ifname)
                self._set_ifindex(key, idx)
                sw = self.sw_index[self.plan["tracked"][key][0]]
                with self._load(dict(base, key=key, sw=sw), "ar_egress") as fds:
                    try:
                        ipr.tc("add", "clsact", index=idx)
                        self.attached.append(("tc", ns, ifname))
                    except NetlinkError as e:
                        if e.code != 17:              # EEXIST: another feature's clsact
                            raise
                        self.attached.append(("tcfilter", ns, ifname))
                    ipr.tc("add-filter", "bpf", index=idx, handle=2, fd=fds["ar_egress"],
                           name=f"ar_eg{key}", parent=TC_EGRESS, classid=1,
                           direct_action=True, prio=TC_PRIO)

    def _set_ifindex(self, key, idx):
        """Port entry ``key``'s interface index (where its egress rescues to)."""
        m = self.maps["ar_ports"]
        e = dict(zip(model.PORT_NAMES, PORT.unpack(m.lookup(key))))
        m.update(key, PORT.pack_fields(**{**e, "ifindex": idx}))

    def _write_route(self, key, ports):
        m = self.maps["ar_routes"]
        k = model.route_key(self.sw_index[key[0]], key[1])
        if ports is None:
            m.delete(k)
            return
        keys = [self.keys[(key[0], q)] for q in ports]
        m.update(k, model.ROUTE.pack(len(keys), *keys, *[0] * (model.MAX_CAND - len(keys))))

    def set_routes(self, routes):
        """Install ``routes`` {(switch, ip): ports, or None to leave the route to
        the controller's group}; returns the candidates ``withdrawn`` and
        ``restored`` and the ``routes`` changed."""
        out = {"withdrawn": 0, "restored": 0, "routes": 0}
        if "ar_routes" not in self.maps:
            return out
        for key, ports in routes.items():
            old = self.routes.get(key)
            if old == ports:
                continue
            self._write_route(key, ports)
            self.routes[key] = ports
            before, after = set(old or ()), set(ports or ())
            out["withdrawn"] += len(before - after)
            out["restored"] += len(after - before)
            out["routes"] += 1
        return out

    # ---- the detection model's news ---------------------------------------

    def link_news(self, ports, down, t_ns):
        """The detection model tells ports [(switch, port)] they are ``down`` (or
        up) at ``t_ns`` (monotonic ns): the programs skip them from the next frame.
        A port coming up has its queue counted afresh (a purged TBF's bytes never
        come out)."""
        ctl = self.maps.get("ar_ctls")
        if ctl is None:
            return
        for tp in ports:
            k = self.keys.get(tuple(tp))
            if k is None:
                continue
            name = f"{tp[0]}:{tp[1]}"
            c = dict(zip(CONTROL.names, CONTROL.unpack(ctl.lookup(k))))
            corr = c["corr"]                 # kept while down: the last cut's is settled
            if not down:
                e = dict(zip(model.PORT_NAMES, PORT.unpack(self.maps["ar_ports"].lookup(k))))
                corr = e["in"] - e["out"]
                self._settle(k, name, e, c)
            ctl.update(k, CONTROL.pack(int(down), t_ns if down else 0, corr, 0))
            if down:
                self.downs[name] = t_ns

    def _settle(self, k, name, e, c):
        """A dead port comes back: what its cut lost of the frames decided towards
        it, bytes decided that never reached its egress since the last settling,
        split into those decided before the cut (still inside this emulator's
        switch, in Open vSwitch's backlog, when the link went) and those decided
        between the cut and the modelled detection (``late``); the frames that
        reached its egress and never came out at the far end (``egress``: its
        queue at the cut, and what Open vSwitch sent to it before the
        detection); and the frames its egress rescued (decided before the
        detection, reaching the egress after it: sent on by another candidate)."""
        unsent = e["sent"] - e["sent_in"]
        lost = max(0, unsent - self.settled.get(k, 0))
        self.settled[k] = unsent
        rescued = e["rescued"] - self.rescues.get(k, 0)
        self.rescues[k] = e["rescued"]
        if c["down"] and name in self.downs:
            size = e["sent"] / e["frames"] if e["frames"] else self.frame
            late = min(c["late"], lost)
            egress = max(0, e["in"] - e["out"] - c["corr"])
            self.cuts.append({"port": name, "down_ns": self.downs[name],
                              "egress_frames": round(egress / size),
                              "lost_frames": round(lost / size),
                              "before_cut_frames": round((lost - late) / size),
                              "in_detection_frames": round(late / size),
                              "rescued_frames": rescued})

    def rescuing_ends(self):
        """{(netns, ifname)} of the ports whose egress rescues their frames once
        down: a cut keeps them administratively up (their carrier goes with the
        link's other end), or Open vSwitch's sends to them would fail before it."""
        return {self.ifaces[tp] for tp in self.plan["tracked"]} if self.RESCUES else set()

    # ---- reading -------------------------------------------------------------

    def entries(self):
        """{"switch:port": dict of PORT fields} of every tracked port."""
        m = self.maps["ar_ports"]
        return {f"{sw}:{p}": dict(zip(model.PORT_NAMES, PORT.unpack(m.lookup(k))))
                for (sw, p), k in self.keys.items()}

    def flowlet_port(self, sw, src, dst, sport):
        """The port the flowlet of a RoCEv2 flow goes by at ``sw`` (None: no flowlet)."""
        slot = model.flowlet_slot(self.sw_index[sw], src, dst, sport)
        _, key, valid = struct.unpack("<QII", self.maps["ar_flowlets"].lookup(slot))
        return self.plan["tracked"][key][1] if valid else None

    def backlog(self):
        """{"switch:port": bytes queued (in - out - correction)}."""
        ctl = self.maps["ar_ctls"]
        out = {}
        for (sw, p), k in self.keys.items():
            e = dict(zip(model.PORT_NAMES, PORT.unpack(self.maps["ar_ports"].lookup(k))))
            c = dict(zip(CONTROL.names, CONTROL.unpack(ctl.lookup(k))))
            out[f"{sw}:{p}"] = max(0, e["in"] - e["out"] - c["corr"])
        return out

    def summary(self):
        """The decisions so far, per switch and port (results.json ``adaptive``)."""
        r = model.reading(self.entries(), self.downs)
        per_switch = {}
        for name, pr in r["ports"].items():
            sw = name.split(":")[0]
            s = per_switch.setdefault(sw, {"frames": 0, "flowlets": 0, "moved": 0,
                                           "ports": {}})
            s["frames"] += pr["frames"]
            s["flowlets"] += pr["flowlets"]
            s["moved"] += pr["moved_in"]
            s["ports"][name.split(":")[1]] = pr
        out = {"mode": self.mode, "flowlet_frames": self.flowlet_frames,
               "dscp": self.dscp, "routes": len(self.plan["routes"]),
               "frames": r["frames"], "flowlets": r["flowlets"], "moved": r["moved"],
               "switches": per_switch}
        if self.cuts:
            out["cuts"] = self.cuts
        if self.follower is not None:
            out["repairs"] = [{"after_push_ms": round((e["t_ns"] - e["t_done_ns"]) / 1e6, 3),
                               **{k: e[k] for k in ("withdrawn", "restored", "routes")}}
                              for e in self.follower.events]
        return out

    # ---- teardown -------------------------------------------------------------

    def remove(self):
        errors = []
        for prog_array, key in self.slots:
            try:
                prog_array.delete(key)
            except OSError:
                pass                             # its map went first: nothing to undo
        self.slots = []
        filters = [a for a in self.attached if a[0] == "tcfilter"]
        errors += _del_filters(filters)
        errors += detach([a for a in self.attached if a[0] != "tcfilter"])
        self.attached = []
        for m in self.maps.values():
            m.close()
        self.maps = {}
        return errors

    def close(self, session):
        try:
            if self.follower is not None:
                self.follower.stop()
            session.results["adaptive"] = self.summary()
        finally:
            session.teardown_errors += [f"adaptive routing: {e}" for e in self.remove()]


def _del_filters(filters):
    errors = []
    with ns_sockets() as sock:
        for _, ns, ifname in filters:
            try:
                ipr = sock(ns)
                found = ipr.link_lookup(ifname=ifname)
                if found:
                    ipr.tc("del-filter", "bpf", index=found[0], parent=TC_EGRESS,
                           prio=TC_PRIO, handle=2)
            except Exception as e:          # its namespace or clsact went first
                errors.append(f"{ifname}: {e}")
    return errors

