"""LP bounds on a traffic matrix's throughput (emulator/fabric/analysis/bounds.py)."""

import pytest

from emulator.fabric import presets
from emulator.fabric.analysis import bounds, fluid


@pytest.fixture(scope="module")
def df():
    return presets.build("dragonfly")


def test_adversarial_minimal_is_one_over_a_p(df):
    """Every host of a group shares the one global link to the next group: 1/(a*p)."""
    b = bounds.bounds(df, fluid.adversarial(df), "minimal")
    assert b["bound_min"] == pytest.approx(1 / 8) and b["bound_mean"] == pytest.approx(1 / 8)
    small = presets.build("dragonfly", {"a": "3", "h": "1", "p": "1"})
    b = bounds.bounds(small, fluid.adversarial(small), "minimal")
    assert b["bound_min"] == pytest.approx(1 / 3, abs=1e-4)


def test_adversarial_valiant_over_all_groups_is_nine_sixteenths(df):
    """Each group's 8 hosts send 2/9 of their bytes over one global hop and 7/9 over
    two; the group's 8 global links carry 16/9 per unit of rate: 9/16."""
    for ps in ("valiant", "minimal+valiant"):
        b = bounds.bounds(df, fluid.adversarial(df), ps)
        assert b["bound_min"] == pytest.approx(9 / 16) == b["bound_mean"]
    # the small dragonfly (4 groups): 2/4 of the bytes over one hop, 2/4 over two
    small = presets.build("dragonfly", {"a": "3", "h": "1", "p": "1"})
    assert bounds.bounds(small, fluid.adversarial(small), "valiant")["bound_min"] == \
        pytest.approx(2 / 3, abs=1e-4)


def test_a_leaf_spine_has_full_bisection_and_an_oversubscribed_one_its_ratio():
    pairs = [(f"h{i}", f"h{(i + 1) % 8 + 1}") for i in range(1, 9)]   # every flow cross-leaf
    full = bounds.bounds(presets.build("leaf-spine"), pairs, "minimal")
    assert full["bound_min"] == pytest.approx(1.0) and full["bound_mean"] == pytest.approx(1.0)
    assert full["paths"] == 8 * 4                                      # one per spine
    over = presets.build("leaf-spine", {"oversubscription": "4"})
    b = bounds.bounds(over, pairs, "minimal")
    assert b["bound_min"] == pytest.approx(0.25) and b["bound_mean"] == pytest.approx(0.25)


def test_the_two_bounds_differ_where_the_slowest_flow_is_not_the_mean():
    """Two flows share a link, a third has its own: the slowest gets 1/2, the mean
    can be (1/2 + 1/2 + 1) / 3; taking the whole shared link for one flow gives the
    same total, so the mean bound is 2/3, not more."""
    cap = {("x", "y"): 1.0, ("u", "v"): 1.0}
    flows = [[[("x", "y")]], [[("x", "y")]], [[("u", "v")]]]
    lo, mean = bounds.solve(cap, flows, [1.0, 1.0, 1.0])
    assert lo == pytest.approx(0.5) and mean == pytest.approx(2 / 3)
    # a second path lets both shared flows through at once
    cap[("x", "z")] = 1.0
    flows[1].append([("x", "z")])
    assert bounds.solve(cap, flows, [1.0, 1.0, 1.0]) == pytest.approx((1.0, 1.0))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bounds_hold_over_the_fixed_splits_fair_shares(df, seed):
    """A fixed split's max-min rates are a feasible routing over its path set, so the
    bounds are at least the fair shares; a larger path set bounds no lower."""
    pairs = fluid.permutation(df, seed)
    fair = fluid.fair_shares(df, pairs)
    got = {ps: bounds.bounds(df, pairs, ps) for ps in bounds.PATH_SETS}
    for mode in ("minimal", "valiant"):
        assert got[mode]["bound_min"] >= fair[mode]["lowest"] - 1e-4
        assert got[mode]["bound_mean"] >= fair[mode]["mean"] - 1e-4
    assert got["minimal+valiant"]["bound_min"] >= got["minimal"]["bound_min"]
    assert got["minimal+valiant"]["bound_mean"] >= got["minimal"]["bound_mean"]
    assert got["minimal"]["bound_min"] in (pytest.approx(1 / 3, abs=1e-4),
                                           pytest.approx(1 / 4, abs=1e-4))


def test_minimal_paths_take_one_global_hop_and_valiant_through_a_third_group(df):
    g = bounds.Paths(df)
    (p,) = g.paths("h1", "h9", "minimal")          # one link per pair of groups
    assert sum(g.group[a] != g.group[b] for a, b in zip(p[1:-2], p[2:-1])) == 1
    paths = g.paths("h1", "h9", "valiant")
    assert len(paths) == 1 + 7 and p in paths       # the minimal one, and one per third group
    assert all(sum(g.group[a] != g.group[b] for a, b in zip(q[1:-2], q[2:-1])) <= 2
               for q in paths)


def test_an_unknown_path_set_or_valiant_without_groups_is_refused(df):
    with pytest.raises(ValueError, match="path set"):
        bounds.Paths(df).paths("h1", "h9", "par")
    with pytest.raises(ValueError, match="fabric of groups"):
        bounds.Paths(presets.build("leaf-spine")).paths("h1", "h3", "valiant")
