"""``--cc-param NAME=VALUE``: a congestion-control parameter of the sending NICs.

The names are those of ``traffic.roce.dcqcn.DcqcnParams``,
``traffic.roce.timely.TimelyParams`` and ``traffic.uet.cc.NsccParams`` without
their unit suffix; a value takes the
unit its field has: a duration for ``*_ns`` fields (``cnp_interval=20ms``),
a rate for ``*_bps`` ones (``rai=500Kbps``), bytes for ``byte_counter`` and
``*_bytes`` (``256K``), a plain number otherwise (``g=0.0625``).  The result is the rank
config's ``cc_params`` ({field: number}), checked here against the
dataclass so a wrong name or value stops the run before anything is built.
"""

from dataclasses import fields

from emulator.errors import ConfigError
from emulator.experiments.workloads.collective import parse_sizes
from emulator.fabric.units import parse_duration, parse_rate
from traffic.roce.dcqcn import DcqcnParams
from traffic.roce.timely import TimelyParams
from traffic.uet.cc import NsccParams


def _classes():
    return {"dcqcn": DcqcnParams, "timely": TimelyParams, "nscc": NsccParams}


def names(cc):
    """{name on the command line: dataclass field} for congestion control ``cc``."""
    out = {}
    for f in fields(_classes()[cc]):
        if f.name == "line_bps":
            continue
        short = f.name
        for suffix in ("_ns", "_bps"):
            if short.endswith(suffix):
                short = short[:-len(suffix)]
        out["min_rate" if short == "min" else short] = f.name
    return out


def _value(field, text):
    if field.endswith("_ns"):
        return int(round(parse_duration(text) * 1e9))
    if field.endswith("_bps"):
        return parse_rate(text)
    if field == "byte_counter" or field.endswith("_bytes"):
        (size,) = parse_sizes(text, "--cc-param")
        return size
    number = float(text)
    return int(number) if number == int(number) and "." not in text else number


def parse(items, cc, line_bps=40e6):
    """``["g=0.0625", ...]`` -> {field: value} for ``cc``; ConfigError on a bad one."""
    if not items:
        return {}
    if cc not in _classes():
        raise ConfigError("--cc-param", f"parameters are for --cc dcqcn, timely or nscc, "
                                        f"not {cc}")
    known, out = names(cc), {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or name not in known:
            raise ConfigError("--cc-param", f"{item!r}: NAME=VALUE with NAME one of "
                                            f"{', '.join(sorted(known))} ({cc})")
        try:
            out[known[name]] = _value(known[name], text.strip())
        except (ValueError, ConfigError) as e:
            raise ConfigError("--cc-param", f"{item!r}: {e}")
    try:
        _classes()[cc](line_bps, **out)
    except (TypeError, ValueError) as e:
        raise ConfigError("--cc-param", f"{' '.join(items)}: {e}")
    return out
