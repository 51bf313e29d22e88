"""Unit tests of the NIC entropy policies (traffic.nic.entropy) and template re-porting."""

import pytest

from traffic.nic import entropy
from traffic.roce.frames import FrameTemplate, icrc, parse


def test_qp_mode_keeps_the_port():
    e = entropy.EntropyPolicy("qp")
    assert not e.active
    assert {e.pick(1, t) for t in range(0, 10**9, 10**6)} == {0}


def test_spray_gives_every_packet_a_new_entropy():
    e = entropy.EntropyPolicy("spray", spray_values=8)
    picks = [e.pick(1, 0) for _ in range(16)]
    assert picks == list(range(8)) * 2
    ports = {entropy.sport(50000, i) for i in range(8)}
    assert len(ports) == 8 and all(49152 <= p <= 65535 for p in ports)


def test_flowlet_moves_only_after_an_idle_gap():
    e = entropy.EntropyPolicy("flowlet", gap_ns=1_000_000)
    ms = 1_000_000
    # back to back (gaps of 0.5 ms): one flowlet
    assert [e.pick("a", t * ms // 2) for t in range(10)] == [0] * 10
    # a 2 ms gap starts flowlet 1, then it continues
    assert e.pick("a", 4500 * ms // 1000 + 2 * ms) == 1
    assert e.pick("a", 4500 * ms // 1000 + 2 * ms + ms // 2) == 1
    # exactly the threshold is not a gap; the other flow is independent
    assert e.pick("a", 4500 * ms // 1000 + 3 * ms + ms // 2) == 1
    assert e.pick("b", 10**12) == 0
    assert e.changes == 1


def test_bad_mode_rejected():
    with pytest.raises(ValueError):
        entropy.EntropyPolicy("random")


def test_with_sport_keeps_a_valid_icrc():
    t = FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2",
                      dst_qpn=0x123)
    v = t.with_sport(51234)
    f = v.frame(7, tx_ns=5, flow=3)
    p = parse(f)
    assert p.sport == 51234 and p.icrc_ok and p.psn == 7
    assert parse(t.frame(7)).sport == t.sport != 51234     # the original is untouched
    assert icrc(f) != icrc(t.frame(7, tx_ns=5, flow=3))


def test_rank_config_entropy_keys():
    from traffic.ranks.rank import ConfigError, load_config
    base = {"rank": 0, "ranks": [{"ip": "10.0.0.1", "intf": "h1-eth0"},
                                 {"ip": "10.0.0.2", "intf": "h2-eth0"}]}
    assert load_config(dict(base))["entropy"] == "qp"
    cfg = load_config(dict(base, entropy="flowlet", flowlet_gap_ms=0.5))
    assert cfg["entropy"] == "flowlet" and cfg["flowlet_gap_ms"] == 0.5
    with pytest.raises(ConfigError, match="entropy"):
        load_config(dict(base, entropy="ecmp"))
    with pytest.raises(ConfigError, match="flowlet_gap_ms"):
        load_config(dict(base, entropy="flowlet", flowlet_gap_ms=0))
