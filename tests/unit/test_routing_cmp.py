"""compare --routing: the modes it takes, its rows and table (pure parts)."""

import pytest

from emulator.errors import ConfigError
from emulator.experiments.compare import routing as routing_cmp


def test_modes_are_checked():
    assert routing_cmp.parse_modes("minimal, valiant") == ["minimal", "valiant"]
    assert routing_cmp.parse_modes("minimal,ugal,ugal-l") == ["minimal", "ugal", "ugal-l"]
    with pytest.raises(ConfigError, match="unknown routing 'par'"):
        routing_cmp.parse_modes("par")


def report(frac, pattern="permutation", seed=2):
    return {"pattern": pattern, "seed": seed, "throughput_fraction": frac,
            "min_fraction": frac / 2, "wrong": 0, "fidelity": {"verdict": "faithful"},
            "utilisation": {"local": {"mean": 0.2}, "global": {"mean": 0.4}},
            "ceilings": {"minimal": {"mean": 0.6, "saturation": 0.33},
                         "valiant": {"mean": 0.56, "saturation": 0.53},
                         "optimum": {"mean": 0.8, "saturation": 0.79}}}


def test_a_row_carries_the_mode_its_ceiling_and_the_verdict():
    r = routing_cmp.row("valiant", report(0.42))
    assert {k: r[k] for k in ("routing", "workload", "throughput_fraction", "ceiling",
                              "fidelity", "seed")} == {
        "routing": "valiant", "workload": "permutation", "throughput_fraction": 0.42,
        "ceiling": 0.56, "fidelity": "faithful", "seed": 2}
    assert r["of_ceiling"] == pytest.approx(0.75, abs=1e-3)
    rows = [r, routing_cmp.row("minimal", report(0.3)), routing_cmp.row("valiant", report(0.5))]
    med = {m["routing"]: m for m in routing_cmp.medians(rows, ["minimal", "valiant"])}
    assert med["valiant"]["throughput_fraction"] == pytest.approx(0.46)
    assert med["minimal"]["runs"] == 1
    text = routing_cmp.table(rows)
    assert "valiant" in text and "0.560" in text and "faithful" in text


def test_ugal_is_held_to_the_optimum_and_its_share_is_shown():
    rep = dict(report(0.7), nonminimal_share=0.25)
    r = routing_cmp.row("ugal", rep)
    assert (r["ceiling"], r["saturation"], r["nonminimal_share"]) == (0.8, 0.79, 0.25)
    assert r["of_ceiling"] == pytest.approx(0.875)
    assert "nonmin" in routing_cmp.table([r]) and " 0.250  faithful" in routing_cmp.table([r])
