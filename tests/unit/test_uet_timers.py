"""The UET retransmission timer's bounds (``emulator.experiments.spec.uet``) and how a
rank's PDCs take them (``traffic.ranks.config.uet_config``)."""

import pytest

from emulator.experiments.spec import build
from emulator.experiments.spec import uet as uet_spec
from emulator.fabric import presets
from emulator.fabric.runspec import RunSpec
from traffic.ranks.config import ConfigError, load_config, uet_config

RANKS = [{"ip": "10.0.0.1", "intf": "eth0"}, {"ip": "10.0.0.2", "intf": "eth0"}]


def spec(**kw):
    return build.complete(RunSpec(presets.build("leaf-spine", {}),
                                  **dict({"transport": "uet", "cc": "nscc"}, **kw)))


def drain_ms(s, nbytes):
    return nbytes * 8 / uet_spec.hosts_rate(s.fabric) * 1e3


def test_on_deep_queues_the_floor_follows_the_marking_ceiling_and_the_ceiling_the_queue():
    s = spec(queue_ms=2000)               # compare's stand-in for a lossless fabric
    rtt = uet_spec.network_rtt_ms(s.fabric, s.mtu)
    lo, hi = uet_spec.rto_bounds_ms(s)
    kmax = int(s.ecn.split(":")[1])       # NSCC's marking, 0.2 to 0.8 BDP
    assert lo == pytest.approx(rtt + 6 * drain_ms(s, kmax))
    assert hi == pytest.approx(rtt + 6 * 2000)
    # a lost packet no longer waits six drains of 2 s: tens of milliseconds at 40 Mbit/s
    assert 10 < lo < 100 and hi > 12_000


def test_with_trimming_the_floor_follows_the_trimming_threshold():
    s = spec(queue_ms=2000, trim=uet_spec.MIN_TRIM)
    rtt = uet_spec.network_rtt_ms(s.fabric, s.mtu)
    lo, hi = uet_spec.rto_bounds_ms(s)
    assert lo == pytest.approx(rtt + 6 * drain_ms(s, s.trim_at))
    assert hi == pytest.approx(rtt + 6 * 2000)


def test_without_marking_or_trimming_only_the_queue_bounds_a_wait():
    s = spec(queue_ms=30, ecn="off")
    assert s.ecn is None or s.ecn == "off"
    lo, hi = uet_spec.rto_bounds_ms(s)
    assert lo == hi == pytest.approx(uet_spec.network_rtt_ms(s.fabric, s.mtu) + 6 * 30)


def test_a_floor_above_a_shallow_queues_ceiling_is_held_to_it():
    # marking at 100 KB on a 1 ms queue: the queue cannot hold what the marking allows
    s = spec(queue_ms=1, ecn="50KB:100KB:1")
    lo, hi = uet_spec.rto_bounds_ms(s)
    assert lo == hi


def test_the_pdcs_take_both_bounds_and_follow_round_trips_between_them():
    cfg = load_config({"rank": 0, "ranks": RANKS, "transport": "uet", "cc": "nscc",
                       "uet_rtt_ms": 5.0, "uet_rto_min_ms": 31.0, "uet_rto_max_ms": 12005.0})
    p = uet_config(cfg).pds
    assert (p.rto_min_ns, p.rto_ns) == (31_000_000, 12_005_000_000)
    # without a ceiling: RC's timeout, or the floor where that is above it
    cfg = load_config({"rank": 0, "ranks": RANKS, "transport": "uet", "cc": "nscc",
                       "uet_rto_min_ms": 500.0})
    assert uet_config(cfg).pds.rto_ns == 500_000_000


@pytest.mark.parametrize("bad", [{"uet_rto_max_ms": 0}, {"uet_rto_min_ms": 50.0,
                                                          "uet_rto_max_ms": 20.0}])
def test_bad_timer_bounds_are_refused_naming_the_key(bad):
    with pytest.raises(ConfigError, match="uet_rto_max_ms"):
        load_config({"rank": 0, "ranks": RANKS, "transport": "uet", "cc": "nscc", **bad})
