"""compare --routing: the modes it takes, its rows and table (pure parts)."""

import pytest

from emulator.errors import ConfigError
from emulator.experiments.compare import routing as routing_cmp


def test_modes_are_checked():
    assert routing_cmp.parse_modes("minimal, valiant") == ["minimal", "valiant"]
    assert routing_cmp.parse_modes("minimal,ugal,ugal-l") == ["minimal", "ugal", "ugal-l"]
    with pytest.raises(ConfigError, match="unknown routing 'par'"):
        routing_cmp.parse_modes("par")


def report(frac, pattern="permutation", seed=2, window=True):
    return {"pattern": pattern, "seed": seed, "regime": "lossy, closed-loop (RC + dcqcn)",
            "goodput": {"mean": frac if window else None, "min": frac / 2 if window else None,
                        "window": {"seconds": 2.5} if window else None,
                        "no_window": None if window else "a sender died with data queued"},
            "completion": {"mean": frac + 0.05, "min": frac / 3},
            "wrong": 0, "failed_qps": [], "fidelity": {"verdict": "faithful"},
            "utilisation": {"local": {"mean": 0.2}, "global": {"mean": 0.4}},
            "transport": {"retransmitted_share": 0.01, "timeouts": 0, "naks_received": 3,
                          "cnps_sent": 40},
            "bounds": {"minimal": {"bound_min": 0.33, "bound_mean": 0.65},
                       "valiant": {"bound_min": 0.8, "bound_mean": 0.84},
                       "minimal+valiant": {"bound_min": 0.8, "bound_mean": 0.84}},
            "fair_share": {"minimal": {"mean": 0.6, "lowest": 0.33},
                           "valiant": {"mean": 0.56, "lowest": 0.53}}}


def test_a_row_carries_the_mode_its_bounds_and_the_verdict():
    r = routing_cmp.row("valiant", report(0.42))
    assert {k: r[k] for k in ("routing", "workload", "goodput_mean", "goodput_min",
                              "completion_mean", "path_set", "bound_min", "bound_mean",
                              "fair_share", "fidelity", "seed")} == {
        "routing": "valiant", "workload": "permutation", "goodput_mean": 0.42,
        "goodput_min": 0.21, "completion_mean": 0.47, "path_set": "valiant",
        "bound_min": 0.8, "bound_mean": 0.84, "fair_share": 0.56, "fidelity": "faithful",
        "seed": 2}
    assert r["of_bound"] == pytest.approx(0.5, abs=1e-3) and r["within_bounds"] is True
    rows = [r, routing_cmp.row("minimal", report(0.3)), routing_cmp.row("valiant", report(0.5))]
    med = {m["routing"]: m for m in routing_cmp.medians(rows, ["minimal", "valiant"])}
    assert med["valiant"]["goodput_mean"] == pytest.approx(0.46)
    assert med["minimal"]["runs"] == 1 and med["minimal"]["bound_mean"] == 0.65
    text = routing_cmp.table(rows)
    assert "valiant" in text and "0.840" in text and "faithful" in text


def test_ugal_is_held_to_minimal_plus_valiant_paths_and_has_no_fair_share():
    rep = dict(report(0.7), nonminimal_share=0.25)
    r = routing_cmp.row("ugal", rep)
    assert (r["path_set"], r["bound_mean"], r["fair_share"], r["nonminimal_share"]) == (
        "minimal+valiant", 0.84, None, 0.25)
    assert r["of_bound"] == pytest.approx(0.833, abs=1e-3)
    assert " 0.250 " in routing_cmp.table([r])


def test_a_row_without_a_window_says_why_and_gives_no_steady_figure():
    r = routing_cmp.row("minimal", report(0.1, window=False))
    assert r["goodput_mean"] is None and r["of_bound"] is None and r["window_s"] is None
    assert r["completion_mean"] == pytest.approx(0.15)
    text = routing_cmp.table([r])
    assert "no steady window (a sender died with data queued)" in text
    (m,) = routing_cmp.medians([r], ["minimal"])
    assert m["goodput_mean"] is None and m["windows"] == 0


def test_a_goodput_above_its_bound_is_flagged():
    # minimal's bounds are 0.33 (lowest) and 0.65 (mean); 3 % over is still within
    assert routing_cmp.row("minimal", report(0.66))["within_bounds"] is True
    over = routing_cmp.row("minimal", report(0.68))
    assert over["within_bounds"] is False
    assert "minimal seed 2: goodput above its LP bound" in routing_cmp.table([over])
    low = dict(report(0.6), goodput=dict(report(0.6)["goodput"], min=0.35))
    assert routing_cmp.row("minimal", low)["within_bounds"] is False
    assert routing_cmp.row("minimal", report(0.1, window=False))["within_bounds"] is None
