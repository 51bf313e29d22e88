"""The switch-agent model's table (priority and occupancy), its data-plane lag, the
proxy's reading of real FLOW_MOD and GROUP_MOD bytes, and the profiles' sources."""

import subprocess
import sys

import pytest

from controller.messages import Bucket, FlowMod, GroupMod, Output, match
from controller.ofcodec import encode
from emulator.dataplane.ovs import agent_proxy as ap
from emulator.fabric import switch_agent as sa
from emulator.fabric.agents import profiles
from emulator.fabric.switch_agent import (ADD, BARRIER, CHANGE, DELETE, MODIFY, Agent, Change,
                                          Params, Table)
from tests.conftest import REPO


def ins(prio, i=0, table=0):
    return Change(ADD, table, prio, (table, prio, i))


def costs(params, changes, table=None):
    """ms each change takes, one after the other, on one agent."""
    a = Agent(params, table)
    out, last = [], 0.0
    for c in changes:
        t = a.to_switch(0.0, CHANGE, ops=[c]) * 1e3
        out.append(round(t - last, 6))
        last = t
    return out


SHIFT = Params(table_rate=1000.0, shift_ms=0.5, shift_order="lower")


def test_same_priority_insertions_cost_the_same_however_full_the_table():
    assert costs(SHIFT, [ins(100, i) for i in range(50)]) == [1.0] * 50


def test_an_insertion_moves_the_lower_priority_rules_so_increasing_order_is_slow():
    up = costs(SHIFT, [ins(p) for p in range(1, 6)])           # each above all the others
    down = costs(SHIFT, [ins(p) for p in range(5, 0, -1)])     # each below all the others
    assert up == [1.0, 1.5, 2.0, 2.5, 3.0]                     # grows with the occupancy
    assert down == [1.0] * 5
    higher = Params(table_rate=1000.0, shift_ms=0.5, shift_order="higher")
    assert costs(higher, [ins(p) for p in range(5, 0, -1)]) == [1.0, 1.5, 2.0, 2.5, 3.0]
    other = Params(table_rate=1000.0, shift_ms=0.5, shift_order="other")
    assert costs(other, [ins(1, 0), ins(1, 1), ins(2), ins(1, 2)]) == [1.0, 1.0, 2.0, 1.5]


def test_modifications_cost_their_factor_deletions_free_their_place():
    p = Params(table_rate=1000.0, modify_factor=2.0, shift_ms=0.5)
    t = Table()
    got = costs(p, [ins(1), ins(5), Change(MODIFY, 0, 1, (0, 1, 0)),
                    Change(DELETE, 0, 1, (0, 1, 0)), ins(9)], t)
    assert got == [1.0, 1.5, 2.0, 1.0, 1.5]            # the last moves only the 5
    assert len(t) == 2 and t.moved(0, 7, "lower") == 1
    # re-adding a present entry replaces it: a modification, nothing moves
    assert costs(p, [ins(3), ins(3)]) == [1.0, 2.0]
    # a group's change moves nothing
    assert costs(p, [Change(ADD, None, 0, ("group", 1))] * 2) == [1.0, 1.0]


def test_a_lagging_data_plane_gets_changes_after_the_barrier_is_answered():
    a = Agent(Params(table_rate=1000.0, dp_lag_ms=250.0))
    last = [a.to_switch(0.0, CHANGE, ops=[ins(1, i)]) for i in range(10)][-1]
    barrier = a.to_switch(0.0, BARRIER)
    assert barrier * 1e3 == pytest.approx(10.0)         # after the 10 acknowledgements
    assert (last - barrier) * 1e3 == pytest.approx(250.0)


def test_scaling_stretches_the_new_times_too():
    s = Params(table_rate=100.0, shift_ms=2.0, dp_lag_ms=10.0).scaled(3)
    assert (s.shift_ms, s.dp_lag_ms, s.change_ms()) == pytest.approx((6.0, 30.0, 30.0))


def test_the_proxy_reads_what_each_real_message_does():
    flow = FlowMod(0, 1000, match(eth_type=0x0800, ipv4_dst="10.0.0.1"), (Output(3),))
    got = ap.change_of(encode(flow))
    assert (got.op, got.table, got.priority) == (ADD, 0, 1000)
    assert ap.change_of(encode(flow.as_command("modify"))).op == MODIFY
    gone = ap.change_of(encode(flow.as_command("delete")))
    assert gone.op == DELETE and gone.key == got.key      # the entry it deletes
    other = ap.change_of(encode(FlowMod(0, 1000, match(eth_type=0x0800, ipv4_dst="10.0.0.2"),
                                        (Output(3),))))
    assert other.key != got.key
    group = GroupMod(7, "all", (Bucket((Output(1),)),))
    g = ap.change_of(encode(group))
    assert (g.op, g.table, g.key) == (ADD, None, ("group", 7))
    assert ap.change_of(encode(group.as_command("modify"))).op == MODIFY
    kind, ops = ap.classify_down(encode(flow))
    assert kind == CHANGE and ops == [got]
    assert ap.classify_down(b"\x06\x14\x00\x08\x00\x00\x00\x01") == (BARRIER, [])
    # a message too short to read is a change of unknown kind, never an exception
    assert ap.change_of(b"\x06\x0e\x00\x08\x00\x00\x00\x01").op == MODIFY


def test_every_number_of_every_profile_says_where_it_comes_from():
    defaults = Params()
    for name, p in profiles.PRESETS.items():
        src = profiles.PROVENANCE[name]
        for key, value in p.as_dict().items():
            if value != getattr(defaults, key):
                assert key in src and not src[key].startswith("-"), (name, key)
        assert name in profiles.ABOUT and name in profiles.BENCH
    listed = sa.listing()
    assert all(name in listed for name in profiles.PRESETS) and "ideal" in listed


def test_each_profile_is_rebuilt_from_the_published_figures_it_names():
    # BUILT_FROM lists every figure a profile's parameters take, so a benchmark whose
    # figure is not among them really checks something the profile was not built from
    def rebuilt(param, figs):
        if param == "table_rate":
            return round(1e3 / figs[0], 3)
        if param == "modify_factor" and len(figs) == 2:
            return figs[1] / figs[0]
        return figs[0]
    defaults = Params()
    for name, p in profiles.PRESETS.items():
        numbers = {k for k, v in p.as_dict().items()
                   if v != getattr(defaults, k) and not isinstance(v, bool)}
        assert set(profiles.BUILT_FROM[name]) == numbers, name
        for param, figs in profiles.BUILT_FROM[name].items():
            assert getattr(p, param) == pytest.approx(rebuilt(param, figs)), (name, param)


def test_a_benchmark_is_independent_only_of_a_figure_its_profile_was_not_built_from(
        monkeypatch):
    for name, bench in profiles.BENCH.items():
        assert profiles.independent(name) == (bench.published_ms
                                              not in profiles.built_from(name)), name
    # a check figure of its own (the time of another pattern, say) makes it independent
    other = profiles.BENCH["hardware"]._replace(published_ms=5.0)
    monkeypatch.setitem(profiles.BENCH, "hardware", other)
    assert profiles.independent("hardware")
    monkeypatch.setitem(profiles.BENCH, "hardware", other._replace(published_ms=8.0))
    assert not profiles.independent("hardware")


def test_every_profile_parses_by_name_and_as_a_base(tmp_path):
    for name, p in profiles.PRESETS.items():
        assert sa.parse(name) == p
        f = tmp_path / f"{name}.yaml"
        f.write_text(f"base: {name}\nevent_ms: 3\n")
        assert sa.parse(str(f)).event_ms == 3
    assert sa.parse_fabric({"default": "kuzniar-pica8", "leaf": "ideal"}).default == \
        profiles.PRESETS["kuzniar-pica8"]


def test_the_command_line_lists_the_profiles_and_refuses_an_unknown_one():
    listed = subprocess.run([sys.executable, "-m", "emulator", "drill", "--switch-agent",
                             "list"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert all(name in listed.stdout for name in profiles.PRESETS)
    bad = subprocess.run([sys.executable, "-m", "emulator", "run", "--switch-agent",
                          "hp9000"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    (line,) = [x for x in (bad.stdout + bad.stderr).splitlines() if x.startswith("error:")]
    assert "hp9000" in line and all(name in line for name in profiles.PRESETS), line
