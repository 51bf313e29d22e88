"""Unequal dual links (root): select buckets weighted by rate, flows shared in proportion.

A dual-link leaf with a 40 and a 20 Mbit/s uplink to one spine: the leaf's
select group carries bucket weights 2 and 1, and 96 UDP flows (distinct
source ports, the RoCEv2 entropy) leave on the two uplinks about 2:1.
"""

import re
import sys

from emulator.dataplane.session import Session
from emulator.fabric import presets
from tests.integration.test_fabric import SENDER


def test_unequal_uplinks_share_flows_by_rate(tmp_path):
    fabric = presets.build("dual-link", {"spines": "1", "leaves": "2", "hosts_per_leaf": "1",
                                         "primary_rate": "40Mbps", "secondary_rate": "20Mbps"})
    with Session(fabric, results_base=str(tmp_path)) as s:
        leaf1 = next(sw for sw in s.topo["switches"] if sw["name"] == "leaf1")
        groups = s.net.ovs("leaf1").ofctl("dump-groups", leaf1["bridge"])
        (select,) = [g for g in groups.splitlines() if "type=select" in g]
        weights = {}                     # ovs-ofctl omits the default weight:1
        for bucket in select.split("bucket=")[1:]:
            w = re.search(r"weight:(\d+)", bucket)
            weights[int(re.search(r"watch_port:(\d+)", bucket).group(1))] = int(w.group(1)) if w else 1
        ups = {p["port"]: p for p in leaf1["ports"] if p["peer_kind"] == "spine"}
        fast = next(n for n, p in ups.items() if p["rate_bps"] == 40_000_000)
        slow = next(n for n, p in ups.items() if p["rate_bps"] == 20_000_000)
        assert (weights.get(fast), weights.get(slow)) == (2, 1), select
        src, dst = s.topo["hosts"][0], s.topo["hosts"][1]
        before = s.net.intf_counters()
        s.net.run_in(src["name"], [sys.executable, "-c", SENDER, dst["ip"], "41000", "96",
                                   "10"], timeout=60)
        after = s.net.intf_counters()
        sent = {n: after[p["intf"]][2] - before[p["intf"]][2] for n, p in ups.items()}
        assert sum(sent.values()) >= 96 * 10, sent
        share = sent[fast] / sum(sent.values())
        # 2:1 expects 0.67; 96 flows give a standard deviation of about 0.05
        assert 0.5 <= share <= 0.84, sent
