"""Fault schedules: ``--fault`` specs and scenario files, validated before anything runs.

Model.  A schedule is a list of ``Event(at_s, action, target, params)``
sorted by time, ``at_s`` seconds after the drill's probe traffic is
flowing.  Actions map one to one onto ``faults.Injector`` methods:

    cut/restore LINK [side: a|b|both]    link_down / link_up
    flap LINK count: N period: 200ms     flap
    crash/recover SWITCH                 switch_crash / switch_recover
    controller: kill|restart             controller_kill / controller_restart
    loss LINK percent: P [side]          loss_start;  loss_stop: LINK
    pfc_storm NODE|LINK                  pfc_storm (on);  pfc_storm_stop: NODE|LINK
    deadlock: routes                     pfc_run.misroute (on);  deadlock_stop: routes
    cp_crash/cp_recover SWITCH           control_plane_crash / _recover (--control bgp)
    restart SWITCH:DAEMON                daemon_restart (--control bgp: leaf1:bgpd)

A scenario file::

    faults:
      - at: 2s
        cut: leaf1:spine2
      - at: 3s
        restore: leaf1:spine2

A ``--fault`` spec is an inject/restore pair: ``leaf1-spine1`` (cut, both
ends), ``leaf1-spine1:cut:a`` (one end), ``leaf1-spine1:flap:5:200ms``,
``leaf1-spine1:loss:5``, ``spine1:crash``, ``controller:kill``,
``h1:pfc-storm``, ``deadlock``, ``spine1:cp-crash`` and ``leaf1:restart:bgpd``
(a BGP fabric's); it becomes
[inject at ``at``, restore at ``at + hold``].

Every problem raises one ``ConfigError`` naming its place
(``scenario.yaml: faults[2].period: ...``), exit status 2, like emulator.fabric.spec.
Names of links and switches are checked against the topology by the
injector (``faults.parse_link``) before the first fault.
"""

from dataclasses import dataclass, field

import yaml

from emulator.dataplane.faults import parse_link
from emulator.dataplane.lossless.pfc_run import misroute
from emulator.errors import ConfigError
from emulator.fabric import units
from emulator.fabric.lossless import deadlock_plan, storm_end
from lab.modes import Control, FlowControl

CONTROLLER = "controller"     # the controller's fault: its action and target (controller:kill)

SIDES = ("a", "b", "both")
# action -> (target key, {optional param: parser name})
ACTIONS = {
    "cut": {"side": "side"}, "restore": {"side": "side"},
    "flap": {"count": "count", "period": "duration", "side": "side"},
    "crash": {}, "recover": {},
    "controller": {},
    "loss": {"percent": "percent", "side": "side"}, "loss_stop": {},
    "pfc_storm": {}, "pfc_storm_stop": {},
    "deadlock": {}, "deadlock_stop": {},
    "cp_crash": {}, "cp_recover": {}, "restart": {},
}
DAEMONS = ("zebra", "bfdd", "bgpd")          # what ``restart`` may restart
ROUTED_ONLY = ("cp_crash", "cp_recover", "restart")


@dataclass(frozen=True)
class Event:
    at_s: float
    action: str
    target: str
    params: dict = field(default_factory=dict, compare=False, hash=False)


def parse_duration(value, where):
    try:
        return units.parse_duration(value)
    except ValueError:
        raise ConfigError(where, f"{value!r}: a duration needs a unit, e.g. 2s or 200ms")


def _param(kind, value, where):
    if kind == "duration":
        v = parse_duration(value, where)
        if v <= 0:
            raise ConfigError(where, "must be > 0")
        return v
    if kind == "count":
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10000:
            raise ConfigError(where, f"{value!r}: an integer 1..10000")
        return value
    if kind == "percent":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 100:
            raise ConfigError(where, f"{value!r}: a percentage in (0, 100]")
        return float(value)
    if value not in SIDES:
        raise ConfigError(where, f"{value!r}: one of {', '.join(SIDES)}")
    return value


def _target(action, value, where):
    if not isinstance(value, str) or not value:
        raise ConfigError(where, f"{value!r}: a node or link name")
    if action == CONTROLLER and value not in ("kill", "restart"):
        raise ConfigError(where, f"{value!r}: kill or restart")
    if action == "restart" and value.partition(":")[2] not in DAEMONS:
        raise ConfigError(where, f"{value!r}: SWITCH:DAEMON, the daemon one of "
                                 f"{', '.join(DAEMONS)} (e.g. leaf1:bgpd)")
    return value


def parse_schedule(doc, source=None):
    """The ``faults:`` list of a parsed scenario document -> [Event] sorted by time."""
    def err(where, msg):
        return ConfigError(where, msg, source)
    if not isinstance(doc, dict):
        raise err("scenario", "must be a mapping with key 'faults'")
    extra = set(doc) - {"faults"}
    if extra:
        raise err(sorted(extra)[0], "unknown key (known: faults)")
    items = doc.get("faults")
    if not isinstance(items, list) or not items:
        raise err("faults", "a non-empty list of events")
    events = []
    for i, item in enumerate(items):
        where = f"faults[{i}]"
        if not isinstance(item, dict):
            raise err(where, "an event is a mapping with 'at' and one action")
        if "at" not in item:
            raise err(where, "missing key 'at'")
        try:
            at = parse_duration(item["at"], f"{where}.at") if item["at"] != 0 else 0.0
            actions = [k for k in item if k in ACTIONS]
            if len(actions) != 1:
                raise ConfigError(where, f"exactly one action of {', '.join(ACTIONS)}")
            action = actions[0]
            allowed = ACTIONS[action]
            params = {}
            for k, v in item.items():
                if k in ("at", action):
                    continue
                if k not in allowed:
                    raise ConfigError(f"{where}.{k}", f"unknown key for {action} "
                                      f"(known: {', '.join(['at', action, *allowed]) })")
                params[k] = _param(allowed[k], v, f"{where}.{k}")
            if action == "flap" and set(params) < {"count", "period"}:
                raise ConfigError(where, "flap needs count and period")
            if action == "loss" and "percent" not in params:
                raise ConfigError(where, "loss needs percent")
            events.append(Event(at, action, _target(action, item[action], f"{where}.{action}"),
                                params))
        except ConfigError as e:
            raise err(e.where, e.message) from None
    return sorted(events, key=lambda e: e.at_s)


def load_scenario(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError("scenario", str(e), path)
    except yaml.YAMLError as e:
        raise ConfigError("scenario", f"not valid YAML: {str(e).splitlines()[0]}", path)
    return parse_schedule(doc, path)


def fault_spec(text, at_s=1.0, hold_s=1.0):
    """A ``--fault`` spec -> [inject Event, restore Event]."""
    where = f"--fault {text}"
    target, *rest = text.split(":")
    kind = rest[0] if rest else ("crash" if not ("-" in target or target == CONTROLLER)
                                 else "cut")
    args = rest[1:]
    if target == "deadlock":
        if args or kind not in ("crash", "deadlock"):
            raise ConfigError(where, "deadlock takes nothing: --fault deadlock")
        return [Event(at_s, "deadlock", "routes"), Event(at_s + hold_s, "deadlock_stop",
                                                         "routes")]
    if target == CONTROLLER:
        if kind not in ("kill", "crash", "cut"):
            raise ConfigError(where, "controller:kill")
        return [Event(at_s, CONTROLLER, "kill"), Event(at_s + hold_s, CONTROLLER, "restart")]
    if kind == "cut":
        side = _param("side", args[0], where) if args else "both"
        return [Event(at_s, "cut", target, {"side": side}),
                Event(at_s + hold_s, "restore", target, {"side": side})]
    if kind == "flap":
        if len(args) != 2 or not args[0].isdigit():
            raise ConfigError(where, "flap takes COUNT:PERIOD, e.g. leaf1-spine1:flap:5:200ms")
        count, period = _param("count", int(args[0]), where), _param("duration", args[1], where)
        return [Event(at_s, "flap", target, {"count": count, "period": period})]
    if kind == "loss":
        try:
            pct = float(args[0].rstrip("%")) if len(args) == 1 else None
        except ValueError:
            pct = None
        if pct is None:
            raise ConfigError(where, "loss takes PERCENT, e.g. leaf1-spine1:loss:5")
        return [Event(at_s, "loss", target, {"percent": _param("percent", pct, where)}),
                Event(at_s + hold_s, "loss_stop", target)]
    if kind == "pfc-storm":
        if args:
            raise ConfigError(where, "pfc-storm takes no arguments: h1:pfc-storm (a host's "
                                     "NIC) or leaf1-spine1:pfc-storm (leaf1's port to spine1)")
        return [Event(at_s, "pfc_storm", target), Event(at_s + hold_s, "pfc_storm_stop", target)]
    if kind == "crash":
        if args:
            raise ConfigError(where, "crash takes no arguments")
        return [Event(at_s, "crash", target), Event(at_s + hold_s, "recover", target)]
    if kind == "cp-crash":
        if args:
            raise ConfigError(where, "cp-crash takes no arguments: spine1:cp-crash")
        return [Event(at_s, "cp_crash", target), Event(at_s + hold_s, "cp_recover", target)]
    if kind == "restart":
        if len(args) != 1:
            raise ConfigError(where, "restart takes the daemon: leaf1:restart:bgpd")
        return [Event(at_s, "restart", _target("restart", f"{target}:{args[0]}", where))]
    raise ConfigError(where, f"unknown fault kind {kind!r} (cut, flap, loss, crash, kill, "
                             "pfc-storm, cp-crash, restart)")


def check_targets(events, topo, flow_control=FlowControl.NONE):
    """Raise ConfigError if a link or switch of ``events`` is not in the topology,
    or a PFC storm is asked of a fabric without PFC."""
    switches = {s["name"] for s in topo["switches"]}
    for ev in events:
        if ev.action in ("deadlock", "deadlock_stop"):
            deadlock_plan(topo)
        elif ev.action in ("pfc_storm", "pfc_storm_stop"):
            if flow_control != FlowControl.PFC:   # credits have no pause frames to storm
                raise ConfigError(f"fault {ev.target}:pfc-storm",
                                  "a PFC storm needs a lossless fabric: -P lossless=true or "
                                  "lossless: true in the fabric file")
            storm_end(ev.target, topo)
        elif ev.action in ("crash", "recover", "cp_crash", "cp_recover", "restart"):
            name = ev.target.partition(":")[0]
            if name not in switches:
                raise ConfigError(f"fault {ev.action}", f"unknown switch {name!r}")
            if ev.action in ROUTED_ONLY and topo.get("control") != Control.BGP:
                raise ConfigError(f"fault {ev.action}", "a routed fabric's fault: it needs "
                                                        "--control bgp")
        elif ev.action != CONTROLLER:
            parse_link(ev.target, topo, where=f"fault {ev.action}")


def execute(injector, ev):
    """Apply one event through ``injector``; returns its log entry(ies)."""
    p = ev.params
    if ev.action == "cut":
        return injector.link_down(ev.target, p.get("side", "both"))
    if ev.action == "restore":
        return injector.link_up(ev.target, p.get("side", "both"))
    if ev.action == "flap":
        return injector.flap(ev.target, p["count"], p["period"], p.get("side", "both"))
    if ev.action == "crash":
        return injector.switch_crash(ev.target)
    if ev.action == "recover":
        return injector.switch_recover(ev.target)
    if ev.action == CONTROLLER:
        return injector.controller_kill() if ev.target == "kill" else injector.controller_restart()
    if ev.action == "loss":
        return injector.loss_start(ev.target, p["percent"], p.get("side", "a"))
    if ev.action == "loss_stop":
        return injector.loss_stop()
    if ev.action in ("pfc_storm", "pfc_storm_stop"):
        return injector.pfc_storm(ev.target, ev.action == "pfc_storm")
    if ev.action in ("deadlock", "deadlock_stop"):
        return misroute(injector, ev.action == "deadlock")
    if ev.action == "cp_crash":
        return injector.control_plane_crash(ev.target)
    if ev.action == "cp_recover":
        return injector.control_plane_recover(ev.target)
    if ev.action == "restart":
        return injector.daemon_restart(ev.target)
    raise ValueError(ev.action)


def default_fault(topo):
    """The first uplink of the first leaf (``leaf1-spine1`` on the presets)."""
    for sw in topo["switches"]:
        if sw["kind"] != "leaf":
            continue
        for p in sw["ports"]:
            if p["peer_kind"] not in ("host", "nic", "leaf"):
                return f"{sw['name']}-{p['peer']}"
    raise ConfigError("drill", "the fabric has no leaf uplink to cut by default: "
                               "give --fault SPEC or --scenario FILE")
