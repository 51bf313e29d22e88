"""Root tests of the job engine (``python -m traffic job``) over namespaces on a bridge:
every rank of a small training job in one process, its collectives on the wire."""

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): its own namespaces, no fabric
LAYOUT_INDEPENDENT = True

import json
import os
import subprocess
import tempfile

import pytest
from test_traffic_namespaces import drop_roce_ingress
from traffic_fixtures import PYTHON, ROOT, bridge_lan, lab, needs_root  # noqa: F401

pytestmark = [needs_root, pytest.mark.timeout(120)]
MS = 1_000_000


def endpoints(hosts, rate=100e6):
    return [{"netns": f"/run/netns/{ns}", "intf": ifname, "ip": ip, "name": f"h{i}",
             "rate_bps": rate} for i, (ns, ifname, ip, mac) in enumerate(hosts)]


def training_programs(iterations=2):
    """4 endpoints x 2 ranks: per iteration compute, a TP allreduce over NVLink, a
    non-blocking DP allreduce over the network overlapping compute, a wait, an
    allgather over all 8 ranks (network + a local hop); then a pipeline send."""
    progs = []
    for r in range(8):
        e, g = r // 2, r % 2
        ops = []
        for it in range(iterations):
            dp = f"i{it}.dp{g}"
            ops += [{"op": "compute", "ns": 3 * MS},
                    {"op": "coll", "id": f"i{it}.tp{e}", "kind": "allreduce", "group": "TP",
                     "members": [2 * e, 2 * e + 1], "bytes": 1 << 20, "fabric": False,
                     "local_ns": MS},
                    {"op": "coll", "id": dp, "kind": "allreduce", "group": "DP",
                     "members": [g, g + 2, g + 4, g + 6], "bytes": 256 << 10,
                     "blocking": False},
                    {"op": "compute", "ns": 10 * MS},
                    {"op": "wait", "ids": [dp]},
                    {"op": "coll", "id": f"i{it}.ag", "kind": "allgather", "group": "DP_EP",
                     "members": list(range(8)), "bytes": 64 << 10, "local_ns": MS // 2}]
        if r in (0, 7):
            ops.append({"op": "send" if r == 0 else "recv", "id": "pp", "peer": 7 - r,
                        "bytes": 100_000})
        progs.append(ops)
    return progs


def run_job(cfg, tmp, expect=0):
    path, out = os.path.join(tmp, "job.json"), os.path.join(tmp, "result.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    res = subprocess.run([PYTHON, "-m", "traffic", "job", "--config", path, "--out", out],
                         cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert res.returncode == expect, res.stderr
    assert res.stdout.startswith("ready")
    with open(out) as f:
        return json.load(f)


def test_a_training_job_in_one_process(lab):
    hosts = bridge_lan(lab, 4)
    with tempfile.TemporaryDirectory() as tmp:
        doc = run_job({"endpoints": endpoints(hosts), "ranks": [r // 2 for r in range(8)],
                       "programs": training_programs(), "qps": 2, "mtu": 1024}, tmp)
    job, insts = doc["job"], {c["id"]: c for c in doc["collectives"]}
    assert job["aborted"] is None and job["wrong"] == 0 and job["failed_qps"] == []
    assert len(insts) == 2 * (4 + 2 + 1) + 1
    for c in insts.values():
        assert c["end_ns"] >= c["start_ns"] and c["wrong"] == 0, c
        assert c["network"] == (c["group"] in ("DP", "DP_EP", "PP"))
        if c["network"]:
            assert c["bytes_received"] > 0 and c["launch_late_ns"] < 20 * MS
    # local TP: exactly its NVLink time; the allgather: network, then its local hop
    assert insts["i0.tp1"]["time_s"] == pytest.approx(0.001)
    ag = insts["i0.ag"]
    assert ag["end_ns"] - ag["start_ns"] == pytest.approx(ag["network_s"] * 1e9 + MS // 2,
                                                          abs=1)
    assert insts["pp"]["endpoints"] == ["h0", "h3"] and insts["pp"]["bytes_received"] > 0
    progs = training_programs()
    for rank in doc["ranks"]:
        ops, prog = rank["ops"], progs[rank["rank"]]
        assert [o["op"] for o in ops] == [p["op"] for p in prog]
        prev = 0
        for op, spec in zip(ops, prog):
            assert op["start_ns"] == prev          # program order, no gap
            assert op["end_ns"] >= op["start_ns"]
            prev = op["end_ns"]
            if spec["op"] == "compute":
                assert op["end_ns"] - op["start_ns"] == spec["ns"]
            elif spec["op"] == "wait":
                assert op["end_ns"] == max(op["start_ns"], insts[spec["ids"][0]]["end_ns"])
            elif not spec.get("blocking", True):
                assert op["end_ns"] == op["start_ns"]      # issued, the rank went on
            else:
                c = insts[spec["id"]]
                assert op["end_ns"] == op["done_ns"] == c["end_ns"]
                assert op["ready_ns"] == c["start_ns"]
                if spec["op"] != "recv":        # a send is eager: a recv may come later
                    assert c["start_ns"] >= op["start_ns"]
        assert rank["end_ns"] == prev
    # a collective starts when its last member arrives, a send when its sender does
    for cid, c in insts.items():
        arrivals = {o["op"]: o["start_ns"] for r in doc["ranks"] for o in r["ops"]
                    if o.get("id") == cid}
        if c["kind"] == "p2p":
            assert c["start_ns"] == arrivals["send"] and len(arrivals) == 2
        else:
            arrivals = [o["start_ns"] for r in doc["ranks"] for o in r["ops"]
                        if o.get("id") == cid]
            assert c["start_ns"] == max(arrivals) and len(arrivals) == len(c["members"])
    # the non-blocking DP allreduce overlapped the 10 ms of compute after it, and
    # outlasted it: the wait exposed the rest
    r0 = doc["ranks"][0]["ops"]
    dp, comp, wait = r0[2], r0[3], r0[4]
    assert dp["ready_ns"] <= comp["start_ns"] and dp["done_ns"] > comp["end_ns"]
    assert wait["end_ns"] - wait["start_ns"] > 0
    # both DP groups shared the NICs (and their QPs) at once
    a, b = insts["i0.dp0"], insts["i0.dp1"]
    assert a["start_ns"] < b["end_ns"] and b["start_ns"] < a["end_ns"]
    for ep in doc["endpoints"]:
        assert ep["data_frames_sent"] > 0 and ep["data_frames_received"] > 0
        assert ep["transport"]["acks_sent"] > 0 and ep["failed_qps"] == []
    eng = doc["engine"]
    assert eng["cpu_us_per_packet"] > 0 and eng["wakeups"] > 0
    assert eng["data_frames_sent"] == sum(e["data_frames_sent"] for e in doc["endpoints"])
    assert set(eng["lateness_ms"]) >= {"p50", "p99", "max", "mean"}


def test_the_rc_transport_recovers_loss_inside_the_job(lab):
    """5 % of what reaches one endpoint is dropped: go-back-N resends, nothing missing."""
    hosts = bridge_lan(lab, 3)
    progs = [[{"op": "coll", "id": f"ar{k}", "kind": "allreduce", "members": [0, 1, 2],
               "bytes": 96 << 10} for k in range(2)]] * 3
    with tempfile.TemporaryDirectory() as tmp:
        drop_roce_ingress(hosts[1][0], hosts[1][1], tmp, share=5)
        doc = run_job({"endpoints": endpoints(hosts), "ranks": [0, 1, 2], "programs": progs,
                       "mtu": 1024, "timeout_exp": 12}, tmp)
    assert doc["job"]["wrong"] == 0 and doc["job"]["aborted"] is None
    assert sum(c["retransmitted_bytes"] for c in doc["collectives"]) > 0
    assert sum(e["transport"]["retransmitted_packets"] for e in doc["endpoints"]) > 0


def test_a_qp_out_of_retries_aborts_the_job(lab):
    hosts = bridge_lan(lab, 2)
    progs = [[{"op": "coll", "id": "ar", "kind": "allreduce", "members": [0, 1],
               "bytes": 64 << 10}, {"op": "compute", "ns": MS}]] * 2
    with tempfile.TemporaryDirectory() as tmp:
        drop_roce_ingress(hosts[1][0], hosts[1][1], tmp)
        doc = run_job({"endpoints": endpoints(hosts), "ranks": [0, 1], "programs": progs,
                       "mtu": 1024, "timeout_exp": 10, "retry_cnt": 2,
                       "step_timeout_s": 0.5}, tmp, expect=1)
    assert "retries" in doc["job"]["aborted"]
    assert doc["job"]["failed_qps"][0] == {"endpoint": "h0", "peer": "h1", "qp": 0}
    assert doc["endpoints"][0]["transport"]["timeouts"] == 3    # the first try + 2 retries
    assert doc["collectives"][0]["end_ns"] is None             # the job stopped in it
