"""Load-balancing modes on a real fabric (root, OVS, os-ken), small and adversarial.

2 spines x 2 leaves x 2 hosts at 5 Mbit/s; an AllReduce over a strided ring
(h1 -> h3 -> h2 -> h4: every hop crosses the spines, two flows leave each
leaf).  With one hash seed of 1 on every switch, OVS's ECMP hash puts both
flows of a leaf on one uplink (found by measurement; the hash is a pure
function of seed, addresses and ports, so it is fixed).  Every link is
shaped and queues are deep (a lossless, PFC-like stand-in), so a collision
shows as it does on a RoCE fabric: the shared uplink halves both flows and
the collective slows down; every balancing mode (the controller's placement,
the switches' own data plane per flowlet and per packet, spraying NICs) spreads
them.  About 150 s.
"""

import argparse
import subprocess

import pytest

from emulator.experiments.compare import compare
from emulator.fabric import presets
from emulator.fabric.runspec import RunSpec

SEED = 1
RATE = "5Mbps"


@pytest.fixture(scope="module")
def fabric():
    return presets.build("leaf-spine", {"spines": 2, "leaves": 2, "hosts_per_leaf": 2,
                                        "host_rate": RATE, "uplink_rate": RATE})


ARGS = argparse.Namespace(flowlet_gap_ms=25.0, reps=1, retries=0)


@pytest.fixture(scope="module")
def runs(fabric, tmp_path_factory):
    spec = RunSpec(fabric, hash_seed=SEED, queue_ms=2000.0, workload="allreduce",
                   results=str(tmp_path_factory.mktemp("lb")))
    modes = ("ecmp", "controller-dlb", "dlb", "packet", "spray")
    got = compare.repetitions(spec, [(m, "strided", 1) for m in modes], [512 << 10], ARGS,
                              lambda m: None)
    return {r["mode"]: r for r in got}


def test_no_controller_problems_and_no_loss(runs):
    for mode, r in runs.items():
        assert r["controller_problems"] == [], mode
        assert r["wrong"] == 0, mode


def test_ecmp_seed_collides(runs):
    r = runs["ecmp"]
    assert max(r["per_uplink"].values()) <= 1.05      # a shaped uplink carries its rate...
    assert r["max_over_mean"] > 1.6                   # ...while the other one idles
    assert r["efficiency"] < 0.65                     # and the collective slows down
    # 2 leaves x 2 flows on 2 paths: P(no collision) = 1/4, else 1/2: 0.625
    assert r["expected"] == pytest.approx(0.625, abs=0.02)


@pytest.mark.parametrize("mode", ["controller-dlb", "dlb", "packet"])
def test_dlb_spreads_the_colliding_flows(runs, mode):
    r = runs[mode]
    assert r["max_over_mean"] < 1.2 and r["jain"] > 0.95
    assert max(r["per_uplink"].values()) < 1.05
    assert r["efficiency"] > runs["ecmp"]["efficiency"] + 0.25


def test_the_switches_data_plane_decided_and_counted_it(runs):
    assert runs["controller-dlb"]["adaptive"] is None     # the controller placed those
    for mode in ("dlb", "packet"):
        a = runs[mode]["adaptive"]
        assert a["mode"] == mode and a["frames"] > 100
        leaves = [s for name, s in a["switches"].items() if name.startswith("leaf")]
        assert len(leaves) == 2 and all(len(s["ports"]) == 2 for s in leaves)
        # both uplinks of each leaf carried the collective
        assert all(v["frames"] > 10 for s in leaves for v in s["ports"].values())
    assert runs["dlb"]["adaptive"]["flowlets"] > 0
    assert runs["packet"]["adaptive"]["flowlets"] == 0     # no flowlet state per packet
    assert runs["packet"]["wrong"] == 0


def test_spray_reorders_without_loss(runs):
    r = runs["spray"]
    assert r["reordered"] > 0 and r["wrong"] == 0
    assert r["max_over_mean"] < 1.3
    assert runs["ecmp"]["reordered"] == 0


def test_dlb_entries_are_gone_with_the_fabric(runs):
    # the sessions removed their bridges: no placed-flow entry survives anywhere
    out = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True,
                         text=True, timeout=10, check=True).stdout.split()
    tags = {r["dir"].rsplit("-", 1)[-1] for r in runs.values()}
    assert not [b for b in out if any(t in b for t in tags)]
