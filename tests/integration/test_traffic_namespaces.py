"""Root tests of the traffic engine over real namespaces, veths and a bridge."""

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): its own namespaces, no fabric
LAYOUT_INDEPENDENT = True

import json
import os
import subprocess
import tempfile

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap
from traffic_fixtures import (  # noqa: F401
    PYTHON,
    ROOT,
    bridge_lan,
    finish,
    lab,
    needs_root,
    pair,
    popen_in,
    run,
    wait_until,
)

from traffic.ranks.report import combine, table
from traffic.roce.frames import icrc

pytestmark = [needs_root, pytest.mark.timeout(120)]


def start_receiver(ns, ifname, tmp, *extra):
    """Start ``traffic recv`` and wait until its socket is open."""
    ready = os.path.join(tmp, f"ready-{ifname}")
    proc = popen_in(ns, "recv", "--intf", ifname, "--ready-file", ready, *extra)
    wait_until(lambda: os.path.exists(ready) or proc.poll() is not None,
               what="receiver ready")
    assert proc.poll() is None, proc.communicate()[1]
    return proc


def send(ns, ifname, src, dst, tmp, *extra):
    out = os.path.join(tmp, "sent.json")
    finish(popen_in(ns, "send", "--intf", ifname, "--src-ip", src, "--dst-ip", dst,
                    "--out", out, *extra), timeout=60)
    with open(out) as f:
        return json.load(f), out


def test_every_packet_accounted(pair):
    lab, a, ia, ipa, b, ib, ipb = pair
    with tempfile.TemporaryDirectory() as tmp:
        rx = start_receiver(b, ib, tmp, "--idle", "1.0", "--no-timeline")
        sent, sent_path = send(a, ia, ipa, ipb, tmp, "--qps", "4", "--packets", "20000",
                               "--pps", "20000")
        summary = json.loads(finish(rx, timeout=30))
    assert sent["sent_packets"] == 20000
    tot = summary["total"]
    assert tot["received_packets"] == 20000
    assert tot["dropped_packets"] == tot["duplicated_packets"] == 0
    assert tot["reordered_packets"] == 0 and tot["corrupted_packets"] == 0
    flows = {f["flow"]: f for f in summary["flows"]}
    assert sorted(flows) == sorted(sent["per_flow"]) == [f"{ipa}#{q}" for q in range(4)]
    assert all(f["received_packets"] == 5000 for f in flows.values())
    # one-way latency on one host is small and positive
    assert all(0 < f["latency_us"]["min"] < 50_000 for f in flows.values())


def test_capture_decodes_as_infiniband_bth(pair):
    lab, a, ia, ipa, b, ib, ipb = pair
    with tempfile.TemporaryDirectory() as tmp:
        cap = os.path.join(tmp, "cap.pcap")
        dump = subprocess.Popen(("ip", "netns", "exec", b, "tcpdump", "-i", ib, "-w", cap,
                                 "-U", "-c", "40", "udp", "port", "4791"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            # tcpdump prints "listening on" once its socket is open
            line = dump.stderr.readline()
            assert "listening" in line, line
            send(a, ia, ipa, ipb, tmp, "--qps", "2", "--first-qpn", "0x345",
                 "--packets", "40", "--pps", "2000")
            dump.wait(timeout=20)
        finally:
            if dump.poll() is None:
                dump.kill()
                dump.wait(timeout=5)
        assert dump.returncode == 0
        fields = run("tshark", "-r", cap, "-T", "fields", "-e", "infiniband.bth.opcode",
                     "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn",
                     "-e", "udp.srcport", "-e", "infiniband.invariant.crc", timeout=60)
        verbose = run("tshark", "-r", cap, "-V", "-c", "1", timeout=60)
        frames = rdpcap(cap)
    assert "InfiniBand" in verbose and "Base Transport Header" in verbose
    rows = [line.split("\t") for line in fields.strip().splitlines()]
    assert len(rows) == 40
    by_qp = {}
    for op, qp, psn, sport, crc in rows:
        assert int(op, 0) == 0x0A                       # RC RDMA WRITE ONLY
        by_qp.setdefault(int(qp, 0), []).append((int(psn), int(sport)))
    assert sorted(by_qp) == [0x345, 0x346]
    for qp, seen in by_qp.items():
        assert [p for p, _ in seen] == list(range(20))  # PSNs in order per QP
        assert len({s for _, s in seen}) == 1            # one sport per QP
    assert len({seen[0][1] for seen in by_qp.values()}) == 2
    for f in frames:
        raw_frame = bytes(f)
        stored = int.from_bytes(raw_frame[-4:], "little")
        assert stored == icrc(raw_frame)
        p = Ether(raw_frame)
        p[BTH].icrc = None                               # scapy recomputes it
        assert bytes(p)[-4:] == raw_frame[-4:]


def test_paused_sender_is_one_disruption(pair):
    lab, a, ia, ipa, b, ib, ipb = pair
    with tempfile.TemporaryDirectory() as tmp:
        # a gap of 50 ms: the 100 ms pause, not a 10-30 ms hold-up of either process
        rx = start_receiver(b, ib, tmp, "--idle", "1.0", "--gap-ms", "50")
        sent, sent_path = send(a, ia, ipa, ipb, tmp, "--packets", "4000", "--pps", "5000",
                               "--pause", "0.3", "0.1")
        summary = json.loads(finish(rx, timeout=30))
    (flow,) = summary["flows"]
    assert flow["received_packets"] == 4000 and flow["dropped_packets"] == 0
    assert flow["total_disruptions"] == 1
    assert 95 <= flow["longest_disruption_ms"] < 200
    assert flow["longest_disruption"] == pytest.approx(flow["longest_disruption_ms"] / 1e3)
    assert flow["disrupted_packets"] == 0
    # the timeline shows the silence: ~100 empty 1 ms bins
    tl = summary["timeline_mbps"]
    longest_zero = max(len(run_) for run_ in "".join(
        "0" if v == 0 else "1" for v in tl).split("1"))
    assert 90 <= longest_zero <= 200


def test_four_rank_ring_allreduce_over_bridge(lab):
    hosts = bridge_lan(lab, 4)
    size = 256 * 1024
    with tempfile.TemporaryDirectory() as tmp:
        ranks = [{"name": f"h{i}", "ip": ip, "mac": mac, "intf": ifname,
                  "leaf": f"leaf{i % 2}"} for i, (ns, ifname, ip, mac) in enumerate(hosts)]
        procs = []
        for i, (ns, *_rest) in enumerate(hosts):
            cfg = {"rank": i, "ranks": ranks, "collective": "allreduce",
                   "sizes": [size, 4 * size], "rate_bps": 100e6, "qps": 2,
                   "ring": "topology", "warmup": 1,
                   "output": os.path.join(tmp, f"rank{i}.json")}
            path = os.path.join(tmp, f"rank{i}.cfg.json")
            with open(path, "w") as f:
                json.dump(cfg, f)
            procs.append(popen_in(ns, "rank", "--config", path))
        for p in procs:
            finish(p, timeout=90)
        results = []
        for i in range(4):
            with open(os.path.join(tmp, f"rank{i}.json")) as f:
                results.append(json.load(f))
        out = run(PYTHON, "-m", "traffic", "report",
                  *[os.path.join(tmp, f"rank{i}.json") for i in range(4)], timeout=30)
    rep = combine(results)
    print(table(rep))
    assert [r["wrong"] for r in rep["rows"]] == [0, 0]
    assert results[0]["ring"] == [0, 2, 1, 3]
    for r in results:
        for row, sz in zip(r["results"], (size, 4 * size)):
            assert row["steps"] == 6
            # payload bytes sent = 2(n-1)/n * size, plus the headers of each packet
            assert 1.5 * sz < row["bytes_sent"] < 1.5 * sz * 1.1
            assert row["bytes_received"] == row["bytes_sent"]
    busbw = rep["rows"][1]["busbw_Mbps"]
    assert 5 < busbw <= 100        # cannot beat the paced link rate
    assert "allreduce" in out and "#wrong" in out


@pytest.mark.parametrize("udp", [False, True])
def test_iperf3_between_namespaces(pair, udp):
    from traffic.iperf import Iperf3Server, run_client
    lab, a, ia, ipa, b, ib, ipb = pair
    with Iperf3Server(b, port=5301):
        res = run_client(a, ipb, port=5301, udp=udp, bitrate=20e6, duration=1.0)
    assert res["protocol"] == ("UDP" if udp else "TCP")
    if udp:
        assert res["packets"] > 100 and res["lost_percent"] < 5
        assert 15e6 < res["bps"] < 25e6
    else:
        assert 15e6 < res["bps"] < 25e6


def run_ranks(hosts, tmp, collective, sizes, **extra):
    """Run one rank per host; return their result documents."""
    ranks = [{"name": f"h{i}", "ip": ip, "mac": mac, "intf": ifname}
             for i, (ns, ifname, ip, mac) in enumerate(hosts)]
    procs = []
    for i, (ns, *_rest) in enumerate(hosts):
        # one warm-up call absorbs the ranks' start skew (a rank still building its
        # frames does not answer yet: its peers' first packets time out)
        cfg = dict({"rank": i, "ranks": ranks, "collective": collective, "sizes": sizes,
                    "rate_bps": 40e6, "warmup": 1,
                    "output": os.path.join(tmp, f"r{i}.json")}, **extra)
        path = os.path.join(tmp, f"r{i}.cfg.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        procs.append(popen_in(ns, "rank", "--config", path))
    statuses = []
    for p in procs:
        try:
            p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate(timeout=5)
            raise AssertionError(f"rank hung: {p.args}")
        statuses.append(p.returncode)
    docs = []
    for i in range(len(hosts)):
        with open(os.path.join(tmp, f"r{i}.json")) as f:
            docs.append(json.load(f))
    return statuses, docs


def drop_roce_ingress(ns, ifname, tmp, share=None):
    """Drop all (or ``share`` % at random) of the RoCEv2 frames arriving at ``ifname``."""
    # netdev ingress runs before the ETH_P_IP packet socket: the rank never sees them
    match = f"numgen random mod 100 < {share} " if share is not None else ""
    rules = (f"add table netdev flt\n"
             f"add chain netdev flt in {{ type filter hook ingress device {ifname} priority 0; }}\n"
             f"add rule netdev flt in udp dport 4791 {match}drop\n")
    path = os.path.join(tmp, "drop.nft")
    with open(path, "w") as f:
        f.write(rules)
    run("nft", "-f", path, ns=ns)


def test_rc_transport_recovers_random_loss(lab):
    """5 % of one rank's arriving frames (data and ACKs) dropped: every chunk still
    arrives (go-back-N), and the ranks count what it cost."""
    hosts = bridge_lan(lab, 3)
    with tempfile.TemporaryDirectory() as tmp:
        drop_roce_ingress(hosts[1][0], hosts[1][1], tmp, share=5)
        pcap = os.path.join(tmp, "rank1.pcap")
        cap = subprocess.Popen(["ip", "netns", "exec", hosts[1][0], "tcpdump", "-i",
                                hosts[1][1], "--immediate-mode", "-U", "-w", pcap,
                                "udp port 4791"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            assert cap.stderr.readline().startswith(b"tcpdump: listening")
            statuses, docs = run_ranks(hosts, tmp, "allreduce", [96 * 1024], warmup=0,
                                       timeout_exp=12)
        finally:
            cap.terminate()
            cap.communicate(timeout=10)
        # the NAKs the lossy rank sent decode as ACKNOWLEDGE with a NAK syndrome
        fields = run("tshark", "-r", pcap, "-Y", "infiniband.aeth", "-T", "fields",
                     "-e", "infiniband.bth.opcode", "-e", "infiniband.aeth.syndrome",
                     timeout=120)
    kinds = {tuple(ln.split("\t")) for ln in fields.strip().splitlines()}
    assert statuses == [0, 0, 0], json.dumps([(d["failed_qps"], d["results"]) for d in docs])
    assert ("17", "31") in kinds                                  # ACK
    assert ("17", "96") in kinds and docs[1]["transport"]["naks_sent"] > 0   # NAK (0x60)
    assert combine(docs)["rows"][0]["wrong"] == 0
    retx = sum(d["transport"]["retransmitted_packets"] for d in docs)
    naks = sum(d["transport"]["naks_sent"] for d in docs)
    assert retx > 0
    assert naks + sum(d["transport"]["timeouts"] for d in docs) > 0
    assert all(d["failed_qps"] == [] for d in docs)


def test_rc_qp_runs_out_of_retries(lab):
    """Nothing RoCE reaches rank 1 (data or ACKs): a QP between the two fails after
    retry_cnt retries, its rank aborts the job, and the other rank stops too."""
    hosts = bridge_lan(lab, 2)
    with tempfile.TemporaryDirectory() as tmp:
        drop_roce_ingress(hosts[1][0], hosts[1][1], tmp)
        statuses, docs = run_ranks(hosts, tmp, "allreduce", [64 * 1024], warmup=0,
                                   timeout_exp=10, retry_cnt=2, step_timeout_s=0.5)
    assert statuses == [1, 1]
    failed = [(i, q) for i, d in enumerate(docs) for q in d["failed_qps"]]
    assert failed, docs
    i, q = failed[0]
    assert q == {"peer": f"h{1 - i}", "qp": 0}
    assert docs[i]["transport"]["timeouts"] == 3          # the first try + 2 retries
    assert all(d["results"][-1]["aborted"] for d in docs)   # both stopped the job
    assert docs[1]["results"][0]["chunks_missing"] >= 1


def test_lost_chunks_time_out_into_wrong(lab):
    """Without a transport, a rank whose RoCE ingress is dropped: its chunks are #wrong,
    nobody hangs."""
    hosts = bridge_lan(lab, 2)
    with tempfile.TemporaryDirectory() as tmp:
        drop_roce_ingress(hosts[1][0], hosts[1][1], tmp)
        statuses, docs = run_ranks(hosts, tmp, "allreduce", [64 * 1024], warmup=0,
                                   step_timeout_s=0.5, transport="none")
    assert statuses == [0, 1]                      # exit 1: this rank saw #wrong
    assert docs[0]["results"][0]["chunks_missing"] == 0
    assert docs[1]["results"][0]["chunks_missing"] == 2
    assert docs[1]["results"][0]["time_s"] >= 1.0   # two step timeouts
    assert combine(docs)["rows"][0]["wrong"] == 2


@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "alltoall"])
def test_other_collectives_over_bridge(lab, collective):
    hosts = bridge_lan(lab, 3)
    with tempfile.TemporaryDirectory() as tmp:
        statuses, docs = run_ranks(hosts, tmp, collective, [3 * 20000], qps=3)
    assert statuses == [0, 0, 0]
    rep = combine(docs)
    assert rep["rows"][0]["wrong"] == 0
    for d in docs:
        row = d["results"][0]
        assert row["steps"] == 2
        assert row["bytes_received"] == row["bytes_sent"] > 40000


def test_traffic_mix_between_pairs(lab):
    from traffic.mix import Endpoint, Pair, run_mix
    hosts = bridge_lan(lab, 3)
    ep = [Endpoint(ns, ifname, ip) for ns, ifname, ip, _mac in hosts]
    pairs = [Pair(ep[0], ep[2], rate_bps=8e6, qps=2), Pair(ep[1], ep[2], rate_bps=4e6, qps=1),
             Pair(ep[2], ep[0], rate_bps=4e6, qps=3)]
    res = run_mix(pairs, duration=1.0, idle=0.5, python=PYTHON)
    assert sorted(res) == [ep[0].ip, ep[2].ip]
    at2 = {f["flow"]: f for f in res[ep[2].ip]["flows"]}
    assert sorted(at2) == [f"{ep[0].ip}#0", f"{ep[0].ip}#1", f"{ep[1].ip}#2"]
    assert sorted(f["flow"] for f in res[ep[0].ip]["flows"]) == [
        f"{ep[2].ip}#{i}" for i in (3, 4, 5)]
    for r in res.values():
        assert r["total"]["dropped_packets"] == 0
        assert r["total"]["received_packets"] == r["total"]["sent_packets"] > 0
    # 8 Mbit/s over 2 QPs of 1078-byte frames for 1 s: ~464 packets per QP
    assert 400 < at2[f"{ep[0].ip}#0"]["received_packets"] < 530


def test_a_sender_on_a_link_that_went_down_loses_its_frames_and_goes_on(lab):
    """A fault that sets a host's interface down makes its packet sockets fail with
    ENETDOWN: the frames are lost on the wire (counted), the sender does not die
    (the traffic engine and the ranks read through the same error)."""
    from traffic.nic.sender import Sender
    from traffic.roce.frames import FrameTemplate
    ia, _ = lab.veth(None, "a", lab.ns("b"), "b")
    t = FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.9.0.1", "10.9.0.2",
                      0x11, frame_len=1000)
    with Sender(ia) as s:
        assert s.mmsg
        s.emit([(t, i, 1, 0, 0, i, 4) for i in range(4)])
        assert s.link_down == 0
        run("ip", "link", "set", ia, "down")
        s.emit([(t, i, 1, 0, 0, i, 4) for i in range(4)])
        assert s.link_down == 4
        assert not s.send_one(t.frame(0)) and s.control_dropped == 1


def _peak_backlog(ifname, frames, sndbuf):
    """Send ``frames`` back to back through a Sender with ``sndbuf`` into ``ifname``'s
    shaper; returns (its largest backlog seen meanwhile, its drops, seconds taken)."""
    import threading
    import time

    from pyroute2 import IPRoute
    from traffic_fixtures import ECN_FRAME

    from emulator.dataplane.links import shaping
    from traffic.nic.sender import Sender
    from traffic.roce.frames import FrameTemplate
    t = FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.9.0.1", "10.9.0.2",
                      0x11, frame_len=ECN_FRAME)
    peak, done = [0], threading.Event()
    with IPRoute() as ipr:
        index = ipr.link_lookup(ifname=ifname)[0]
        drops0 = shaping.stats(ipr, index)[1]

        def watch():
            with IPRoute() as r:
                while not done.is_set():
                    peak[0] = max(peak[0], shaping.stats(r, index)[0])
                    time.sleep(0.0005)
        w = threading.Thread(target=watch)
        w.start()
        t0 = time.monotonic()
        try:
            with Sender(ifname, batch=8, sndbuf=sndbuf) as s:
                for k in range(0, frames, 8):
                    s.emit([(t, i, 1, 0, 0, i, frames) for i in range(k, k + 8)])
            took = time.monotonic() - t0
        finally:
            done.set()
            w.join(5)
        return peak[0], shaping.stats(ipr, index)[1] - drops0, took


def test_a_rank_holds_few_frames_in_its_interface_queue_like_a_nic_ring(lab):
    """A rank's sender keeps at most a few frames in its host link's queue (a small
    send buffer: a frame counts against it until the link takes it), so a rate cut
    acts on the wire at once and the host's own queue never overflows. With a large
    send buffer the same 40 frames pile up in the 30 ms queue."""
    from traffic_fixtures import ECN_FRAME, ECN_RATE, shaped_veth
    ia, _, _ = shaped_veth(lab)
    peak, drops, took = _peak_backlog(ia, 40, sndbuf=4 * (4096 + 100))
    assert drops == 0 and peak <= 10 * ECN_FRAME, peak
    assert took >= 25 * ECN_FRAME * 8 / ECN_RATE          # it waited for the link
    peak, _, _ = _peak_backlog(ia, 40, sndbuf=4 << 20)
    assert peak >= 15 * ECN_FRAME, peak               # ~38 frames (the whole queue)
