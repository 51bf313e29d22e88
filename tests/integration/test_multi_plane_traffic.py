"""Multi-plane traffic (root): every rail carries its own traffic, cross-plane traffic is counted.

The default mix on a 2-rail fabric: rail-aligned connections on both rails
plus one cross-plane connection per host, which leaves the source host
through the destination rail's NIC (the NVLink hop inside the host).  The
rail-2 uplinks carry the cross-plane bytes; the counters show it.
"""

from emulator.dataplane.session import Session
from emulator.experiments.workloads import mix
from emulator.fabric import presets


def test_default_mix_counts_cross_plane_traffic(tmp_path):
    fabric = presets.build("multi-plane", {})
    with Session(fabric, results_base=str(tmp_path)) as s:
        t = mix.default_mix(s, duration=2.0, qps=2)
    cp = t["cross_plane"]
    assert cp["connections"] == 4 and cp["flows"] == 8
    assert cp["sent_packets"] > 0
    assert cp["received_packets"] >= 0.99 * cp["sent_packets"], cp
    assert t["received_packets"] >= 0.99 * t["sent_packets"]
    rail = {sw["name"]: sw["plane"] for sw in s.topo["switches"]}
    by_plane = {1: 0.0, 2: 0.0}
    for leaf in t["uplinks"]:
        by_plane[rail[leaf["leaf"]]] += sum(u["mbps"] for u in leaf["loads"])
    # rail 2 carries its aligned traffic plus every cross-plane connection
    assert by_plane[2] > 1.2 * by_plane[1], by_plane
