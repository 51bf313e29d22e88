"""The public surface, pinned: what users' scripts and apps rely on.

The command line's commands and flags (``python -m emulator`` and
``python -m traffic``), the fabric file's keys, the controller argument's
forms, and the top-level keys of ``results.json``, ``drill.json`` and
``compare.json`` (``tests/unit/contract.json``; the integration tests check
real documents against it with ``assert_contract``).  Changing any of them
is a deliberate act: update contract.json in the same change and say so.
"""

import argparse

import pytest

import traffic.__main__ as traffic_main
from emulator.__main__ import build_parser, parse_controller
from emulator.fabric import spec
from tests.conftest import CONTRACT


def surface(parser):
    """{command: sorted option strings (and positional names)} of ``parser``."""
    out = {}
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sp in subs[0].choices.items():
        flags = []
        for a in sp._actions:
            flags += list(a.option_strings) or [a.dest]
        out[name] = sorted(flags)
    return out


def traffic_parser():
    captured = {}
    real = argparse.ArgumentParser.parse_args

    def grab(self, args=None, namespace=None):
        captured["p"] = self
        raise SystemExit(0)
    argparse.ArgumentParser.parse_args = grab
    try:
        with pytest.raises(SystemExit):
            traffic_main.parse_args(["--help"])
    finally:
        argparse.ArgumentParser.parse_args = real
    return captured["p"]


def test_the_emulator_command_line_is_the_pinned_one():
    assert surface(build_parser()) == CONTRACT["emulator_cli"]


def test_the_traffic_command_line_is_the_pinned_one():
    assert surface(traffic_parser()) == CONTRACT["traffic_cli"]


def test_the_fabric_file_keys_are_the_pinned_ones():
    got = {"top": sorted(spec.TOP_KEYS), "topology": sorted(spec.TOPOLOGY_KEYS),
           "defaults": sorted(spec.DEFAULTS_KEYS), "node": sorted(spec.NODE_KEYS),
           "link": sorted(spec.LINK_KEYS)}
    assert got == CONTRACT["fabric_file"]


@pytest.mark.parametrize("text", ["builtin", "app:examples/ryu_static_routes.py",
                                  "remote:127.0.0.1:6653"])
def test_the_controller_argument_keeps_its_forms(text):
    assert parse_controller(text) == text


def test_a_controller_argument_of_no_known_form_is_refused():
    with pytest.raises(argparse.ArgumentTypeError):
        parse_controller("ryu:app.py")


def test_the_session_keyword_form_users_tests_write_builds_a_run_spec(tmp_path):
    """docs/controller-apps.md: ``Session(fabric, controller="app:...", results_base=...)``
    in a user's own tests; it builds the RunSpec Session takes."""
    from emulator.dataplane.session import Session
    from emulator.fabric import presets
    from emulator.fabric.runspec import RunSpec
    fabric = presets.build("leaf-spine", {"leaves": "2"})
    s = Session(fabric, controller="app:examples/ryu_static_routes.py",
                results_base=str(tmp_path), failover="controller", lb="ecmp", seed=7,
                queue_ms=10, mtu=1024)
    assert isinstance(s.spec, RunSpec) and s.spec.fabric == fabric
    assert (s.spec.controller, s.spec.results, s.spec.failover, s.spec.hash_seed,
            s.spec.queue_ms, s.spec.mtu) == ("app:examples/ryu_static_routes.py",
                                             str(tmp_path), "controller", 7, 10, 1024)
    assert Session(s.spec).spec == s.spec
    with pytest.raises(TypeError):
        Session(s.spec, lb="dlb")            # a spec is whole: no settings beside it
