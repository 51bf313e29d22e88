"""The default traffic mix's pairs (pure): cross-leaf, rail-aligned, cross-plane."""

from emulator.experiments.workloads.workload import cross_leaf_pairs, mix_pairs
from emulator.fabric import addressing, presets


def plan(name, params=None):
    return addressing.plan(presets.build(name, params or {}), "ab12")


def test_single_nic_hosts_pair_across_leaves():
    topo = plan("leaf-spine", {"spines": "2", "leaves": "2", "hosts_per_leaf": "2"})
    pairs = mix_pairs(topo, load=0.5)
    assert [(s["name"], d["name"]) for s, _, d, _, _, _ in pairs] == [
        ("h1", "h3"), ("h2", "h4"), ("h3", "h1"), ("h4", "h2")]
    assert all(sp is s["ports"][0] and share == 0.5 and not cross
               for s, sp, _, _, share, cross in pairs)


def test_dual_homed_hosts_pair_by_their_first_tor():
    topo = plan("dual-tor")
    assert [(s["name"], d["name"]) for s, d in cross_leaf_pairs(topo)] == [
        ("h1", "h3"), ("h2", "h4"), ("h3", "h1"), ("h4", "h2")]
    assert {sp["port"] for _, sp, _, _, _, _ in mix_pairs(topo)} == {"bond0"}


def test_multi_plane_rail_aligned_plus_cross_plane_through_the_destination_rail():
    topo = plan("multi-plane")          # 2 rails, 4 hosts, 2 leaves per rail
    pairs = mix_pairs(topo, load=0.5)
    aligned = [p for p in pairs if not p[5]]
    cross = [p for p in pairs if p[5]]
    assert len(aligned) == 2 * 4 and len(cross) == 4
    for s, sp, d, dp, share, _ in aligned:
        rail = s["ports"].index(sp)
        assert d["ports"].index(dp) == rail and sp["switch"] != dp["switch"]
        assert share == 0.25
    for s, sp, d, dp, _, _ in cross:
        # leaves on the rail-2 NIC of the source: the hop to rail 2 is inside the host
        assert sp is s["ports"][1] and dp is d["ports"][1] and s is not d
    # every NIC of every host sends on its own rail only
    switch_plane = {sw["name"]: sw["plane"] for sw in topo["switches"]}
    for s, sp, d, dp, _, _ in pairs:
        assert switch_plane[sp["switch"]] == switch_plane[dp["switch"]]
