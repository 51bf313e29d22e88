"""A switch-agent profile reproduces its published micro-benchmark through the proxy
against Open vSwitch (root; bench/bench_switch_agents.py measures every profile):
insertions of one priority into an empty table at He et al.'s 3.12 ms per rule, a
data plane 250 ms behind the barrier replies as Kuźniar et al. saw on the HP 5406zl,
and the ideal agent adding next to nothing."""

import pytest

from emulator.dataplane.ovs.agent_bench import Bench
from emulator.fabric.agents import profiles
from emulator.fabric.switch_agent import ADD, Params


def test_insertions_take_the_published_time_per_rule_through_the_proxy():
    bench = profiles.BENCH["hardware"]
    with Bench(profiles.PRESETS["hardware"]) as b:
        got = b.run(ADD, 30)
    assert got["per_rule_ms"] == pytest.approx(bench.published_ms, rel=0.25), got
    # the barrier is honoured: the table held them all by the time it was answered
    assert got["lag_ms"] < 20, got


def test_a_lagging_data_plane_is_behind_the_barrier_reply_by_the_published_time():
    bench = profiles.BENCH["kuzniar-hp5406zl"]
    with Bench(profiles.PRESETS["kuzniar-hp5406zl"]) as b:
        got = b.run(ADD, 30)
    assert got["lag_ms"] == pytest.approx(bench.published_ms, rel=0.25), got
    assert got["barrier_ms"] < 50, got


def test_the_ideal_agent_adds_next_to_nothing():
    with Bench(Params()) as b:
        got = b.run(ADD, 30)
    assert got["per_rule_ms"] < 1.0 and got["lag_ms"] < 20, got
