"""The switches' own adaptive routing on real fabrics (root, OVS, os-ken):

- a cut uplink with nothing else to repair it (``--failover none``): the flows
  whose own leaf decides leave the dead uplink within the detection delay and
  a few packets, timestamped in the data plane (the leaf's end stays up, its
  egress rescuing what Open vSwitch still held); the flows only a remote switch
  could save lose the whole fault;
- the same cut with the controller repairing: the remote leaf's data plane
  stops using the dead path once the controller's push has reached it;
- a lossless fabric: the stage's program runs after PFC's on every interface
  (one XDP program per interface, chained) and the collective is whole;
- a competing stream mid-collective: the data plane moves the collective off
  the stream's uplink, where hashing leaves it;
- a host's own DSCP (46, and the mark of the uplink its ECMP route does not
  take) crosses a dlb fabric untouched, by its ECMP route; the class's frames
  are decided and arrive as they were sent.
"""

import json
import os
import re
import subprocess
import sys
from collections import Counter

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from emulator.dataplane.adaptive.model import MARK_BASE
from emulator.dataplane.session import Session
from emulator.experiments.workloads.mix import measure, netns_of
from emulator.fabric import presets
from tests.conftest import REPO, assert_contract
from traffic.roce.frames import udp_sport

SMALL = ["-P", "spines=2", "-P", "leaves=2"]


def emulator(tmp_path, *argv, timeout=600):
    p = subprocess.run([sys.executable, "-m", "emulator", *argv, "--results", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def test_a_dead_uplink_is_left_by_the_deciding_switch_alone(tmp_path):
    out = emulator(tmp_path, "drill", *SMALL, "-P", "hosts_per_leaf=1", "--lb", "dlb",
                   "--failover", "none", "--repeat", "2")
    doc = json.loads(next(tmp_path.glob("drill-*/drill.json")).read_text())
    assert_contract("drill.json", doc)
    m = doc["modes"][0]
    a = m["summary"]["adaptive"]
    assert all(r["fidelity"]["verdict"] == "faithful" for r in m["repeats"]), out[-2000:]
    # 1 ms detection + the packets in flight (3-4 ms on an idle machine); a generous
    # bound, far below the fault's 1 s that nothing else would repair
    assert a["local_loss_window_ms"]["max"] <= 20.0, a
    assert a["remote_loss_window_ms"]["median"] >= 10 * a["local_loss_window_ms"]["max"], a
    assert a["first_elsewhere_after_cut_ms"]["max"] <= 20.0, a
    assert a["detect_ms"]["median"] >= 0.9                  # the modelled 1 ms
    assert m["summary"]["non_crossing_lost_packets"] == 0
    assert "flows whose own switch decides" in out and "reaction to carrier loss" in out
    # the cut set spine1's end down and kept leaf1's up, its egress rescuing frames
    # held in Open vSwitch's backlog (counted per repeat, however many)
    cuts = [json.loads(line) for line in next(tmp_path.glob("drill-*/*/faults.jsonl"))
            .read_text().splitlines() if '"link_down"' in line]
    assert cuts and all(len(c["kept_up"]) == 1 for c in cuts), cuts
    assert a["rescued_frames"]["n"] == 2, a


def test_the_remote_leaf_drops_the_dead_path_once_the_controller_has_repaired(tmp_path):
    out = emulator(tmp_path, "drill", *SMALL, "-P", "hosts_per_leaf=1", "--lb", "packet",
                   "--failover", "controller", "--repeat", "1")
    doc = json.loads(next(tmp_path.glob("drill-*/drill.json")).read_text())
    m = doc["modes"][0]
    a = m["summary"]["adaptive"]
    # leaf2's route to h1 loses spine1 with the controller's push, not before it
    conv = m["repeats"][0]["controller"]
    assert a["withdrawn_after_cut_ms"]["n"] == 1, a
    assert a["withdrawn_after_cut_ms"]["median"] >= a["detect_ms"]["median"], a
    # the flows into leaf1 through spine1 lose until then: not the fault's whole second
    assert a["remote_loss_window_ms"]["max"] <= 300.0, (a, conv)
    # the dead uplink's loss, split: decided before the cut, or during the detection
    assert a["lost_before_cut_frames"]["n"] == 1, a
    assert "withdrew the dead path's candidates" in out


def test_on_a_lossless_fabric_the_stage_follows_pfc_on_every_interface(tmp_path):
    out = emulator(tmp_path, "run", *SMALL, "-P", "hosts_per_leaf=2", "-P", "lossless=true",
                   "--workload", "allreduce", "--sizes", "1M", "--lb", "packet")
    r = json.loads(next(tmp_path.glob("*/results.json")).read_text())
    assert r["adaptive"]["frames"] > 100, r["adaptive"]
    assert r["collective"]["rows"][-1]["wrong"] == 0
    assert r["lossless"]["ingress_drops"] == 0 and r["lossless"]["watchdog_drops"] == 0
    assert "adaptive routing in the switches (packet" in out


def test_a_competing_stream_is_left_to_its_uplink(tmp_path):
    out = emulator(tmp_path, "compare", "-P", "spines=4", "-P", "leaves=2",
                   "-P", "hosts_per_leaf=3", "--ring", "strided", "--qps", "2", "--sizes", "2M",
                   "--reps", "1", "--retries", "0", "--modes", "dlb", "--stream", "h3:h6")
    doc = json.loads(next(tmp_path.glob("*compare/compare.json")).read_text())
    rows = {r["mode"]: r for r in doc["rows"]}
    streamed = [r for r in doc["runs"] if r.get("stream")]
    assert len(streamed) == 1 and all(r["stream"]["started"] and not r["stream"]["error"]
                                      for r in streamed), streamed
    assert all(r["stream"]["uplink"].startswith("leaf1:") for r in streamed)
    # the stream takes its uplink's full rate; balanced, a QP of the collective was
    # there (4 QPs on 4 uplinks): the switches move it, so the collective keeps its
    # pace and the uplink's queue stays short (a QP left beside it: hundreds of ms)
    assert rows["dlb"]["loss"] <= 0.1, out[-1500:]
    assert rows["dlb"]["queue_p99_ms"] < 50, out[-1500:]
    assert rows["dlb"]["wrong"] == 0


QPN, FRAME = 0x100, 1078


def one_stream(s, src, dst, dscp):
    """An engine plan: one QP from ``src`` to ``dst`` at 100 packets/s for 1 s."""
    sp, dp = src["ports"][0], dst["ports"][0]
    return {"duration": 1.0, "frame_len": FRAME, "idle": 0.5,
            "streams": [{"name": "own", "netns": netns_of(s.net, src["name"]),
                         "intf": sp["port"], "src_mac": sp["mac"], "src_ip": sp["ip"],
                         "dst_mac": dp["mac"], "dst_ip": dp["ip"], "rate_pps": 100,
                         "qps": 1, "first_qpn": QPN, "dscp": dscp}],
            "receivers": [{"name": "dst", "netns": netns_of(s.net, dst["name"]),
                           "intf": dp["port"]}]}


def ecmp_uplink(s, leaf, src, dst, sport):
    """The uplink ofproto/trace takes for the flow (a host's frame: the select group)."""
    sw = next(x for x in s.topo["switches"] if x["name"] == leaf)
    text = s.net.ovs(leaf).appctl(
        "ofproto/trace", sw["bridge"],
        f"in_port={src['ports'][0]['switch_port']},udp,dl_src={src['mac']},"
        f"dl_dst={dst['mac']},nw_src={src['ip']},nw_dst={dst['ip']},nw_ttl=64,"
        f"udp_src={sport},udp_dst=4791", timeout=10)
    return int(re.findall(r"\boutput:(\d+)", text)[-1])


def test_a_hosts_own_dscp_crosses_a_dlb_fabric_untouched(tmp_path):
    fabric = presets.build("leaf-spine", {"spines": 2, "leaves": 2, "hosts_per_leaf": 1})
    got = {}
    with Session(fabric, lb="dlb", capture="h2", results_base=str(tmp_path)) as s:
        h1, h2 = s.topo["hosts"][:2]
        leaf1 = next(x for x in s.topo["switches"] if x["name"] == "leaf1")
        ups = {p["port"]: p["intf"] for p in leaf1["ports"] if p["peer_kind"] != "host"}
        route = ecmp_uplink(s, "leaf1", h1, h2, udp_sport(QPN, QPN))
        (other,) = set(ups) - {route}
        # 46, and the mark of the uplink ECMP does not take (the stage's mark before)
        for dscp in (46, MARK_BASE + other, 26):
            before, decided = s.net.intf_counters(), s.adaptive.summary()["frames"]
            res, _ = measure(s, one_stream(s, h1, h2, dscp))
            after = s.net.intf_counters()
            got[dscp] = res["engine"]["received_packets"]
            assert got[dscp] >= 50, res["engine"]
            grew = {p: after[i][0] - before[i][0] for p, i in ups.items()}
            if dscp != 26:                   # a host's own: ECMP's uplink, not decided
                assert grew[route] >= got[dscp] * FRAME and grew[other] < FRAME, (dscp, grew)
                assert s.adaptive.summary()["frames"] == decided
            else:                            # the class: the stage decides every frame
                assert s.adaptive.summary()["frames"] - decided == res["engine"]["sent_packets"]
        pcap = os.path.join(s.dir, "capture-h2-eth0.pcap")
    frames = [f for f in rdpcap(pcap) if UDP in f and f[UDP].dport == 4791]
    arrived = Counter((f[IP].tos >> 2, f[Ether].src) for f in frames)
    # every frame arrived with the DSCP and the source address it was sent with
    assert arrived == {(d, h1["mac"]): n for d, n in got.items()}, arrived
