"""Switch agents per run: which model each switch has, from the command line or the
fabric file (the model itself: ``emulator.fabric.agents``).

Model.  Between the controller and each switch sits the switch's OpenFlow
agent; ``agents.model.Params`` describes its timing, ``agents.profiles`` the
named models (``hardware`` and the switches of two published measurements,
each number cited).  ``ideal`` is no agent at all (the switch applies a
change at once, as Open vSwitch does).

A run's switches need not share one model: a ``Fleet`` gives each switch
kind (leaf, spine, superspine, nic) its own, or ideal, with a ``default``
for the kinds it does not name.  ``--switch-agent`` makes a fleet of one
model; a fabric file's ``switch_agent:`` key (``parse_fabric``) a fleet per
kind, e.g. ``{default: hardware, leaf: {base: hardware, table_rate: 1000}}``.
The command line, when given, overrides the file.
"""

from dataclasses import dataclass, replace
from typing import Optional

import yaml

from emulator.errors import ConfigError
from emulator.fabric.agents.model import (  # noqa: F401 (re-exported: the proxy's, the drill's)
    ADD,
    BARRIER,
    CHANGE,
    DELETE,
    ECHO,
    MODIFY,
    OTHER,
    PORT_STATUS,
    SHIFT_ORDERS,
    Agent,
    Change,
    Params,
    Table,
    predict_port_status,
)
from emulator.fabric.agents.profiles import HARDWARE, PRESETS, listing  # noqa: F401

KEYS = {"latency_ms": float, "processing_ms": float, "table_rate": float,
        "event_ms": float, "early_barrier": bool, "modify_factor": float,
        "shift_ms": float, "shift_order": str, "dp_lag_ms": float}
LIST = "list"       # --switch-agent list: the profiles


def names():
    return ", ".join(["ideal", *PRESETS])


def from_dict(doc, where="--switch-agent"):
    """Params from a mapping of the named keys (``base: NAME`` starts from a profile)."""
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
                                                f"(or base: one of {', '.join(PRESETS)})")
        if kind is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{where}.{key}", f"{value!r}: true or false")
        elif kind is str:
            if value not in SHIFT_ORDERS:
                raise ConfigError(f"{where}.{key}", f"{value!r}: use {', '.join(SHIFT_ORDERS)}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"{where}.{key}", f"{value!r}: a number >= 0")
        out = replace(out, **{key: kind(value)})
    return out


def parse(text):
    """``--switch-agent ideal|NAME|FILE``: None (ideal) or Params."""
    if text in (None, "", "ideal"):
        return None
    if text in PRESETS:
        return PRESETS[text]
    try:
        with open(text) as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError("--switch-agent", f"{text!r}: not a profile ({names()}; "
                                            f"'--switch-agent list' describes them) nor a "
                                            f"readable YAML file ({e.strerror})") from None
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
                      early_barrier=all(p.early_barrier for p in ps),
                      modify_factor=max(p.modify_factor for p in ps),
                      shift_ms=max(p.shift_ms for p in ps),
                      dp_lag_ms=max(p.dp_lag_ms for p in ps))

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
    """``ideal``, a profile's name or a mapping of parameters: Params or None."""
    if value == "ideal":
        return None
    if isinstance(value, str):
        if value in PRESETS:
            return PRESETS[value]
        raise ConfigError(where, f"{value!r}: use {names()} or a mapping "
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
                              (DEFAULT,) + SWITCH_KINDS) + ": ideal, a profile or a "
                          "mapping of parameters) or one mapping of " + ", ".join(KEYS)
                          + (", not both" if not bad else ""))
    return Fleet(_model(doc, where))
