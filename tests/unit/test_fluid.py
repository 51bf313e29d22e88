"""Fair shares of the dragonfly's fixed-split routing modes (emulator/fabric/analysis/fluid.py)."""

import pytest

from controller import policy, topology
from emulator.fabric import addressing, presets
from emulator.fabric.analysis import fluid


@pytest.fixture(scope="module")
def df():
    return presets.build("dragonfly")


def test_max_min_fills_progressively_and_caps_at_injection():
    cap = {"x": 1.0, "y": 3.0}
    # flows 0 and 1 share x; flow 2 alone on y (capped at 1, its injection)
    assert max_min(cap, [{"x": 1}, {"x": 1, "y": 1}, {"y": 1}]) == pytest.approx([0.5, 0.5, 1])
    # half a flow's traffic on a link counts half
    assert max_min({"x": 1.0}, [{"x": 0.5}, {"x": 0.5}]) == pytest.approx([1, 1])


def max_min(cap, shares):
    return fluid.max_min(cap, shares)


def test_adversarial_fair_shares_are_the_textbook_ones(df):
    c = fluid.fair_shares(df, fluid.adversarial(df))
    assert c["minimal"] == {"mean": 0.125, "lowest": 0.125}             # 1/(a*p)
    assert c["valiant"]["mean"] == pytest.approx(9 / 16)                 # all 9 groups


def test_adversarial_sends_host_k_of_group_i_to_host_k_of_group_i_plus_1(df):
    pairs = dict(fluid.adversarial(df))
    assert len(pairs) == 72 and pairs["h1"] == "h9" and pairs["h8"] == "h16"
    assert pairs["h65"] == "h1"                     # group 9 wraps to group 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_permutation_ceilings_in_the_known_ranges(df, seed):
    pairs = fluid.permutation(df, seed)
    assert sorted(d for _, d in pairs) == sorted(h.name for h in df.hosts)
    assert all(s != d for s, d in pairs)
    assert pairs == fluid.permutation(df, seed) != fluid.permutation(df, seed + 10)
    c = fluid.fair_shares(df, pairs)
    assert 0.24 <= c["minimal"]["lowest"] <= 0.34
    # a random permutation's minimal mean is far above its lowest: most flows have a
    # global link to themselves
    assert c["minimal"]["mean"] > 1.5 * c["minimal"]["lowest"]


def test_fluid_minimal_paths_are_the_controllers_routes(df):
    """The model's minimal shares cross exactly the links the controller routes over."""
    topo = topology.from_dict(addressing.plan(df, "ab12"))
    routes = policy.next_hops(topo, topo.all_ports())
    g = fluid.Graph(df)
    name = {s.dpid: s.name for s in topo.switches}
    ip = {hp.host: hp for hp in topo.host_ports}
    for src, dst in fluid.permutation(df, 7)[:30]:
        walked, sw = set(), ip[src].dpid
        while sw != ip[dst].dpid:
            (port,) = routes[sw][ip[dst].ip]          # a dragonfly's minimal route is unique
            peer, _ = topo.peer_of(sw, port)
            walked.add((name[sw], name[peer]))
            sw = peer
        model = {k for k, v in g.minimal(src, dst).items() if v > 0 and k[0] in g.group
                 and k[1] in g.group}
        assert model == walked, (src, dst)


def test_valiant_through_a_third_group_takes_two_global_hops(df):
    g = fluid.Graph(df)
    load = g.via("h1", "h9", 5)                      # group 1 -> group 2 through group 5
    crossed = sum(v for (a, b), v in load.items() if g.is_global(a, b))
    assert crossed == pytest.approx(2)
    assert sum(v for (a, b), v in g.via("h1", "h9", 1).items()
               if g.is_global(a, b)) == pytest.approx(1)
