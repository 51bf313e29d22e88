"""iperf3 command lines and JSON summaries (no root, no iperf3 run)."""

from traffic.iperf import client_args, summarize


def test_client_args_udp():
    args = client_args("10.0.0.2", port=5300, udp=True, bitrate=40e6, duration=2, dscp=26)
    assert args[:3] == ["iperf3", "-c", "10.0.0.2"]
    assert "-u" in args and args[args.index("-b") + 1] == "40000000"
    assert args[args.index("--dscp") + 1] == "26"


def test_summarize_tcp_and_udp():
    tcp = {"start": {"test_start": {"protocol": "TCP"}},
           "end": {"sum_sent": {"bits_per_second": 2e7, "retransmits": 3},
                   "sum_received": {"bits_per_second": 1.9e7, "bytes": 100, "seconds": 1.0}}}
    assert summarize(tcp) == {"protocol": "TCP", "bps": 1.9e7, "sent_bps": 2e7,
                              "retransmits": 3, "bytes": 100, "seconds": 1.0}
    udp = {"start": {"test_start": {"protocol": "UDP"}},
           "end": {"sum": {"bits_per_second": 1e6, "packets": 90, "lost_packets": 9,
                           "lost_percent": 10.0, "jitter_ms": 0.1, "seconds": 1.0}}}
    s = summarize(udp)
    assert s["lost_packets"] == 9 and s["lost_percent"] == 10.0 and s["protocol"] == "UDP"
