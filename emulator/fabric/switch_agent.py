"""The switch-agent timing model: how long a switch's control plane takes.

Model.  Between the controller and each switch sits the switch's OpenFlow
agent (the CPU, its software and the ASIC's table-programming path).  It is
described by named parameters (``Params``):

* ``latency_ms``: the control channel, each way;
* ``processing_ms``: per OpenFlow message the agent handles (every message
  but echoes, which only cross the channel);
* ``table_rate``: flow and group modifications installed per second (each
  member of a bundle counts; a group modification costs a flow modification);
* ``event_ms``: from the port's state change (after carrier detection) to
  the PORT_STATUS leaving the switch;
* ``early_barrier``: the agent answers a barrier when it reads it, before the
  changes ahead of it are in hardware (Kuźniar et al. saw switches do this);
  otherwise a barrier is answered after every change before it is installed.

Messages are handled one at a time, in the order they arrive (``Agent``):
a large push takes as long as its changes at ``table_rate``.  Messages
toward the controller leave in order too.  ``ideal`` is no agent at all (the
switch applies a change at once, as Open vSwitch does); ``hardware`` takes
its defaults from published measurements (docs/failover.md cites them).
``scale`` multiplies every time (a job drill's stretched clock).

A run's switches need not share one model: a ``Fleet`` gives each switch
kind (leaf, spine, superspine, nic) its own, or ideal, with a ``default``
for the kinds it does not name.  ``--switch-agent`` makes a fleet of one
model; a fabric file's ``switch_agent:`` key (``parse_fabric``) a fleet per
kind, e.g. ``{default: hardware, leaf: {base: hardware, table_rate: 1000}}``.
The command line, when given, overrides the file.

``Agent`` is pure arithmetic on times given to it (seconds of any clock):
the proxy (emulator/dataplane/ovs/agent_proxy.py) asks it when to deliver
each message, and the drill asks ``predict_push`` what a push should take.
"""

from dataclasses import asdict, dataclass, replace
from typing import Optional

from emulator.errors import ConfigError

# OpenFlow message kinds the model tells apart (the proxy classifies them).
CHANGE, BARRIER, ECHO, PORT_STATUS, OTHER = "change", "barrier", "echo", "port_status", "other"


@dataclass(frozen=True)
class Params:
    latency_ms: float = 0.0      # control channel, each way
    processing_ms: float = 0.0   # per message the agent handles
    table_rate: float = 0.0      # flow+group modifications per second; 0: no limit
    event_ms: float = 0.0        # port change -> PORT_STATUS leaves the switch
    early_barrier: bool = False  # barrier answered before the changes ahead of it are in

    def scaled(self, factor):
        """Every time ``factor`` times as long (the rate that much lower)."""
        return replace(self, latency_ms=self.latency_ms * factor,
                       processing_ms=self.processing_ms * factor,
                       event_ms=self.event_ms * factor,
                       table_rate=self.table_rate / factor if self.table_rate else 0.0)

    def change_ms(self):
        """ms one table change takes at ``table_rate``."""
        return 1e3 / self.table_rate if self.table_rate else 0.0

    def text(self):
        return (f"channel {self.latency_ms:g} ms each way, {self.processing_ms:g} ms per "
                f"message, {self.table_rate:g} changes/s, port events after "
                f"{self.event_ms:g} ms, barrier replies "
                f"{'early' if self.early_barrier else 'after installation'}")

    def as_dict(self):
        return asdict(self)


# He et al., SOSR 2015 and Kuźniar et al., PAM 2015 (docs/failover.md, "Switch agents").
HARDWARE = Params(latency_ms=1.0, processing_ms=1.0, table_rate=200.0, event_ms=10.0,
                  early_barrier=False)
PRESETS = {"hardware": HARDWARE}
KEYS = {"latency_ms": float, "processing_ms": float, "table_rate": float,
        "event_ms": float, "early_barrier": bool}


def from_dict(doc, where="--switch-agent"):
    """Params from a mapping of the named keys (``base: hardware`` starts from a preset)."""
    if not isinstance(doc, dict):
        raise ConfigError(where, f"expected a mapping of {', '.join(KEYS)}, got {doc!r}")
    doc = dict(doc)
    base = doc.pop("base", None)
    if base is not None and base not in PRESETS:
        raise ConfigError(f"{where}.base", f"{base!r}: use {', '.join(PRESETS)}")
    out = PRESETS.get(base, Params())
    for key, value in doc.items():
        kind = KEYS.get(key)
        if kind is None:
            raise ConfigError(f"{where}.{key}", f"unknown key: use {', '.join(KEYS)} "
                                                "(or base: hardware)")
        if kind is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{where}.{key}", f"{value!r}: true or false")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"{where}.{key}", f"{value!r}: a number >= 0")
        out = replace(out, **{key: kind(value)})
    return out


def parse(text):
    """``--switch-agent ideal|hardware|FILE``: None (ideal) or Params."""
    if text in (None, "", "ideal"):
        return None
    if text in PRESETS:
        return PRESETS[text]
    import yaml
    try:
        with open(text) as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError("--switch-agent", f"{text!r}: not ideal, hardware or a readable "
                                            f"YAML file ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise ConfigError("--switch-agent", f"{text}: not valid YAML: {e}") from None
    return from_dict(doc, where=text)


SWITCH_KINDS = ("leaf", "spine", "superspine", "nic")   # fabric.model's, a bond's NIC switch
DEFAULT = "default"


@dataclass(frozen=True)
class Fleet:
    """Each switch kind's model (None: ideal); ``default`` for the kinds not named."""

    default: Optional[Params] = None
    kinds: tuple = ()                 # ((kind, Params or None), ...), sorted by kind

    def for_kind(self, kind):
        return dict(self.kinds).get(kind, self.default)

    @property
    def ideal(self):
        return self.default is None and all(p is None for _, p in self.kinds)

    @property
    def uniform(self):
        """The one model every switch has, or None when kinds differ."""
        models = {self.default} | {p for _, p in self.kinds}
        return self.default if len(models) == 1 else None

    def slowest(self):
        """The slowest figure of every parameter over the models (timeouts, not timing)."""
        ps = [p for p in (self.default, *(p for _, p in self.kinds)) if p is not None]
        if not ps:
            return Params()
        rates = [p.table_rate for p in ps if p.table_rate]     # 0: no limit
        return Params(latency_ms=max(p.latency_ms for p in ps),
                      processing_ms=max(p.processing_ms for p in ps),
                      table_rate=min(rates, default=0.0),
                      event_ms=max(p.event_ms for p in ps),
                      early_barrier=all(p.early_barrier for p in ps))

    def scaled(self, factor):
        def sc(p):
            return None if p is None else p.scaled(factor)
        return Fleet(sc(self.default), tuple((k, sc(p)) for k, p in self.kinds))

    def text(self):
        one = self.uniform
        if one is not None or self.ideal:
            return one.text() if one else "ideal"
        parts = [f"{k}: {p.text() if p else 'ideal'}" for k, p in self.kinds]
        if self.default is not None or len(self.kinds) < len(SWITCH_KINDS):
            parts.append(f"other switches: {self.default.text() if self.default else 'ideal'}")
        return "; ".join(parts)

    def as_dict(self):
        """One model's parameters; per kind ``{default: ..., leaf: ...}`` ("ideal": none)."""
        one = self.uniform
        if one is not None:
            return one.as_dict()
        doc = {DEFAULT: self.default.as_dict() if self.default else "ideal"}
        doc.update((k, p.as_dict() if p else "ideal") for k, p in self.kinds)
        return doc

    def for_dpids(self, kind_of_dpid):
        """The proxy's ``--params``: the default and every datapath id's model."""
        def d(p):
            return None if p is None else p.as_dict()
        return {DEFAULT: d(self.default),
                "dpids": {str(dpid): d(self.for_kind(kind))
                          for dpid, kind in kind_of_dpid.items()}}


def fleet(x):
    """A Fleet from a Fleet, one model (Params) or None (ideal)."""
    return x if isinstance(x, Fleet) else Fleet(default=x)


def for_run(text, fabric, controller="builtin"):
    """The switches' models of a run (a Fleet): ``text`` (``--switch-agent``) for every
    switch when given, else the fabric file's ``switch_agent:``; None when all are
    ideal.  ConfigError where a model cannot run (several servers, a remote
    controller)."""
    params = fleet(parse(text)) if text is not None else fabric.switch_agent
    if params is not None and params.ideal:
        params = None
    if params is not None and fabric.cluster is not None:
        raise ConfigError("--switch-agent", "runs on one machine only: not with --servers")
    if params is not None and str(controller).startswith("remote:"):
        raise ConfigError("--switch-agent", "not with --controller remote: (the switches "
                                            "connect to your controller directly)")
    return params


def proxied(x):
    """``fleet(x)``, or None where every switch is ideal (nothing to proxy)."""
    f = None if x is None else fleet(x)
    return None if f is None or f.ideal else f


def _model(value, where):
    """``ideal``, ``hardware`` or a mapping of parameters: Params or None."""
    if value == "ideal":
        return None
    if isinstance(value, str):
        if value in PRESETS:
            return PRESETS[value]
        raise ConfigError(where, f"{value!r}: use ideal, {', '.join(PRESETS)} or a mapping "
                                 f"of {', '.join(KEYS)}")
    return from_dict(value, where=where)


def parse_fabric(doc, where="switch_agent"):
    """A fabric file's ``switch_agent:``: one model for every switch (a name or a
    mapping of parameters) or a mapping of switch kinds and ``default`` to models."""
    if isinstance(doc, dict) and doc and set(doc) <= set(SWITCH_KINDS) | {DEFAULT}:
        kinds = tuple(sorted((k, _model(v, f"{where}.{k}")) for k, v in doc.items()
                             if k != DEFAULT))
        return Fleet(_model(doc.get(DEFAULT, "ideal"), f"{where}.{DEFAULT}"), kinds)
    if isinstance(doc, dict) and not set(doc) <= set(KEYS) | {"base"}:
        bad = sorted(map(str, set(doc) - set(KEYS) - {"base"} - set(SWITCH_KINDS) - {DEFAULT}))
        raise ConfigError(f"{where}.{bad[0]}" if bad else where,
                          "give a model per switch kind (" + ", ".join(
                              (DEFAULT,) + SWITCH_KINDS) + ": ideal, hardware or a "
                          "mapping of parameters) or one mapping of " + ", ".join(KEYS)
                          + (", not both" if not bad else ""))
    return Fleet(_model(doc, where))


class Agent:
    """One switch's agent: when each message is delivered (pure; times in seconds)."""

    def __init__(self, params):
        self.p = params
        self.busy_until = float("-inf")   # when the message being handled is done
        self.last_up = float("-inf")      # when the last message to the controller left

    def to_switch(self, t, kind, changes=0):
        """A message from the controller reaching the channel at ``t``: the time the
        switch acts on it (its changes installed; a barrier: answered)."""
        p = self.p
        arrive = t + p.latency_ms / 1e3
        if kind == ECHO:
            return arrive
        if kind == BARRIER and p.early_barrier:
            return arrive + p.processing_ms / 1e3
        start = max(arrive, self.busy_until)
        self.busy_until = start + (p.processing_ms + changes * p.change_ms()) / 1e3
        return self.busy_until

    def to_controller(self, t, kind):
        """A message the switch emits at ``t``: when it reaches the controller
        (in order; a port status after the modelled event latency)."""
        extra = self.p.event_ms if kind == PORT_STATUS else 0.0
        self.last_up = max(t + (extra + self.p.latency_ms) / 1e3, self.last_up)
        return self.last_up


def predict_push(params, switches):
    """ms from the controller sending a push to its last barrier reply.

    ``params``: one model, or a list of one per switch.
    ``switches``: (messages, changes) per switch in the order the controller
    waits on their barriers; as the built-in controller does it, every diff
    is sent at once, then one barrier per switch, each after the previous
    one's reply."""
    t = 0.0
    agents = []
    each = params if isinstance(params, (list, tuple)) else [params] * len(switches)
    for (msgs, changes), p in zip(switches, each):
        a = Agent(p or Params())
        for i in range(msgs):
            a.to_switch(0.0, CHANGE, changes=changes if i == 0 else 0)
        agents.append(a)
    for a in agents:
        t = a.to_controller(a.to_switch(t, BARRIER), OTHER)
    return t * 1e3


def predict_port_status(params):
    """ms the model adds between the switch noticing a port change and the controller
    reading it."""
    return params.event_ms + params.latency_ms
