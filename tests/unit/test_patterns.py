"""The dragonfly traffic patterns' job and their measures (pure parts, no root)."""

import types

import pytest

from emulator.errors import ConfigError
from emulator.experiments.workloads import patterns
from emulator.fabric import addressing, presets
from traffic.jobs.config import load_job


@pytest.fixture(scope="module")
def session():
    f = presets.build("dragonfly", {"a": "2", "p": "1"})
    topo = addressing.plan(f)
    net = types.SimpleNamespace(hosts={h["name"]: types.SimpleNamespace(pid=1)
                                       for h in topo["hosts"]})
    return types.SimpleNamespace(topo=topo, net=net, fabric=f, mtu=4096)


def test_patterns_need_a_fabric_of_groups():
    with pytest.raises(ConfigError, match="run it on -p dragonfly"):
        patterns.pairs_for(presets.build("leaf-spine"), "adversarial")


@pytest.mark.parametrize("pattern", patterns.PATTERNS)
def test_the_job_sends_and_receives_once_per_host(session, pattern):
    pairs = patterns.pairs_for(session.fabric, pattern, seed=3)
    job = load_job(patterns.job_document(session, pairs, 65536, {"cc": "dcqcn"}))
    assert len(job.instances) == len(pairs) == len(session.topo["hosts"])
    kinds = [[op.kind for op in prog] for prog in job.programs]
    assert all(k == ["send", "recv"] for k in kinds)
    assert job.nic["cc"] == "dcqcn"


def test_fractions_from_transfer_times():
    pairs = [("h1", "h3"), ("h2", "h4"), ("h3", "h1")]
    result = {"collectives": [
        {"id": "h1>h3", "bytes": 500_000, "network_s": 2.0, "wrong": 0},   # 2 Mbit/s
        {"id": "h2>h4", "bytes": 500_000, "network_s": 0.5, "wrong": 0},   # capped at 1
        {"id": "h3>h1", "bytes": 500_000, "network_s": None, "wrong": 1}]}
    got = patterns.fractions(pairs, result, 4e6)
    assert [g["fraction"] for g in got] == [0.5, 1.0, None]
    assert patterns.summary(got) == (0.5, 0.0)


def test_utilisation_splits_local_and_global_links(session):
    topo = session.topo
    before, after = {}, {}
    for sw in topo["switches"]:
        for p in sw["ports"]:
            before[p["intf"]] = (0, 0, 0)
            glob = p["peer"] in {s["name"] for s in topo["switches"]} and \
                next(s for s in topo["switches"] if s["name"] == p["peer"])["pod"] != sw["pod"]
            after[p["intf"]] = (p["rate_bps"] // 8 if glob else p["rate_bps"] // 16, 0, 0)
    u = patterns.utilisation(topo, before, after, 1.0)
    assert u["global"]["mean"] == pytest.approx(1.0) and u["local"]["mean"] == pytest.approx(0.5)
    assert u["global"]["links"] == 2 * 10 and u["local"]["links"] == 2 * 5


def test_nonminimal_bytes_are_those_of_the_stamping_buckets():
    groups = ("OFPST_GROUP_DESC reply (OF1.5) (xid=0x2):\n"
              " group_id=268435458,type=select,selection_method=hash,fields(ip_src,ip_dst,"
              "udp_src,udp_dst),bucket=bucket_id:0,actions=group:1073741833,"
              "bucket=bucket_id:1,actions=set_field:02:df:00:00:03:01->eth_src,output:4,"
              "bucket=bucket_id:2,actions=set_field:02:df:00:00:04:01->eth_src,output:2\n"
              " group_id=5,type=select,bucket=bucket_id:0,actions=output:3\n")
    stats = ("OFPST_GROUP reply (OF1.5) (xid=0x3):\n"
             " group_id=268435458,duration=3s,ref_count=2,packet_count=6,byte_count=600,"
             "bucket0:packet_count=1,byte_count=100,bucket1:packet_count=2,byte_count=200,"
             "bucket2:packet_count=3,byte_count=300\n"
             " group_id=5,duration=3s,ref_count=1,packet_count=9,byte_count=900,"
             "bucket0:packet_count=9,byte_count=900\n")
    assert patterns.bucket_bytes(groups, stats) == (500, 600)


def test_run_refuses_valiant_and_patterns_off_a_dragonfly_before_building(capsys):
    from emulator.__main__ import main
    assert main(["run", "-p", "leaf-spine", "--routing", "valiant", "--workload", "none"]) == 2
    assert "valiant routing is a dragonfly's" in capsys.readouterr().err
    assert main(["run", "-p", "leaf-spine", "--workload", "permutation"]) == 2
    assert "permutation needs a fabric of groups" in capsys.readouterr().err


def test_the_regime_and_its_warm_up():
    """Open loop only on a lossless fabric without congestion control; the closed
    loop's window opens after DCQCN's climb back, not after the queues fill."""
    assert patterns.regime(True, "none") == "lossless, open-loop"
    assert patterns.regime(False, "dcqcn") == "lossy, closed-loop (RC + dcqcn)"
    assert patterns.regime(True, "dcqcn") == "lossless, closed-loop (RC + dcqcn)"
    assert patterns.regime(False, "none") == "lossy, closed-loop (RC retransmission)"
    ms = 1_000_000
    line = [[t * ms, t * 500] for t in range(1, 2000)]     # 4 Mbit/s at 1 ms frames
    flows = [{"tx_first_ns": 0, "tx_drained_ns": 1000 * ms, "rx_timeline": line,
              "rate_bps": 4e6}]
    result = {"collectives": [dict(flows[0], id="h1>h2")]}
    got = {o: patterns.steady([("h1", "h2")], result, {"h1": 4e6}, 500, o) for o in (1, 0)}
    assert got[1]["window"]["start_s"] == pytest.approx(0.032)
    assert got[0]["window"]["start_s"] == pytest.approx(0.6)
    assert got[1]["mean"] == pytest.approx(1.0, abs=0.01) == got[0]["mean"]
