"""Hash polarization is visible: one ECMP seed on every tier idles half the
spine->super-spine uplinks of a three-tier fabric; per-switch seeds use them all."""

import pytest

from emulator.dataplane.session import Session
from emulator.experiments.workloads.mix import default_mix
from emulator.fabric import presets
from tests.conftest import unless_stolen, verdict_of

FABRIC = {"pods": "2", "spines_per_pod": "2", "leaves_per_pod": "2", "hosts_per_leaf": "1",
          "superspines": "2", "superspine_attach": "all"}


def spine_uplinks(seed, tmp_path):
    with Session(presets.build("three-tier", FABRIC), results_base=str(tmp_path),
                 seed=seed) as s:
        res = unless_stolen(lambda _: default_mix(s, duration=1.5, qps=16, load=0.25),
                            lambda r: r["fidelity"])
    assert res["dropped_packets"] == 0, verdict_of(res["fidelity"])
    return [u["tx_bytes"] for sp in res["spine_uplinks"] for u in sp["loads"]]


@pytest.mark.parametrize("seed", [7, 12345])
def test_same_seed_everywhere_polarizes(seed, tmp_path):
    loads = spine_uplinks(seed, tmp_path)
    carrying = [b for b in loads if b > 20_000]
    # the spines' choice repeats the leaves': each spine uses one of its two uplinks
    assert len(loads) == 8 and len(carrying) == 4, loads


def test_per_switch_seeds_use_every_spine_uplink(tmp_path):
    loads = spine_uplinks(None, tmp_path)
    assert len(loads) == 8 and min(loads) > 20_000, loads
