"""Unit tests of emulator.experiments.compare.compare's pure parts: fairness, ring orders, the ECMP
balls-into-bins expectation, uplink series and the table (no root)."""

import pytest

from emulator.experiments.compare import compare
from emulator.experiments.measure import stats, uplinks
from emulator.fabric import addressing, presets


@pytest.fixture(scope="module")
def topo():
    return addressing.plan(presets.build(
        "leaf-spine", {"spines": 4, "leaves": 4, "hosts_per_leaf": 4}), "ab12")


def test_jain():
    assert stats.jain([1, 1, 1, 1]) == pytest.approx(1.0)
    assert stats.jain([4, 0, 0, 0]) == pytest.approx(0.25)
    assert stats.jain([]) is None and stats.jain([0, 0]) is None


def test_strided_ring_crosses_the_spine_every_hop(topo):
    order = uplinks.ring_indices(topo, "strided")
    assert sorted(order) == list(range(16)) and order[:5] == [0, 4, 8, 12, 1]
    assert len(uplinks.ring_connections(topo, order)) == 16
    # host order is already leaf by leaf here: one spine crossing per leaf
    assert len(uplinks.ring_connections(topo, "naive")) == 4
    assert len(uplinks.ring_connections(topo, "topology")) == 4


def test_ecmp_expectation_matches_the_literature():
    # n flows from one leaf on n paths, each alone at its destination: PLATFORM.md
    for n, expect in ((2, 0.75), (4, 0.51)):
        conns = [("l1", f"l{i + 2}") for i in range(n)]
        got = uplinks.ecmp_expectation(conns, n, trials=20000)["efficiency"]
        assert got == pytest.approx(expect, abs=0.02)
    # more QPs per connection: more entropy, closer to 1
    conns = [("l1", "l2")] * 4
    effs = [uplinks.ecmp_expectation(conns, 4, q, trials=5000)["efficiency"] for q in (1, 2, 4, 8)]
    assert effs == sorted(effs) and effs[-1] > effs[0] + 0.2
    # one connection per leaf pair, no collision possible at the uplinks
    one = uplinks.ecmp_expectation([("l1", "l2"), ("l2", "l3")], 4)
    assert one["efficiency"] == 1.0 and one["p_no_collision"] == 1.0


def test_uplink_series_spread_and_load_bound(topo):
    ups = uplinks.uplinks(topo)
    assert len(ups) == 16
    rate = ups[0][4]
    intf = ups[0][2]
    zero = {u[2]: (0, 0, 0) for u in ups}
    # 0.1 s at 2x the link rate on one uplink, the link rate on the others
    after = {u[2]: (int(rate / 8 * 0.1), 0, 0) for u in ups}
    after[intf] = (int(rate / 8 * 0.2), 0, 0)
    series = uplinks.uplink_series(topo, [(0.0, zero), (0.1, after)])
    sp = uplinks.spread(series)
    assert sp["max_over_mean"] == pytest.approx(2 / (17 / 16), rel=1e-3)
    assert 0.9 < sp["jain"] < 1.0
    assert uplinks.load_bound(0.9, sp["per_uplink"]) == pytest.approx(0.45, rel=1e-3)
    assert uplinks.load_bound(0.9, {"a": 0.5}) == 0.9


def test_summarize_and_table():
    runs = [{"mode": "ecmp", "ring": "strided", "qps": 1, "efficiency": e, "busbw_Mbps": 5 * e,
             "load_bound_eff": e / 2, "expected": 0.4, "max_over_mean": 2.0, "jain": 0.6,
             "reordered": 0, "wrong": 0} for e in (0.8, 0.9)]
    rows = compare.summarize(runs)
    assert len(rows) == 1 and rows[0]["reps"] == 2
    assert rows[0]["lb_min"] == 0.4 and rows[0]["lb_max"] == 0.45
    text = compare.table(rows)
    assert "ecmp" in text and "0.425" in text and "0.400" in text
    assert "repeated" not in text


def run_doc(eff, verdict="faithful", wrong=0, disturbed=()):
    return {"mode": "spray", "ring": "strided", "qps": 1, "efficiency": eff,
            "busbw_Mbps": 40 * eff, "load_bound_eff": eff, "max_over_mean": 1.1,
            "jain": 0.99, "reordered": 5, "wrong": wrong, "dir": "/r",
            "fidelity": {"verdict": verdict, "reasons": ["the machine was 100% busy"]},
            "disturbed_attempts": list(disturbed)}


def test_median_and_the_repetitions_run_again_after_a_disturbed_attempt():
    bound = run_doc(0.95, "emulator-bound")
    # repeated only while attempts remain, the verdict is not faithful, nothing lost
    assert compare.should_repeat(bound, 0, 1) and not compare.should_repeat(bound, 1, 1)
    assert not compare.should_repeat(run_doc(0.9), 0, 1)
    assert not compare.should_repeat(run_doc(0.5, "emulator-bound", wrong=2), 0, 1)
    assert not compare.should_repeat(bound, 0, 0)
    kept = compare.disturbed_attempt(bound)
    assert kept["verdict"] == "emulator-bound" and kept["efficiency"] == 0.95
    runs = [run_doc(0.80), run_doc(0.86, disturbed=[kept]), run_doc(0.99),
            run_doc(0.90), run_doc(0.97)]
    [row] = compare.summarize(runs)
    assert row["eff_median"] == 0.90 and row["efficiency"] == pytest.approx(0.904)
    assert row["repeated"] == 1 and row["emulator_bound"] == 0
    text = compare.table([row])
    line = text.splitlines()[1]
    assert line.split()[4:6] == ["0.904", "0.900"]
    assert line.endswith("faithful (1 repeated)")
    assert "disturbed_attempts in compare.json" in text
    # still not faithful after its retry: marked
    [row] = compare.summarize([runs[0]] + runs[2:4]
                               + [run_doc(0.97, "emulator-bound", disturbed=[kept])])
    assert compare.fidelity_cell(row) == "EMULATOR-BOUND in 1/4 (1 repeated)"


def test_bad_mode_is_a_config_error():
    from emulator.errors import ConfigError
    from emulator.fabric import presets
    from emulator.fabric.runspec import RunSpec

    class A:
        modes, reps, sizes = "ecmp,wcmp", 1, "1M"
    with pytest.raises(ConfigError, match="wcmp"):
        compare.main(RunSpec(presets.build("leaf-spine", {})), A())
