"""A user's controller app on a real fabric, held to the check harness (root).

The example is a classic Ryu app (``from ryu...``, ``RyuApp``, OpenFlow 1.3)
run unchanged on os-ken through the launcher; the builtin controller is the
contrast for the link-cut check (fast-failover repairs, static routes do not).
"""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from emulator.dataplane.session import Session
from emulator.experiments import check
from emulator.experiments.measure import convergence
from emulator.fabric import presets
from tests.conftest import REPO, unless_stolen, verdict_of
from tests.integration import logcheck

EXAMPLE = os.path.join(REPO, "examples", "ryu_static_routes.py")
SMALL = {"spines": 2, "leaves": 2, "hosts_per_leaf": 2}


def session_for(controller, tmp_path_factory):
    offset = logcheck.ovs_log_offset()
    s = Session(presets.build("leaf-spine", SMALL), controller=controller,
                results_base=str(tmp_path_factory.mktemp("results")), reach_timeout=30)
    return s, offset


@pytest.fixture(scope="module")
def ryu_app(tmp_path_factory):
    s, offset = session_for(f"app:{EXAMPLE}", tmp_path_factory)
    with s:
        yield s
    assert logcheck.problems(s, offset) == []
    assert s.results["controller"]["exit_status"] == 0


@pytest.fixture(scope="module")
def builtin(tmp_path_factory):
    s, offset = session_for("builtin", tmp_path_factory)
    with s:
        yield s
    assert logcheck.problems(s, offset) == []


def test_ryu_app_makes_the_fabric_reachable(ryu_app):
    assert ryu_app.results["controller"]["kind"] == "app"
    r = check.reachability(ryu_app)
    assert r.ok, r.detail
    assert r.data == {"pairs": 12, "unreachable": []}
    with open(os.path.join(ryu_app.dir, "controller.log")) as f:
        log = f.read()
    assert "StaticRoutes: static routes for 4 switches, 4 hosts" in log


def test_ryu_app_speaks_openflow13_and_installed_its_flows(ryu_app):
    leaf1 = next(sw for sw in ryu_app.topo["switches"] if sw["name"] == "leaf1")
    flows = ryu_app.net.ovs("leaf1").ofctl("dump-flows", leaf1["bridge"], version="OpenFlow13")
    assert "priority=200,arp,arp_op=1 actions=CONTROLLER:65535" in flows
    assert flows.count("priority=100,ip,nw_dst=") == 4


def test_path_check_shows_the_static_routes(ryu_app):
    # The app routes host index i over the (i mod 2)-th spine: h3 via spine1, h4 via spine2.
    r3 = check.flow_path(ryu_app, "h1", "h3", 49152)
    r4 = check.flow_path(ryu_app, "h1", "h4", 49152)
    assert r3.ok and r4.ok, (r3.detail, r4.detail)
    assert r3.data["path"] == ["h1", "leaf1", "spine1", "leaf2", "h3"]
    assert r4.data["path"] == ["h1", "leaf1", "spine2", "leaf2", "h4"]
    assert r3.data["received"] == 200


def cut_unless_stolen(s, settle, **kw):
    """``check.cut_loss`` of leaf1-spine1 (again, once ``settle(since)`` returned for
    the time the attempt before began, if ``unless_stolen`` says so)."""
    began = []

    def measure(attempt):
        if attempt:
            settle(began[-1])
        began.append(time.monotonic_ns())
        r = check.cut_loss(s, "leaf1-spine1", **kw)
        assert r.data["crossing"] > 0, r.detail
        return r
    return unless_stolen(measure, lambda r: r.data["fidelity"])


def test_cut_under_static_routes_fails_the_loss_check(ryu_app):
    r = cut_unless_stolen(ryu_app, lambda _: convergence.wait_for(
        lambda: check.reachability(ryu_app).ok, 30, "the fabric to be reachable again"),
        before=1.0, after=2.0)
    assert not r.ok, r.detail
    assert r.data["crossing"] > 0
    # Static routes never repair: the crossing flows lose the rest of the probe.
    assert r.data["worst_loss_ms"] > 1500
    # ... and that loss is the cut link's (the network's), not the emulator's
    fid = r.data["fidelity"]
    assert fid["verdict"] == "faithful", verdict_of(fid)
    assert fid["emulation_drops"]["total"] == 0
    # The check restores the link: the fabric is whole again.
    assert check.reachability(ryu_app).ok


def test_cut_under_the_builtin_controller_passes(builtin):
    r = cut_unless_stolen(builtin, lambda since: convergence.wait_restored(
        builtin, builtin.failover, since, timeout=30), before=1.0, after=1.5, max_loss_ms=200)
    assert r.ok, r.detail
    assert r.data["crossing"] > 0 and r.data["worst_loss_ms"] <= 200
    assert r.data["fidelity"]["verdict"] == "faithful", r.data["fidelity"]
    p = check.flow_path(builtin, "h1", "h3", 49153)
    assert p.ok and p.data["path"][0] == "h1" and p.data["path"][-1] == "h3"
    assert p.data["path"][2] in ("spine1", "spine2")


def test_check_cli_fails_a_crashing_app(tmp_path):
    app = tmp_path / "crashing.py"
    app.write_text(textwrap.dedent("""\
        from ryu.base import app_manager
        from ryu.controller import ofp_event
        from ryu.controller.handler import CONFIG_DISPATCHER, set_ev_cls
        from ryu.ofproto import ofproto_v1_3

        class Crashing(app_manager.RyuApp):
            OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

            @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
            def features(self, ev):
                raise RuntimeError("boom")
    """))
    p = subprocess.run([sys.executable, "-m", "emulator", "check", "-P", "spines=1",
                        "-P", "leaves=2", "-P", "hosts_per_leaf=1", "--controller",
                        f"app:{app}", "--reach-timeout", "3", "--results", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAIL reachability: the fabric never became reachable" in p.stdout
    assert "FAIL controller log" in p.stdout
    assert "0/2 checks passed" in p.stdout


def test_check_cli_passes_the_example(tmp_path):
    p = subprocess.run([sys.executable, "-m", "emulator", "check", "-P", "spines=2",
                        "-P", "leaves=2", "-P", "hosts_per_leaf=1", "--controller",
                        f"app:{EXAMPLE}", "--reachability", "--path", "h1:h2:50000",
                        "--results", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [line for line in p.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert lines[0] == "PASS reachability: 2/2 host pairs answer"
    assert lines[1].startswith("PASS path h1->h2 udp 50000->4791: h1 -> leaf1:eth")
    assert len(lines) == 2
