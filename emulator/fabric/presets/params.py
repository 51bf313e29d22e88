"""Preset parameters: a small typed schema, validated like a fabric file.

A ``Param`` has a kind (``int``, ``float``, ``rate`` or ``choice``), a default
and bounds; ``resolve_params`` merges the given ``key=value`` strings over the
defaults and raises one ``ConfigError`` naming the preset and parameter.
"""

from dataclasses import dataclass

from emulator.errors import ConfigError
from emulator.fabric.units import parse_rate


@dataclass(frozen=True)
class Param:
    name: str
    kind: str          # "int", "rate", "float" or "choice"
    default: object
    lo: float = 1
    hi: float = 64
    doc: str = ""
    choices: tuple = ()   # for kind "choice"


def _convert(preset, p, value):
    where = f"preset {preset}: {p.name}"
    if p.kind == "choice":
        if value not in p.choices:
            raise ConfigError(where, f"{value!r} is not one of {', '.join(p.choices)}")
        return value
    try:
        if p.kind == "rate":
            return parse_rate(value) if isinstance(value, str) else parse_rate(str(value))
        number = int(value) if p.kind == "int" else float(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(where, f"{value!r} is not a valid {p.kind}"
                          + (f" ({e})" if p.kind == "rate" else ""))
    if p.kind == "int" and str(value).strip() != str(number) and not isinstance(value, int):
        raise ConfigError(where, f"{value!r} is not an integer")
    if not p.lo <= number <= p.hi:
        raise ConfigError(where, f"{value!r} is outside {p.lo:g}..{p.hi:g}")
    return number


def resolve_params(preset, schema, given):
    """Merge ``given`` (name -> str/int) over defaults; reject unknown names."""
    known = {p.name: p for p in schema}
    for key in given:
        if key not in known:
            raise ConfigError(f"preset {preset}",
                              f"unknown parameter {key!r} (known: {', '.join(known)})")
    values = {}
    for p in schema:
        raw = given.get(p.name, p.default)
        values[p.name] = None if raw is None else _convert(preset, p, raw)
    return values


def rate_for_ratio(preset, v, given, rate_key, ratio_key, down_bps, n_up):
    """Set ``v[rate_key]`` so that down_bps / (n_up * rate) = v[ratio_key], if given.

    Oversubscription (downlink over uplink capacity of a switch) is a
    parameter of every Clos preset; it replaces the uplink rate, so giving
    both is an error.  The rate is rounded to 1 kbit/s (at least 1 kbit/s).
    """
    if v[ratio_key] is None:
        return
    if rate_key in given:
        raise ConfigError(f"preset {preset}", f"give {rate_key} or {ratio_key}, not both")
    rate = down_bps / (n_up * v[ratio_key])
    v[rate_key] = max(1000, int(round(rate / 1000)) * 1000)
