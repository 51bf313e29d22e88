"""Ryu apps on os-ken: the import alias, the preflight, the example app's routes (no root)."""

import importlib
import os
import subprocess
import sys
import textwrap

from controller import ryu_compat
from emulator.fabric import addressing, presets
from tests.conftest import REPO

EXAMPLE = os.path.join(REPO, "examples", "ryu_static_routes.py")


def test_ryu_modules_are_the_os_ken_modules():
    ryu_compat.install()
    ryu_compat.install()                        # idempotent
    assert sum(isinstance(f, ryu_compat.RyuAliasFinder) for f in sys.meta_path) == 1
    import os_ken.controller.ofp_event
    import os_ken.ofproto.ofproto_v1_3_parser
    from ryu.base import app_manager
    from ryu.controller import ofp_event
    from ryu.ofproto import ofproto_v1_3_parser
    assert ofp_event is os_ken.controller.ofp_event       # same events os-ken dispatches
    assert ofproto_v1_3_parser is os_ken.ofproto.ofproto_v1_3_parser
    assert app_manager.RyuApp is app_manager.OSKenApp
    # The shared module keeps os-ken's own spec (reload, relative imports rely on it).
    assert ofp_event.__spec__.name == "os_ken.controller.ofp_event"
    import ryu.exception
    assert ryu.exception.RyuException is ryu.exception.OSKenException


def test_a_missing_ryu_module_is_a_plain_import_error():
    ryu_compat.install()
    try:
        importlib.import_module("ryu.no_such_module")
    except ModuleNotFoundError as e:
        assert "ryu.no_such_module" in str(e)
    else:
        raise AssertionError("ryu.no_such_module imported")


def test_preflight_names_dropped_and_missing_imports(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent("""\
        from ryu.base import app_manager
        from ryu.app.wsgi import ControllerBase
        from ryu.app import simple_switch_13
        import ryu.nothing_here
        import json
    """))
    problems = ryu_compat.preflight(str(app))
    assert len(problems) == 3, problems
    assert problems[0].startswith(f"{app}:2: imports ryu.app.wsgi: os-ken dropped the WSGI")
    assert ":3: imports ryu.app.simple_switch_13: os-ken dropped the sample apps" in problems[1]
    assert problems[2].endswith(":4: imports ryu.nothing_here: os-ken has no module "
                                "os_ken.nothing_here")
    assert ryu_compat.preflight(EXAMPLE) == []


def test_launcher_refuses_a_dropped_import_with_one_message(tmp_path):
    topo = tmp_path / "topology.json"
    import json
    topo.write_text(json.dumps(addressing.plan(presets.build("leaf-spine", {"spines": 1,
                                                                             "leaves": 2}))))
    app = tmp_path / "rest.py"
    app.write_text("from ryu.app.wsgi import WSGIApplication\n")
    p = subprocess.run([sys.executable, "-m", "controller", "--topology", str(topo),
                        "--listen", "127.0.0.1:1", "--app", str(app)],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    errors = [line for line in p.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "ryu.app.wsgi" in errors[0] and "WSGI" in errors[0]
    p = subprocess.run([sys.executable, "-m", "controller", "--topology", str(topo),
                        "--app", str(tmp_path / "absent.py")],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "absent.py: no such file" in p.stderr


def test_example_routes_are_shortest_paths(monkeypatch):
    spec = importlib.util.spec_from_file_location("ryu_static_routes_example", EXAMPLE)
    ryu_compat.install()
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    topo = addressing.plan(presets.build("leaf-spine", {"spines": 2, "leaves": 3}))
    hops = mod.next_hops(topo)
    ports = {sw["name"]: {p["port"]: p["peer"] for p in sw["ports"]} for sw in topo["switches"]}
    # leaf -> other leaf: every spine uplink is a shortest next hop
    assert sorted(ports["leaf1"][p] for p in hops["leaf1"]["leaf2"]) == ["spine1", "spine2"]
    # spine -> leaf: the one direct port
    assert [ports["spine2"][p] for p in hops["spine2"]["leaf3"]] == ["leaf3"]
    # leaf -> spine: direct, not via another leaf
    assert [ports["leaf1"][p] for p in hops["leaf1"]["spine2"]] == ["spine2"]
