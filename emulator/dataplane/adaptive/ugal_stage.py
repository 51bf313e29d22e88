"""The run's UGAL stage on a dragonfly (``--routing ugal|ugal-l``): the adaptive
stage's machinery (maps, one program pair per port, chaining after dequeue ECN
marking, the detection model's news) with the UGAL program
(``dataplane/bpf/ugal.bpf.c``) and the UGAL model's tables
(``dataplane.adaptive.ugal``).

Per tracked port (a queue some route compares): ``ugal_egress`` on its tc
egress and ``ugal_ingress`` counting out at the link's far end.  Per
host-facing router port: ``ugal_ingress`` deciding.  At the end the decisions
per router go into results.json ``ugal``.
"""


from emulator.dataplane import bpf
from emulator.dataplane.adaptive import model, ugal
from emulator.dataplane.adaptive.stage import CONTROL, PORT, AdaptiveStage
from emulator.dataplane.links import shaping
from emulator.errors import ConfigError

CONFIG = bpf.Layout("ugal_cfg", ugal.CONFIG_FIELDS)
COUNT = bpf.Layout("ugal_count", ugal.COUNT_FIELDS)
PROGRAMS = {"ar_ingress": "ugal_ingress", "ar_egress": "ugal_egress"}


def check_session(routing, adaptive_lb, servers):
    """UGAL runs alone in the data plane, on one machine (exit 2 otherwise)."""
    if adaptive_lb or servers:
        raise ConfigError("--routing", f"{routing} decides in the routers' data plane on "
                                       "one machine, beside the controller's ECMP: leave "
                                       "out --lb dlb|packet and servers:")


def stage_for(session):
    """The session's data-plane stage: UGAL under ``--routing ugal|ugal-l``, else the
    adaptive stage of ``--lb dlb|packet``."""
    if session.routing in ugal.MODES:
        return UgalStage.for_session(session)
    return AdaptiveStage.for_session(session)


class UgalStage(AdaptiveStage):
    """UGAL (``mode``: ugal or ugal-l) on a running dragonfly."""

    FOLLOWS_REPAIR = False              # no route repair followed: a dead port is skipped
    RESCUES = False                     # its egress counts only

    def __init__(self, mode, topo, ifaces, far, rates, frame, queue_ms,
                 flowlet_frames=model.FLOWLET_FRAMES, chain=None, bias_frames=ugal.BIAS_FRAMES):
        super().__init__(ugal.check_mode(mode), topo, ifaces, far, rates, frame, queue_ms,
                         dscp=0, flowlet_frames=flowlet_frames, chain=chain,
                         plan=ugal.plan(topo, mode))
        self.bias = bias_frames * frame

    @staticmethod
    def session_mode(session):
        return session.routing

    def describe(self):
        p = self.plan
        rate = min((self.rates[t] for t in p["tracked"]), default=None)
        t = model.timers(self.frame, rate, self.flowlet_frames) if rate else None
        timer = f", flowlet timer {t['flowlet_ns'] / 1e6:.1f} ms" if t else ""
        return (f"UGAL in the routers' data plane ({self.mode}: {p['queues']} queues): "
                f"{len({sw for sw, _ in p['deciders']})} routers decide {len(p['routes'])} "
                f"routes, {len(p['tracked'])} queues read, q_min > 2 q_nonmin + "
                f"{self.bias} bytes goes non-minimal{timer}")

    def _port_entry(self, key):
        rate = self.rates[key]
        limit = shaping.tbf_params(rate, self.queue_ms, self.frame)["limit"]
        values = dict.fromkeys(model.PORT_NAMES, 0)
        values.update(frame=self.frame, limit=limit)
        return PORT.pack_fields(**values)

    WHAT = "UGAL"

    def _base(self):
        return dict(sw=0, up_key=-1, decide=0, flowlet_ns=0, pend_ns=0, key=-1)

    def _decider_rate(self, sw):
        return min(r for (s, _), r in self.rates.items() if s == sw)

    def _maps(self):
        n_sw = len(self.topo["switches"])
        return {
            "ar_ports": bpf.Map(PORT.size, max(1, len(self.keys))),
            "ar_ctls": bpf.Map(CONTROL.size, max(1, len(self.keys))),
            "ugal_routes": bpf.Map(ugal.ROUTE.size, max(1, len(self.plan["routes"])),
                                   kind=bpf.maps.MAP_HASH, key_size=model.ROUTE_KEY.size),
            "ar_flowlets": bpf.Map(model.FLOWLET_SIZE, max(1, n_sw * model.FLOWSETS)),
            "ugal_counts": bpf.Map(COUNT.size, max(1, n_sw)),
        }

    def _fill_routes(self):
        for (sw, ip), (mins, cands) in self.plan["routes"].items():
            self.maps["ugal_routes"].update(model.route_key(self.sw_index[sw], ip),
                                            ugal.route_value(mins, cands, self.keys))

    def _load(self, values, program):
        """The adaptive stage's ``_load`` for the UGAL object (same program roles)."""
        v = dict(bias=self.bias)
        v.update({k: x for k, x in values.items() if k in CONFIG.names})
        fds = bpf.load("ugal", CONFIG.pack_fields(**v), CONFIG, self.maps,
                       value_layouts=[PORT, CONTROL, COUNT], programs=[PROGRAMS[program]])
        out = bpf.Programs({program: fds.pop(PROGRAMS[program])})
        fds.close()
        return out

    # ---- reading -------------------------------------------------------------

    def counts(self):
        """{switch index: dict of COUNT fields}."""
        m = self.maps["ugal_counts"]
        return {i: dict(zip(ugal.COUNT_NAMES, COUNT.unpack(m.lookup(i))))
                for i in range(len(self.topo["switches"]))}

    def summary(self):
        """The decisions so far (results.json ``ugal``)."""
        names = [s["name"] for s in self.topo["switches"]]
        return {"mode": self.mode, "queues": self.plan["queues"], "bias_bytes": self.bias,
                "flowlet_frames": self.flowlet_frames, "routes": len(self.plan["routes"]),
                **ugal.reading(self.counts(), names)}

    def close(self, session):
        try:
            session.results["ugal"] = self.summary()
        finally:
            session.teardown_errors += [f"UGAL: {e}" for e in self.remove()]
