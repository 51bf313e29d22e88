"""A collective over the Ultra Ethernet transport (root): ``run --workload incast
--transport uet --trim`` on a small leaf-spine, three senders on three leaves into
one receiver.

The receiver's port overflows, so its leaf trims: the trims are counted at that
port, the receiver NACKs each trimmed packet and the sender sends it again; the
packets sprayed over the spines arrive out of order and are placed where they
belong (RUD with selective acknowledgement).  Every byte arrives: #wrong 0, each
packet of every call placed once, the receiver's bytes those of the senders.  The
receiver's capture decodes with the scapy layer: requests with their PSNs, trimmed
ones among them, ACK_CCs with a SACK bitmap, NACKs for trimmed packets.

It asserts what arrives and what is counted, not how fast: the fidelity verdict
says whether a time could be trusted, and a run whose pace the machine set must
deliver every byte all the same.
"""

import json

from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from tests.conftest import emulator, results_of
from traffic.uet import layout, scapy_layer

SIZE = 256 * 1024
HOSTS = ("h1", "h4", "h7", "h10")        # one host a leaf: every packet crosses a spine


def test_a_uet_incast_is_delivered_whole_out_of_order_and_trimmed(tmp_path):
    p = emulator("run", "--workload", "incast", "--transport", "uet", "--trim",
                 "--sizes", "256K", "-P", "hosts_per_leaf=3", "--hosts", ",".join(HOSTS),
                 "--capture", HOSTS[0], "--results", str(tmp_path))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc, run = results_of(tmp_path)
    coll = doc["collective"]
    assert coll["fidelity"]["verdict"]              # judged (not asserted: see above)
    (row,) = coll["rows"]
    assert row["size"] == SIZE and row["wrong"] == 0 and not row["aborted"], row
    assert row["ranks_reporting"] == len(HOSTS)
    # every packet of every call (the warm-up and the measured one) placed once
    cfg = json.loads((run / "collective" / "rank0.config.json").read_text())
    root = json.loads((run / "collective" / "rank0.json").read_text())
    senders, calls = len(HOSTS) - 1, 1 + cfg["warmup"]
    t = coll["transport"]
    assert t["placed_packets"] == calls * senders * SIZE // cfg["mtu"], t
    (measured,) = root["results"]
    assert measured["bytes_received"] >= senders * SIZE and measured["chunks_missing"] == 0
    # unordered delivery with SACK: packets placed ahead of a gap
    assert t["placed_out_of_order"] > 0, t
    # the receiver's leaf trimmed its overflowing port; each trim NACKed and resent
    trims = doc["trim"]
    assert trims["trimmed_total"] > 0, trims
    assert len(trims["trimmed_packets"]) >= 1
    assert t["trimmed_received"] > 0 and t["naks_sent"] >= t["trimmed_received"]
    assert t["retransmitted_by_trim"] >= t["trimmed_received"], t
    assert t["trimmed_received"] <= trims["trimmed_total"]
    assert not coll["failed_qps"]
    assert "transport uet" in coll["table"] and "trimmed" in coll["table"]
    assert "trims" in p.stdout or "trimmed" in p.stdout
    # the receiver's capture, decoded by the scapy layer
    (cap,) = [name for name in doc["captures"] if name.startswith(f"capture-{HOSTS[0]}-")]
    seen = [scapy_layer.summary(Ether(bytes(pkt))) for pkt in rdpcap(str(run / cap))]
    seen = [s for s in seen if s]
    requests = [s for s in seen if s["type"] == "RUD_REQ"]
    assert requests and all(isinstance(s["psn"], int) for s in requests)
    assert any(s["trimmed"] and s["length"] == layout.TRIM_BYTES for s in requests)
    assert any(s["type"] == "ACK_CC" and s["sack_bitmap"] for s in seen)
    assert any(s["type"] == "NACK" and s["code"] == layout.NACK_TRIMMED for s in seen)
