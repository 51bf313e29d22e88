"""Unit tests of ``compare --planes``' pure parts (emulator/experiments/compare/planes.py) and of the
netlink qdisc-dump decoder it samples with (emulator/dataplane/links/shaping.py)."""

import struct

import pytest

from emulator.__main__ import build_parser
from emulator.dataplane.links import shaping
from emulator.errors import ConfigError
from emulator.experiments.compare import planes, planes_stats
from emulator.experiments.measure import stats
from emulator.fabric import addressing, presets
from emulator.fabric.runspec import RunSpec

# ---- the netlink decoder --------------------------------------------------------

def _attr(kind, payload):
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _qdisc(ifindex, kind=b"tbf", parent=shaping.TC_H_ROOT, backlog=0, drops=0, sent=0):
    stats2 = (_attr(shaping.TCA_STATS_BASIC, struct.pack("=QI4x", sent, 7))
              + _attr(shaping.TCA_STATS_QUEUE, struct.pack("=IIIII", 3, backlog, drops, 0, 0)))
    body = (struct.pack("=BBHiIII", 0, 0, 0, ifindex, 0x10000, parent, 1)
            + _attr(shaping.TCA_KIND, kind + b"\0")
            + _attr(2, b"options-ignored")
            + _attr(shaping.TCA_STATS2 | 0x8000, stats2))    # NLA_F_NESTED set
    return struct.pack("=IHHII", 16 + len(body), shaping.RTM_NEWQDISC, 2, 1, 0) + body


def _done():
    return struct.pack("=IHHII", 20, shaping.NLMSG_DONE, 2, 1, 0) + struct.pack("=i", 0)


def test_dump_decoder_reads_root_tbf_counters_only():
    buf = (_qdisc(5, backlog=3000, drops=2, sent=123456789012)
           + _qdisc(6, kind=b"noqueue")
           + _qdisc(7, kind=b"bfifo", parent=0x10001, backlog=999)
           + _qdisc(8, sent=10))
    out, done = shaping.parse_qdisc_dump(buf)
    assert out == {5: (3000, 2, 123456789012), 8: (0, 0, 10)} and not done
    out, done = shaping.parse_qdisc_dump(_qdisc(9, backlog=1) + _done())
    assert out == {9: (1, 0, 0)} and done


def test_dump_decoder_raises_netlink_errors():
    err = struct.pack("=IHHII", 36, shaping.NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", -1) \
        + b"\0" * 16
    with pytest.raises(OSError, match="qdisc dump"):
        shaping.parse_qdisc_dump(err)


# ---- fabrics and seeds ------------------------------------------------------------

def test_both_fabrics_have_equal_tor_uplink_capacity():
    fabs = planes_stats.build_fabrics({})
    dual, single = fabs["dual-plane"], fabs["single-plane"]
    assert [h.name for h in dual.hosts] == [h.name for h in single.hosts]
    for leaf in ("leaf1", "leaf2", "leaf4"):
        up_d = [lk.rate_bps for lk in dual.uplinks(leaf)]
        up_s = [lk.rate_bps for lk in single.uplinks(leaf)]
        assert len(up_d) == 2 and len(up_s) == 4 and sum(up_d) == sum(up_s) == 20_000_000
    # ToR A only reaches plane-1 spines in dual-plane, every spine in single-plane
    assert {lk.other("leaf1").node for lk in dual.uplinks("leaf1")} == {"spine1", "spine2"}
    assert {lk.other("leaf2").node for lk in dual.uplinks("leaf2")} == {"spine3", "spine4"}
    assert len({lk.other("leaf1").node for lk in single.uplinks("leaf1")}) == 4


def test_fabric_params_defaults_and_errors():
    assert planes_stats.fabric_params({}) == {"host_rate": "10Mbps", "oversubscription": "1"}
    assert planes_stats.fabric_params({"uplink_rate": "5Mbps"}) == {"host_rate": "10Mbps",
                                                              "uplink_rate": "5Mbps"}
    assert planes_stats.fabric_params({"host_rate": "4Mbps", "oversubscription": "2"}) == {
        "host_rate": "4Mbps", "oversubscription": "2"}
    with pytest.raises(ConfigError, match="planes"):
        planes_stats.fabric_params({"planes": "1"})


def test_seeds_are_the_same_in_both_fabrics_and_change_per_repetition():
    fabs = planes_stats.build_fabrics({"tor_pairs": "3"})
    plan = planes.plan_runs(fabs, ["shared", "per-switch"], reps=2, seed0=105)
    assert [(lab, seeding, seed) for lab, _, seeding, seed in plan] == [
        (f, s, 105 + rep) for rep in range(2) for s in ("shared", "per-switch")
        for f in planes_stats.FABRICS]
    topo = [addressing.plan(f, seed=seed if seeding == "shared" else None)
            for _, f, seeding, seed in plan]

    def seeds(t):
        return {sw["name"]: sw["hash_seed"] for sw in t["switches"]}
    d0, s0, dp0, sp0, d1, s1, dp1, sp1 = (seeds(t) for t in topo)
    nics = [n for n in d0 if n.endswith(".nic")]
    assert len(nics) == 6
    # the bonds keep their own seeds everywhere: the NIC stage is the same in every run
    assert all(d0[n] == s0[n] == dp0[n] == sp0[n] == d1[n] == dp1[n] for n in nics)
    assert planes_stats.nic_seeds(fabs["dual-plane"]) == {n: d0[n] for n in nics}
    # shared: every fabric switch has the repetition's seed
    assert {v for k, v in d0.items() if k not in nics} == {105}
    assert {v for k, v in s1.items() if k not in nics} == {106}
    # per-switch: distinct seeds, equal in both fabrics, new in every repetition
    fabric_sw = [k for k in dp0 if k not in nics]
    assert len({dp0[k] for k in fabric_sw}) == len(fabric_sw)
    assert all(dp0[k] == sp0[k] and dp1[k] == sp1[k] for k in fabric_sw)
    assert all(dp0[k] != dp1[k] for k in fabric_sw)


def test_a_shared_seed_equal_to_a_bond_seed_is_refused():
    fabs = planes_stats.build_fabrics({})
    with pytest.raises(ConfigError, match="bond hash seed of h3.nic"):
        planes.plan_runs(fabs, ["shared"], reps=3, seed0=3)
    assert len(planes.plan_runs(fabs, ["per-switch"], reps=3, seed0=1)) == 6


def test_shaped_ports_by_tier():
    fabs = planes_stats.build_fabrics({})
    count = {}
    for label, f in fabs.items():
        for p in planes_stats.shaped_ports(addressing.plan(f)):
            count[(label, p["tier"])] = count.get((label, p["tier"]), 0) + 1
    assert count == {("dual-plane", "nic_tor"): 8, ("dual-plane", "tor_spine"): 8,
                     ("dual-plane", "spine_tor"): 8, ("dual-plane", "tor_nic"): 8,
                     ("single-plane", "nic_tor"): 8, ("single-plane", "tor_spine"): 16,
                     ("single-plane", "spine_tor"): 16, ("single-plane", "tor_nic"): 8}
    assert planes_stats.tier_of("nic", "host") is None


# ---- statistics -------------------------------------------------------------------

def test_busy_window_skips_idle_edges():
    times = [0, 1, 2, 3, 4, 5]
    totals = [0, 1, 101, 201, 202, 202]       # rates 1, 100, 100, 1, 0
    assert stats.busy_window(times, totals) == (1, 3)
    assert stats.busy_window(times, [0] * 6) is None


def test_spread_counts_idle_links():
    s = stats.spread([100, 100, 0, 200])
    assert s["links"] == 4 and s["idle"] == 1 and s["max_over_mean"] == 2.0
    assert s["jain"] == pytest.approx(160000 / (4 * 60000), abs=1e-4)
    assert stats.spread([])["max_over_mean"] is None
    assert stats.spread([0, 0])["idle"] == 2


def test_percentile_and_queue_stats():
    assert stats.quantile([3, 1, 2, 4, 5], 0.5) == 3
    assert stats.quantile([0, 10], 0.95) == pytest.approx(9.5)
    assert stats.quantile([], 0.5) is None
    # 1250 bytes at 10 Mbit/s = 1 ms; at 5 Mbit/s = 2 ms
    q = stats.queue_stats([[0, 1250], [2500, 0]], [10e6, 5e6])
    assert q["max_bytes"] == 2500 and q["max_ms"] == 4.0
    assert q["mean_ms"] == pytest.approx(1.25) and q["p95_ms"] == pytest.approx(3.55)
    assert stats.queue_stats([], [])["max_ms"] is None


def test_analyse_one_run():
    ports = [{"tier": "spine_tor", "link": "spine1->leaf1", "rate_bps": 8e6},
             {"tier": "spine_tor", "link": "spine1->leaf2", "rate_bps": 8e6},
             {"tier": "tor_spine", "link": "leaf1->spine1", "rate_bps": 8e6}]
    times = [0.0, 0.1, 0.2, 0.3]
    sent = [[0, 0, 5000, 10000], [0, 0, 0, 0], [0, 0, 5000, 10000]]
    backlog = [[9999, 0, 1000, 2000], [0, 0, 0, 0], [0, 0, 0, 0]]
    drops = [[0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]]
    a = planes_stats.analyse(ports, times, backlog, sent, drops)
    assert a["links"]["spine_tor"] == {"links": 2, "max_over_mean": 2.0, "jain": 0.5,
                                       "idle": 1}
    # the busy window (intervals 1..2) leaves the sample at t=0 out
    assert a["queues"]["spine_tor"]["max_bytes"] == 2000
    assert a["queues"]["spine_tor"]["max_ms"] == 2.0
    assert a["per_link"]["spine1->leaf1"] == {"tier": "spine_tor", "bytes": 10000,
                                              "max_backlog": 2000}
    assert a["drops"] == 1 and a["window_s"] == pytest.approx(0.2)
    assert a["total_backlog_max_bytes"] == 2000
    assert a["queues"]["nic_tor"]["max_ms"] is None
    w = planes_stats.worst_series(ports, times, backlog)
    assert w["t"] == times and w["spine_tor"] == [10.0, 0.0, 1.0, 2.0]


def _run(fabric, seeding, busbw, idle, qmax):
    tiers = {k: {"links": 8, "max_over_mean": 1.0 + idle / 4, "jain": 0.9, "idle": idle}
             for k, _, _ in planes_stats.TIERS}
    queues = {k: {"max_bytes": qmax * 1000, "max_ms": qmax, "p95_ms": qmax / 2,
                  "mean_ms": qmax / 4} for k, _, _ in planes_stats.TIERS}
    return {"fabric": fabric, "seeding": seeding, "busbw_Mbps": busbw,
            "efficiency": busbw / 20, "time_s": 1.0, "links": tiers, "queues": queues,
            "total_backlog_max_bytes": 4 * qmax * 1000, "drops": 0, "lost": 0, "wrong": 0,
            "fidelity": "faithful"}


def test_summarize_medians_and_ratio():
    runs = [_run("dual-plane", "shared", b, 0, 10) for b in (9, 10, 11)]
    runs += [_run("single-plane", "shared", b, 4, q) for b, q in ((5, 30), (6, 40), (7, 80))]
    s = planes_stats.summarize(runs)
    assert set(s) == {"shared"} and s["shared"]["reps"] == 3
    row = s["shared"]["rows"]["busbw Mb/s"]
    assert row == {"dual-plane": 10, "single-plane": 6, "ratio": 0.6}
    q = s["shared"]["rows"]["spine->ToR queue max ms"]
    assert q["ratio"] == 4.0
    idle = s["shared"]["rows"]["spine->ToR idle links"]
    assert idle["dual-plane"] == 0 and idle["single-plane"] == 4 and idle["ratio"] is None
    text = planes_stats.table(s)
    assert "shared seed (3 reps)" in text and "per-switch" not in text
    line = next(ln for ln in text.splitlines() if ln.startswith("busbw"))
    assert line.split()[-3:] == ["10.00", "6.00", "0.60"]
    runs[-1]["wrong"] = 2
    runs[-2]["wrong"] = 1                          # losses are summed, not their median
    assert planes_stats.summarize(runs)["shared"]["rows"]["#wrong, sum of reps"]["single-plane"] == 3
    runs[0]["fidelity"] = "emulator-bound"
    assert planes_stats.summarize(runs)["shared"]["rows"]["not faithful, runs"] == \
        {"dual-plane": 1, "single-plane": 0, "ratio": 0.0}


def test_disturbed_means_lost_outside_the_queues_or_not_faithful():
    ok = {"fidelity": "faithful"}
    assert planes.disturbed(dict(ok, lost=5, drops=0))
    assert not planes.disturbed(dict(ok, lost=5, drops=3))     # the fabric's own overflow
    assert not planes.disturbed(dict(ok, lost=0, drops=0))
    assert planes.disturbed({"lost": 0, "drops": 0, "fidelity": "emulator-bound"})


# ---- command line ------------------------------------------------------------------

def test_compare_planes_arguments():
    a = build_parser().parse_args(["compare", "--planes", "-P", "tor_pairs=3"])
    assert a.planes and a.workload is None and a.qps is None and a.sizes is None
    assert a.seedings == "shared,per-switch" and a.sample_ms == 20.0 and a.retries == 1
    b = build_parser().parse_args(["compare"])
    assert not b.planes


class _Args:
    fabric = None
    preset = None
    param = []
    seedings = "shared"
    reps = 1
    sample_ms = 20.0
    retries = 1


@pytest.mark.parametrize("change, match", [
    ({"param": ["planes=1"]}, "planes"),
    ({"preset": "leaf-spine"}, "dual-plane"),
    ({"fabric": "my.yaml"}, "fabric file"),
    ({"seedings": "shared,random"}, "random"),
    ({"reps": 0}, "at least 1"),
    ({"sample_ms": 0}, "between"),
    ({"retries": -1}, "0 or more"),
])
def test_bad_planes_arguments_are_config_errors(change, match):
    a = _Args()
    for k, v in change.items():
        setattr(a, k, v)
    with pytest.raises(ConfigError, match=match):
        planes.main(RunSpec(presets.build("dual-plane", {})), a)
