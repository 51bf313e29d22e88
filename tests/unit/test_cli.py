"""The command line: exit status 2 and one clear line for bad input."""

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.__main__ import main
from emulator.errors import ConfigError
from emulator.fabric import spec
from tests.conftest import REPO


def test_validate_ok(tmp_path, capsys):
    path = tmp_path / "f.yaml"
    path.write_text(spec.dump(__import__("emulator.fabric.presets").fabric.presets.build("leaf-spine")))
    assert main(["validate", str(path)]) == 0
    assert "ok: 8 hosts, 8 switches, 24 links" in capsys.readouterr().out


def test_validate_bad_file_exits_2_with_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("topology:\n  nodes: {h1: {kind: host}, l1: {kind: leaf}}\n"
                    "  links: [{endpoints: ['h1:eth0', 'leaf9:eth1'], rate: 1Gbps}]\n")
    p = subprocess.run([sys.executable, "-m", "emulator", "validate", str(path)],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip() == (f"error: {path}: topology.links[0].endpoints[1]: "
                                "unknown node 'leaf9'")
    assert p.stdout == ""


def test_run_with_bad_file_exits_2_before_anything(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ntopology: {nodes: {h1: {kind: host}}, links: 3}\n")
    assert main(["run", "-f", str(path), "--results", str(tmp_path / "res")]) == 2
    assert "topology.links: missing or empty" in capsys.readouterr().err
    assert not (tmp_path / "res").exists()


def test_bad_preset_param_exits_2(capsys):
    assert main(["show", "-P", "spines=lots"]) == 2
    assert "preset leaf-spine: spines: 'lots' is not a valid int" in capsys.readouterr().err


def test_show_prints_addressing_and_json(capsys):
    assert main(["show", "-P", "leaves=2"]) == 0
    out = capsys.readouterr().out
    assert "10.0.0.4" in out and "leaf2:eth2" in out and "0000000000020004" in out
    assert main(["show", "--json", "-P", "leaves=2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["hosts"]) == 4 and doc["schema_version"] == 1


def test_show_yaml_round_trips(capsys):
    assert main(["show", "--yaml", "-P", "spines=2"]) == 0
    fabric = spec.load_text(capsys.readouterr().out)
    assert len(fabric.switches) == 6


def test_bad_controller_argument_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--controller", "remote:nohost"])
    assert info.value.code == 2


# Whatever the input, parsing raises ConfigError or succeeds: nothing else escapes.
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(
                        ["host", "leaf", "spine", "h1:eth0", "leaf1:eth1", "40Mbps", "eth1"]))
trees = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4),
    st.dictionaries(st.one_of(st.text(max_size=8), st.sampled_from(
        ["name", "topology", "nodes", "links", "kind", "endpoints", "rate", "defaults",
         "h1", "leaf1"])), kids, max_size=4)), max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(trees)
def test_fuzz_parse_only_raises_config_error(data):
    try:
        spec.parse(data)
    except ConfigError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_yaml_text_only_raises_config_error(text):
    try:
        spec.load_text(text)
    except ConfigError:
        pass


def test_the_fabric_options_mean_the_same_on_every_command_that_builds_a_fabric():
    from emulator.__main__ import build_parser
    ap = build_parser()
    common = ["--failover", "controller", "--hash-seed", "7", "--mtu", "2048",
              "--queue-ms", "10", "--capture", "h1,leaf1:eth3"]
    for cmd, extra in (("run", ["--lb", "dlb"]), ("drill", ["--lb", "dlb"]), ("compare", [])):
        a = ap.parse_args([cmd, *common, *extra])
        assert (a.failover, a.hash_seed, a.mtu, a.queue_ms, a.capture) == \
            ("controller", 7, 2048, 10.0, "h1,leaf1:eth3"), cmd
        if extra:
            assert a.lb == "dlb"
    # compare --modes stays a list of --lb values
    assert ap.parse_args(["compare", "--modes", "ecmp,spray"]).modes == "ecmp,spray"


def test_run_help_groups_its_options_by_topic(capsys):
    from emulator.__main__ import build_parser
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = capsys.readouterr().out
    heads = [h for h in ("fabric:", "control plane:", "traffic:", "fidelity:",
                         "observe and interact:") if h in text]
    assert len(heads) == 5 and text.index("fabric:") < text.index("traffic:")


def test_probe_refuses_to_isolate_without_a_mode_that_routes_around(tmp_path, capsys):
    assert main(["probe", "--failover", "none", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--failover" in err and "--no-isolate" in err
    assert list(tmp_path.iterdir()) == []            # nothing built, no results dir


def test_cc_params_and_ecn_at_are_checked_before_anything_is_built(tmp_path, capsys):
    assert main(["run", "--cc", "dcqcn", "--cc-param", "g=3",
                 "--results", str(tmp_path)]) == 2
    assert "--cc-param" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["compare", "--cc", "dcqcn", "--ecn-at", "sideways"])
