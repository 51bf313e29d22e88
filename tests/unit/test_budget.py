"""The machine's budget: the rate search, the hop arithmetic and the load check."""

from emulator.experiments.measure import budget
from emulator.fabric import presets
from emulator.fabric.addressing import plan


def test_search_doubles_then_bisects_to_the_largest_faithful_rate():
    tried = []

    def trial(rate):
        tried.append(rate)
        return rate <= 700
    best, log = budget.search(trial, start_bps=100, max_bps=10_000, steps=4)
    assert [r for r, _ in log][:4] == [100, 200, 400, 800]     # doubling until it fails
    assert 650 <= best <= 700 and all(ok == (r <= 700) for r, ok in log)
    assert budget.search(lambda r: True, 100, 1000)[0] == 800    # never failed: the last
    assert budget.search(lambda r: False, 100, 1000, steps=2)[0] == 0
    assert [r for r, _ in log].count(800) == 2                  # a failure is tried twice


def test_one_stalled_trial_does_not_set_the_budget():
    stalls = {200}                    # the machine stalled once, during the 200 trial

    def trial(rate):
        if rate in stalls:
            stalls.discard(rate)
            return False
        return rate <= 700
    best, log = budget.search(trial, start_bps=100, max_bps=10_000, steps=4)
    assert (200, False) in log and (200, True) in log and 650 <= best <= 700


def test_a_trial_failed_under_hypervisor_steal_is_run_again():
    results = iter([(False, 0.09), (False, 0.12), (True, 0.02)])    # stolen twice, then ok
    calls = []

    def trial(rate):
        calls.append(rate)
        return next(results)
    assert budget.unless_stolen(trial, 0.05)(300) and calls == [300, 300, 300]
    calls.clear()
    # a failure with the CPUs to itself is the emulator's: not repeated
    assert not budget.unless_stolen(lambda r: calls.append(r) or (False, 0.01), 0.05)(300)
    assert calls == [300]
    calls.clear()
    # a host that steals on every trial: a failure after `attempts`
    assert not budget.unless_stolen(lambda r: calls.append(r) or (False, 0.2), 0.05, 3)(300)
    assert calls == [300] * 3


def test_trial_ok_needs_no_loss_a_faithful_verdict_and_low_latency():
    good = {"verdict": "faithful", "latency_ms": {"p90": 1.0, "p99": 12.0}}
    assert budget.trial_ok(100, 100, good, 5.0, "p90")          # the tail is not judged
    assert not budget.trial_ok(100, 100, good, 5.0, "p99")
    assert not budget.trial_ok(100, 99, good, 5.0, "p90")
    assert not budget.trial_ok(100, 100, dict(good, verdict="emulator-bound"), 5.0, "p90")
    assert not budget.trial_ok(100, 100, {"verdict": "faithful", "latency_ms": {"p90": 9}},
                               5, "p90")
    assert not budget.trial_ok(100, 100, {"verdict": "faithful", "latency_ms": {}}, 5, "p90")
    assert not budget.trial_ok(0, 0, good, 5.0, "p90")


def test_hops_on_the_default_fabric():
    topo = plan(presets.build("leaf-spine", {}))
    assert budget.path_hops(topo, "h1", "h2") == 1            # same leaf
    assert budget.path_hops(topo, "h1", "h3") == 3            # leaf-spine-leaf
    assert budget.longest_path_hops(topo) == 3
    assert budget.longest_path_hops(plan(presets.build("dual-tor", {}))) == 5   # NIC switches


def test_the_load_check_against_a_budget():
    doc = budget.budget_doc(4170, one_hop_pps=80_000, three_hop_pps=60_000, key="k")
    assert doc["hop_pps"] == 180_000 and doc["faithful_bps_3hop"] == round(60_000 * 4170 * 8)
    default_mix = [(20e6, 4170, 3)] * 8                         # 160 Mbit/s, 8 % of it
    fits, msg = budget.check(default_mix, doc)
    assert fits and "8% of this machine's measured budget" in msg
    fits, msg = budget.check([(1e9, 4170, 3)] * 8, doc)
    assert not fits and "expect an emulator-bound result" in msg
    fits, msg = budget.check(default_mix, None)
    assert fits and "emulator calibrate" in msg
    assert budget.hop_pps([(8340, 1042.5, 2)]) == 2.0


def test_machine_key_names_what_a_calibration_is_valid_for():
    a = budget.machine_key("3.1.0", "netdev", 4170, cpu_model="X", ncpu=2)
    assert a != budget.machine_key("3.1.0", "netdev", 1098, cpu_model="X", ncpu=2)
    assert a != budget.machine_key("3.2.0", "netdev", 4170, cpu_model="X", ncpu=2)
    assert "netdev" in a and "4170" in a


def test_calibration_waits_for_a_quiet_machine():
    from emulator.experiments.calibrate import wait_quiet
    # (busy, total) jiffies: 90 % busy for two windows, then 10 %
    samples = iter([(0, 0), (90, 100), (180, 200), (190, 300)])
    slept, said = [], []
    assert wait_quiet(said.append, sample=lambda: next(samples), sleep=slept.append)
    assert len(slept) == 3 and not said
    busy = iter([(i * 95, i * 100) for i in range(100)])      # never quiet
    slept = []
    assert not wait_quiet(said.append, limit_s=2.0, sample=lambda: next(busy),
                          sleep=slept.append)
    assert len(slept) == 4 and "95% busy" in said[0]


def test_each_layout_has_its_own_budget_and_none_stands_in_for_another(tmp_path, monkeypatch):
    import json

    from emulator.experiments import calibrate
    monkeypatch.setattr(calibrate, "ovs_version", lambda: "3.1.0")
    base = budget.machine_key("3.1.0", "netdev", 4170)
    shared = {"frame_len": 4170, "hop_pps": 140e3}
    two = {"frame_len": 4170, "hop_pps": 90e3}
    path = tmp_path / "cache.json"
    path.write_text(json.dumps({base: shared, base + calibrate.layout_key("2"): two}))
    assert calibrate.cached_budget("netdev", 4170, str(path)) == shared
    assert calibrate.cached_budget("netdev", 4170, str(path), layout="2") == two
    assert calibrate.cached_budget("netdev", 4170, str(path), layout="per-switch") is None
    # another frame size of the same layout carries over; of another layout never
    assert calibrate.cached_budget("netdev", 1098, str(path), layout="2") == two
    assert calibrate.cached_budget("netdev", 1098, str(path)) == shared


def test_the_median_of_searches_errs_low_and_a_wide_spread_is_named():
    assert budget.median([12.0, 5.2, 8.6]) == 8.6
    assert budget.median([12.0, 5.2]) == 5.2                  # even count: the lower
    assert budget.median([7.0]) == 7.0
    assert budget.spread_note("3 hops", [8000, 9000, 12000]) is None
    note = budget.spread_note("3 hops", [5200, 12000, 8600])
    assert note.startswith("3 hops: the searches found 5.2k, 12.0k, 8.6k, more than 2x apart")
    assert budget.spread_note("1 hop", [0, 3000]) is not None   # one search found nothing
    assert budget.spread_note("1 hop", [0, 0]) == "1 hop: no search found a faithful rate"
