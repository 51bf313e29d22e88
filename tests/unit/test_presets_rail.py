"""The rail presets: rail-only (its former name multi-plane) and rail-optimized."""

import subprocess
import sys

import pytest

from emulator.errors import ConfigError
from emulator.fabric import addressing, presets
from tests.conftest import REPO


def kinds(f):
    out = {}
    for n in f.nodes:
        out[n.kind] = out.get(n.kind, 0) + 1
    return out


def test_rail_only_and_its_former_name_build_the_same_fabric():
    a, b = presets.build("rail-only"), presets.build("multi-plane")
    assert a.name == "rail-only-2p2s2l2h" and b.name == "multi-plane-2p2s2l2h"
    assert a.nodes == b.nodes and a.links == b.links and a.params == b.params


def test_rail_only_hb_rate_defaults_to_eight_nics_and_is_kept():
    f = presets.build("rail-only", {"host_rate": "10Mbps"})
    assert dict(f.params)["hb_rate"] == 80e6
    f = presets.build("rail-only", {"hb_rate": "25Mbps"})
    assert dict(f.params)["hb_rate"] == 25e6


@pytest.mark.parametrize("value,msg", [
    ("fast", "hb_rate: 'fast' is not a valid rate"),
    ("0Mbps", "hb_rate"),
    ("1.5Gbps", r"hb_rate: planes x hb_rate = 3000 Mbit/s is above"),
])
def test_rail_only_refuses_a_bad_hb_rate_naming_it(value, msg):
    with pytest.raises(ConfigError, match=msg):
        presets.build("rail-only", {"hb_rate": value})


def test_a_bad_hb_rate_exits_2_with_one_line_naming_it():
    p = subprocess.run([sys.executable, "-m", "emulator", "show", "-p", "rail-only",
                        "-P", "hb_rate=3Gbps"], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2
    assert "hb_rate" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert p.stdout == ""


def test_rail_optimized_joins_every_rail_leaf_to_every_spine():
    f = presets.build("rail-optimized", {"planes": "3", "spines": "2",
                                         "leaves_per_plane": "2", "hosts_per_leaf": "2"})
    assert kinds(f) == {"host": 4, "leaf": 6, "spine": 2}
    assert len(f.links) == 4 * 3 + 6 * 2
    # host h3 (group 2): NIC i on rail i+1's leaf of group 2
    assert [(lk.end("h3").port, lk.other("h3").node) for lk in f.links_of("h3")] == [
        ("eth0", "leaf2"), ("eth1", "leaf4"), ("eth2", "leaf6")]
    # spine1 faces leaf k on its port eth<k>: any rail reaches any rail through it
    assert sorted((lk.end("spine1").port, lk.other("spine1").node)
                  for lk in f.links_of("spine1")) == [(f"eth{k}", f"leaf{k}")
                                                      for k in range(1, 7)]
    assert [f.node(n).plane for n in ("leaf2", "leaf4", "leaf6", "spine1")] == [1, 2, 3, None]
    plan = addressing.plan(f)
    assert all(h["routes"] == [] for h in plan["hosts"])   # one island: no HB hop needed
    assert len(set(addressing.islands(f).values())) == 1


def test_rail_fabrics_have_the_same_leaf_capacity():
    only = presets.build("rail-only", {"oversubscription": "2"})
    opt = presets.build("rail-optimized", {"oversubscription": "2"})
    assert dict(only.params)["uplink_rate"] == dict(opt.params)["uplink_rate"] == 20e6
    up = [lk for lk in only.links if lk.b.node.startswith("spine")]
    up_opt = [lk for lk in opt.links if lk.b.node.startswith("spine")]
    assert len(up) == len(up_opt) == 8
    assert len({lk.b.node for lk in up}) == 4 and len({lk.b.node for lk in up_opt}) == 2


@pytest.mark.parametrize("argv,msg", [
    (["-p", "leaf-spine"], "--fabrics builds its own presets"),
    (["-P", "hb_rate=0Mbps"], "hb_rate"),
    (["--fabrics", "rail-only,fat-tree"], "'fat-tree' is not a rail fabric"),
])
def test_compare_fabrics_refuses_bad_input_before_building(argv, msg, monkeypatch, capsys):
    from emulator.__main__ import main
    from emulator.dataplane import session

    def no_build(*a, **k):
        raise AssertionError("nothing may be built")
    monkeypatch.setattr(session, "Session", no_build)
    monkeypatch.setattr(session, "require_root", lambda: None)
    monkeypatch.setattr(session, "check_dependencies", lambda controls=None: None)
    args = ["compare", "--fabrics", "rail-optimized,rail-only", "--results", "/nonexistent"]
    assert main(args + argv) == 2
    assert msg in capsys.readouterr().err
