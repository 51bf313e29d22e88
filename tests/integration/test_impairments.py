"""Impairments in the fabric file (root): ``loss:`` drops about that share on the
link and the verdict charges it to the link; ``state: down`` is routed around
before the traffic starts; ``delay:`` without netem is one clear error, exit 2,
with nothing built."""

import yaml

from emulator.fabric import presets
from tests.conftest import emulator, run_unless_stolen, verdict_of


def fabric_file(tmp_path, spines, **impair):
    doc = presets.build("leaf-spine", {"spines": str(spines), "leaves": "2",
                                       "hosts_per_leaf": "1"}).to_spec()
    for lk in doc["topology"]["links"]:
        nodes = sorted(ep.split(":")[0] for ep in lk["endpoints"])
        if nodes == ["leaf1", "spine1"]:
            lk.update(impair)
    path = tmp_path / "fabric.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_lossy_link_drops_about_its_share_and_the_drops_are_the_links(tmp_path):
    # one spine: every cross-leaf frame crosses leaf1-spine1 once, in one direction
    path = fabric_file(tmp_path, 1, loss="20%")
    p, r, _ = run_unless_stolen(tmp_path, "-f", str(path), "--duration", "3")
    assert "impairments from the fabric file" in p.stdout and "loss 20 %" in p.stdout
    t = r["traffic"]
    share = t["dropped_packets"] / t["sent_packets"]
    assert 0.15 < share < 0.25, share
    fid = t["fidelity"]
    assert fid["verdict"] == "faithful", verdict_of(fid)
    assert fid["emulation_drops"]["total"] == 0
    # charged to the impaired link (no queue counted them: nftables dropped them)
    (where, n), = fid["network_drops"]["by_link"].items()
    assert "leaf1->spine1" in where and n == t["dropped_packets"], fid


def test_a_link_set_down_is_routed_around_before_the_traffic(tmp_path):
    path = fabric_file(tmp_path, 2, state="down")
    p, r, _ = run_unless_stolen(tmp_path, "-f", str(path), "--duration", "2")
    assert r["impairments"] == ["leaf1:spine1: down"]
    t = r["traffic"]
    assert t["dropped_packets"] == 0 and t["fidelity"]["verdict"] == "faithful"
    leaf1 = next(u for u in t["uplinks"] if u["leaf"] == "leaf1")
    loads = {u["peer"]: u["mbps"] for u in leaf1["loads"]}
    assert loads["spine1"] == 0 and loads["spine2"] > 0, loads


def test_delay_without_netem_is_one_error_naming_the_module(tmp_path):
    path = fabric_file(tmp_path, 1, delay="5ms", jitter="1ms")
    out = tmp_path / "res"
    p = emulator("run", "-f", str(path), "--results", str(out))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "netem" in p.stderr and "sch_netem" in p.stderr and "leaf1" in p.stderr
    assert not out.exists() or not any(out.iterdir())
