"""HPN dual-plane vs single-plane on real OVS (root): ``compare --planes``' runs.

The default dual-plane preset (2 ToR pairs, 2 bonded hosts per pair, 4
spines) and its single-plane counterpart with the same ToR uplink capacity
(``oversubscription=1``: 2 links at 10 Mbit/s vs 4 at 5 Mbit/s), one hash
seed on every fabric switch, an AlltoAll of 2M with 8 QPs per connection,
deep (lossless stand-in) queues.  A run that loses packets outside the
switch queues (the platform, not the fabric) is repeated.

In single-plane OVS ranks a spine's buckets (the destination's ToR A, ToR B)
exactly as the ToR below ranked its first two (spine1, spine2): what a ToR
sent to spine1 leaves spine1 towards ToR A, what it sent to spine2 leaves
towards ToR B, so spine1->ToR B and spine2->ToR A of every pair stay idle and
their partners carry double -- and queue.  In dual-plane a spine has one way
down to each host: no second hash, every downlink used.  About 40 s.
"""

import argparse

import pytest

from emulator.experiments.compare import planes, planes_stats
from emulator.experiments.measure import stats
from emulator.fabric.runspec import RunSpec

SEED = 101         # the compare --planes default; the bonds hash with 1..4


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    args = argparse.Namespace(sample_ms=20.0, size_list=[2 << 20], qps=8)
    fabrics = planes_stats.build_fabrics({})
    spec = RunSpec(fabrics["dual-plane"], queue_ms=2000.0, workload="alltoall",
                   results=str(tmp_path_factory.mktemp("planes")))
    out = {}
    for label, fabric, seeding, seed in planes.plan_runs(fabrics, ["shared"], 1, SEED):
        # a run that lost packets outside the switch queues (a starved datapath on a
        # busy machine) is repeated
        out[label] = planes.run_measured(spec, fabric, label, seeding, seed, args, retries=2,
                                         progress=lambda m: None)
    return out


def test_runs_are_lossless_and_sampled(runs):
    for label, r in runs.items():
        assert r["controller_problems"] == [], label
        assert r["drops"] == 0, label            # no queue overflowed: lossless model
        assert r["wrong"] == 0 or r["disturbed"], label
        assert r["samples"] > 20, label          # every 20 ms over a multi-second run
        assert r["hash_seeds"]["spine1"] == r["hash_seeds"]["leaf1"] == SEED
        assert r["hash_seeds"]["h1.nic"] != SEED   # the bond hashes with its own seed


def test_single_plane_polarizes_spine_downlinks(runs):
    r = runs["single-plane"]
    down = {k: v["bytes"] for k, v in r["per_link"].items() if v["tier"] == "spine_tor"}
    mean = sum(down.values()) / len(down)
    idle = {k for k, b in down.items() if b < stats.IDLE_FRACTION * mean}
    assert len(down) == 16
    assert idle == {"spine1->leaf2", "spine1->leaf4", "spine2->leaf1", "spine2->leaf3"}
    assert r["links"]["spine_tor"]["idle"] == 4
    assert r["links"]["spine_tor"]["max_over_mean"] >= 1.6


def test_dual_plane_uses_every_spine_downlink(runs):
    r = runs["dual-plane"]
    down = [v["bytes"] for v in r["per_link"].values() if v["tier"] == "spine_tor"]
    assert len(down) == 8 and r["links"]["spine_tor"]["idle"] == 0
    assert min(down) > 0.2 * sum(down) / len(down)


def test_polarized_downlinks_queue_longer(runs):
    single = runs["single-plane"]["queues"]["spine_tor"]
    dual = runs["dual-plane"]["queues"]["spine_tor"]
    # the double-loaded downlinks build queues the dual-plane spines do not
    assert single["max_ms"] > 100
    assert single["max_ms"] > 2 * dual["max_ms"], (single, dual)
