"""Rank config validation, flow/QP numbering, mix merging, CLI parsing."""

import pytest

from traffic.__main__ import parse_args, rate
from traffic.mix import merge_sent
from traffic.ranks.rank import ConfigError, flow_id, load_config, qpn
from traffic.roce.frames import udp_sport

RANKS = [{"ip": f"10.0.0.{i + 1}", "intf": f"h{i}-eth0", "leaf": f"l{i // 2}"}
         for i in range(4)]


def test_defaults_and_rings():
    cfg = load_config({"rank": 1, "ranks": RANKS})
    assert cfg["collective"] == "allreduce" and cfg["ring_order"] == [0, 1, 2, 3]
    ranks = [dict(r, leaf=f"l{i % 2}") for i, r in enumerate(RANKS)]
    cfg = load_config({"rank": 0, "ranks": ranks, "ring": "topology"})
    assert cfg["ring_order"] == [0, 2, 1, 3]
    assert load_config({"rank": 0, "ranks": RANKS, "ring": [3, 2, 1, 0]})["ring_order"] == [3, 2, 1, 0]


@pytest.mark.parametrize("bad,where", [
    ({"rank": 4}, "rank"), ({"rank": 0, "colective": "x"}, "unknown"),
    ({"rank": 0, "collective": "bcast"}, "collective"),
    ({"rank": 0, "sizes": [0]}, "sizes"), ({"rank": 0, "sizes": [1.5]}, "sizes"),
    ({"rank": 0, "ring": [0, 1]}, "ring"), ({"rank": 0, "qps": 0}, "qps"),
    ({"rank": 0, "mtu": 10}, "mtu"), ({"rank": 0, "warmup": -1}, "warmup"),
])
def test_invalid_configs_name_the_key(bad, where):
    with pytest.raises(ConfigError, match=where):
        load_config(dict({"ranks": RANKS}, **bad))


def test_topology_ring_needs_leaves():
    with pytest.raises(ConfigError, match="leaf"):
        load_config({"rank": 0, "ranks": [{"ip": "1.1.1.1", "intf": "e"}] * 2,
                     "ring": "topology"})


def test_qps_of_a_connection_get_distinct_ids_and_sports():
    ids = {flow_id(s, d, q) for s in range(16) for d in range(16) for q in range(8)}
    assert len(ids) == 16 * 16 * 8
    qpns = [qpn(0, 1, q) for q in range(8)]
    assert len(set(qpns)) == 8
    assert len({udp_sport(q, q) for q in qpns}) == 8


def test_merge_sent_counts_silent_flows_as_dropped():
    summary = {"flows": [{"flow": "a#0", "received_packets": 10, "duplicated_packets": 1,
                          "dropped_packets": 0}], "total": {}}
    out = merge_sent(summary, {"a#0": 12, "a#1": 5})
    flows = {f["flow"]: f for f in out["flows"]}
    assert flows["a#0"]["dropped_packets"] == 3
    assert flows["a#1"]["dropped_packets"] == 5 and flows["a#1"]["received_packets"] == 0
    assert out["total"]["dropped_packets"] == 8 and out["total"]["sent_packets"] == 17


def test_cli_rates_and_arguments():
    assert rate("40M") == 40e6 and rate("1.5G") == 1.5e9 and rate("200000") == 200000
    a = parse_args(["send", "--intf", "e", "--src-ip", "1.1.1.1", "--dst-ip", "1.1.1.2",
                    "--rate", "40M", "--duration", "2", "--qps", "4"])
    assert a.rate == 40e6 and a.qps == 4
    with pytest.raises(SystemExit):
        parse_args(["send", "--intf", "e", "--src-ip", "x", "--dst-ip", "y",
                    "--rate", "1M", "--pps", "5"])
