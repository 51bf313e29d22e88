"""The rail comparison's jobs (workloads.rails) and its summary (compare.rails_cmp), pure."""

import pytest

from emulator.dataplane.links import hb
from emulator.errors import ConfigError
from emulator.experiments.compare import rails as rails_cmp
from emulator.experiments.training import rails
from emulator.fabric import addressing, presets
from traffic.jobs.config import load_job

S = 1 << 21


def topo(name, **params):
    return addressing.plan(presets.build(name, {k: str(v) for k, v in params.items()}))


def doc(name, workload, **params):
    d = rails.job_document(topo(name, **params), workload, S, lambda h: f"/ns/{h}", 2)
    load_job(d)                                     # the job engine accepts it
    return d


def sends(d, it=1):
    """{(src endpoint name, dst endpoint name): bytes} of iteration ``it``'s sends."""
    eps = d["endpoints"]
    out = {}
    for r, prog in enumerate(d["programs"]):
        for op in prog:
            if op["op"] == "send" and op["id"].startswith(f"it{it}."):
                key = (eps[d["ranks"][r]]["name"], eps[d["ranks"][op["peer"]]]["name"])
                out[key] = out.get(key, 0) + op["bytes"]
    return out


def per_nic(s):
    out = {}
    for (src, _), b in s.items():
        out[src] = out.get(src, 0) + b
    return out


def test_every_nic_sends_the_same_bytes_on_both_fabrics_and_rail_only_stays_on_its_rail():
    opt, only = sends(doc("rail-optimized", "alltoall")), sends(doc("rail-only", "alltoall"))
    # 4 hosts x 2 rails: each NIC sends S x (H-1)/H to the other hosts
    nic_opt = per_nic(opt)
    nic_only = {k: v for k, v in per_nic(only).items() if not k.endswith(":hb0")}
    assert set(nic_opt.values()) == set(nic_only.values()) == {S * 3 // 4}
    # rail-optimized: straight to every GPU of the other hosts, cross-rail included
    assert opt[("h1:eth0", "h2:eth1")] == S // 8 and ("h1:eth0", "h1:eth1") not in opt
    # rail-only: NIC to NIC of its own rail only, each carrying its host's S/H
    assert all(a.split(":")[1] == b.split(":")[1] for a, b in only if not a.endswith("hb0"))
    assert only[("h1:eth0", "h2:eth0")] == S // 4
    # and the HB stage: S x (rails-1) bytes inside every host, hb0 -> hb1
    assert {k: v for k, v in only.items() if k[0].endswith("hb0")} == {
        (f"h{i}:hb0", f"h{i}:hb1"): S for i in range(1, 5)}


def test_rail_only_senders_wait_for_their_hosts_hb_stage():
    d = doc("rail-only", "alltoall", planes=3)
    eps = d["endpoints"]
    gate = {}
    for r, prog in enumerate(d["programs"]):
        for op in prog:
            if op["op"] == "coll" and op["id"] == "it1.pxn.h2":
                gate[r] = op
    names = sorted(eps[d["ranks"][r]]["name"] for r in gate)
    # h2's 3 NICs x 3 peers' senders, and the HB receiver
    assert names == sorted(["h2:hb1"] + [f"h2:eth{i}" for i in range(3) for _ in range(3)])
    assert all(not op["fabric"] for op in gate.values())
    assert sends(d)[("h2:hb0", "h2:hb1")] == 2 * S


def test_rank_aligned_allreduce_is_one_ring_per_rail():
    d = doc("rail-optimized", "allreduce", planes=3)
    colls = {op["id"]: op for prog in d["programs"] for op in prog
             if op["op"] == "coll" and op["fabric"]}
    assert sorted(colls) == [f"it{t}.ar.rail{r}" for t in range(3) for r in (1, 2, 3)]
    eps = d["endpoints"]
    assert [eps[d["ranks"][m]]["name"] for m in colls["it1.ar.rail2"]["members"]] == [
        "h1:eth1", "h2:eth1", "h3:eth1", "h4:eth1"]


def test_hb_link_rate_and_addresses():
    t = topo("rail-only", planes=3, host_rate="10Mbps")
    assert hb.rate_of(t, t["hosts"][0]) == 3 * 80e6        # planes x 8 x NIC
    assert hb.rate_of(topo("rail-optimized"), topo("rail-optimized")["hosts"][0]) is None
    assert hb.addresses(0) == (("169.254.0.1", "02:48:42:00:00:01"),
                               ("169.254.0.2", "02:48:42:00:00:02"))
    assert hb.addresses(300)[1] == ("169.254.4.178", "02:48:42:01:2c:02")
    assert len({ip for k in range(500) for ip, _ in hb.addresses(k)}) == 1000


def test_single_nic_fabrics_and_unknown_fabrics_are_refused():
    with pytest.raises(ConfigError, match="one NIC per rail"):
        rails.job_document(topo("leaf-spine"), "alltoall", S, str)
    with pytest.raises(ConfigError, match="--workload"):
        rails.job_document(topo("rail-only"), "incast", S, str)
    with pytest.raises(ConfigError, match="--fabrics: 'fat-tree' is not a rail fabric"):
        rails_cmp.parse_fabrics("rail-only,fat-tree")
    assert rails_cmp.build("rail-optimized", {"hb_rate": "1Mbps", "spines_per_plane": "3"}
                           ).name == "rail-optimized-2p3s2l2h"


def fake_result(times):
    """A job result: iteration t's barrier ends at times[t] (ms), its transfers 10 ms
    before."""
    cs = []
    for t, end in enumerate(times):
        cs.append({"id": f"it{t}.end", "start_ns": end * 1e6, "end_ns": end * 1e6})
        cs.append({"id": f"it{t}.a2a.h1:0>h2:0", "start_ns": 0, "end_ns": (end - 10) * 1e6,
                   "wrong": 0})
    return {"collectives": cs}


def test_an_iteration_is_timed_from_the_barrier_before_it():
    t = topo("rail-optimized", host_rate="10Mbps")
    rows = rails.measure(fake_result([700, 1710, 2720]), "alltoall", S, t, 10e6)
    assert [r["time_s"] for r in rows] == [1.0, 1.0]
    assert rows[0]["algbw_Mbps"] == pytest.approx(S * 8 / 1e6, rel=1e-3)
    assert rows[0]["busbw_Mbps"] == pytest.approx(S * 8 / 1e6 * 7 / 8, rel=1e-3)
    # the fluid time: each NIC's S x 3/4 at 10 Mbit/s, plus the HB stage on rail-only
    assert rails.ideal_seconds("alltoall", S, t) == pytest.approx(S * 0.75 * 8 / 10e6)
    assert rails.ideal_seconds("alltoall", S, t, 160e6) == pytest.approx(
        S * 0.75 * 8 / 10e6 + S * 8 / 160e6)


def test_summary_gives_the_slowdown_of_rail_only():
    def row(f, w, time_s, bus):
        return {"fabric": f, "workload": w, "time_s": time_s, "busbw_Mbps": bus,
                "efficiency": bus / 10, "hb_stage_s": None, "ideal_s": 1.0,
                "fidelity": {"verdict": "faithful"}}
    rows = [row("rail-optimized", "alltoall", 1.0, 10), row("rail-optimized", "alltoall", 1.2, 8),
            row("rail-only", "alltoall", 1.1, 9), row("rail-only", "alltoall", 1.21, 8)]
    s = rails_cmp.summarize(rows, ["rail-optimized", "rail-only"], ["alltoall"])
    assert s["rail_only_vs_optimized"]["alltoall"]["slowdown"] == pytest.approx(
        1.155 / 1.1 - 1, abs=1e-4)
    assert "time +5.0 %" in rails_cmp.table(s)
