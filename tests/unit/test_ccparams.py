"""--cc-param: names, units and refusals (emulator.experiments.spec.ccparams)."""

import pytest

from emulator.errors import ConfigError
from emulator.experiments.spec import ccparams
from traffic.ranks.config import cc_params
from traffic.roce.dcqcn import MS, DcqcnParams


def test_names_drop_the_unit_suffix():
    dcqcn = ccparams.names("dcqcn")
    assert dcqcn["cnp_interval"] == "cnp_interval_ns" and dcqcn["rai"] == "rai_bps"
    assert dcqcn["min_rate"] == "min_bps" and dcqcn["g"] == "g"
    assert "line" not in dcqcn and "line_bps" not in dcqcn
    assert ccparams.names("timely")["t_high"] == "t_high_ns"


def test_values_take_the_unit_of_their_field():
    got = ccparams.parse(["cnp_interval=20ms", "rai=500Kbps", "g=0.0625", "byte_counter=1M",
                          "fast_recovery_steps=3"], "dcqcn")
    assert got == {"cnp_interval_ns": 20 * MS, "rai_bps": 500_000, "g": 0.0625,
                   "byte_counter": 1 << 20, "fast_recovery_steps": 3}
    p = DcqcnParams(40e6, **got)
    assert p.cnp_interval_ns == 20 * MS and p.rhai_bps == 40e6 / 8   # the rest: defaults
    assert ccparams.parse([], "none") == {}


def test_the_rank_builds_its_reaction_point_from_them():
    cfg = {"cc": "dcqcn", "rate_bps": 40e6, "cc_params": {"g": 0.5}}
    assert cc_params(cfg)["dcqcn"].g == 0.5


@pytest.mark.parametrize("items,cc,what", [
    (["bogus=1"], "dcqcn", "NAME one of"),
    (["g"], "dcqcn", "NAME=VALUE"),
    (["g=2"], "dcqcn", "0 < g < 1"),
    (["cnp_interval=20"], "dcqcn", "duration needs a unit"),
    (["rai=fast"], "dcqcn", "rate"),
    (["t_low=30ms"], "timely", "t_low"),         # above t_high: the dataclass refuses
    (["g=0.1"], "none", "dcqcn or timely"),
])
def test_bad_parameters_are_refused_by_name(items, cc, what):
    with pytest.raises(ConfigError) as e:
        ccparams.parse(items, cc)
    assert what in str(e.value)
