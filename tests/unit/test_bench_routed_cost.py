"""The pure parts of bench/bench_routed_cost.py: what is attached to a port, the arithmetic."""

import importlib.util
import os

import pytest

PATH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "bench_routed_cost.py")
spec = importlib.util.spec_from_file_location("bench_routed_cost", PATH)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_udp_payload_fills_the_frame():
    assert bench.udp_payload(4170) == 4128
    assert bench.udp_payload(4170) + 14 + 20 + 8 == 4170
    with pytest.raises(ValueError):
        bench.udp_payload(42)


def test_bpf_filters_counts_only_bpf_kinds():
    out = ('[{"protocol":"all","pref":49152,"kind":"bpf","options":{"handle":"0x1",'
           '"bpf_name":"flows.bpf.o:[tc]","direct-action":true}},'
           '{"protocol":"ip","pref":1,"kind":"u32","options":{}}]')
    assert bench.bpf_filters(out) == ["flows.bpf.o:[tc]"]
    assert bench.bpf_filters("") == []
    assert bench.bpf_filters("[]") == []


def test_xdp_program_named_or_none():
    assert bench.xdp_program('[{"ifname":"e0","mtu":4156}]') is None
    assert bench.xdp_program('[{"ifname":"e0","xdp":{"mode":1,"prog":{"id":7,"name":"pfc"}}}]') \
        == "pfc"
    assert bench.xdp_program('[{"ifname":"e0","xdp":{"mode":1,"prog":{"id":7}}}]') == "7"


def test_root_qdisc_kind():
    out = ('[{"kind":"tbf","handle":"1:","root":true,"refcnt":2,"options":{}},'
           '{"kind":"clsact","handle":"ffff:","parent":"ffff:fff1","options":{}}]')
    assert bench.root_qdisc(out) == "tbf"
    assert bench.root_qdisc('[{"kind":"clsact","handle":"ffff:","parent":"ffff:fff1"}]') == "none"


def test_blast_rate_from_counters():
    stats = '[{"ifname":"e0","stats64":{"rx":{"packets":1500,"bytes":1},"tx":{"packets":0}}}]'
    assert bench.rx_packets(stats) == 1500
    rx, tx = bench.blast_rate(1000, 553000, 600000, 3.0)
    assert rx == pytest.approx(184.0)
    assert tx == pytest.approx(200.0)
    with pytest.raises(ValueError):
        bench.blast_rate(0, 1, 1, 0.0)


def test_cpu_shares_from_proc_stat():
    before = ("cpu  10 0 10 100 0 0 0 0 0 0\n"
              "cpu0 0 0 0 100 0 0 0 0 0 0\n"
              "cpu1 10 0 10 0 0 0 0 0 0 0\nintr 5\n")
    after = ("cpu  90 0 90 200 0 0 40 0 0 0\n"
             "cpu0 50 0 10 100 0 0 40 0 0 0\n"
             "cpu1 40 0 80 100 0 0 0 0 0 0\nintr 9\n")
    shares = bench.cpu_shares(bench.per_cpu(before), bench.per_cpu(after))
    assert list(shares) == ["cpu0", "cpu1"]
    assert shares["cpu0"] == pytest.approx((1.0, 0.4))     # 100 of 100 busy, 40 softirq
    assert shares["cpu1"] == pytest.approx((0.5, 0.0))     # 100 busy of 200
