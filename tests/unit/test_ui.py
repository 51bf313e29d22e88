"""The fabric page without a fabric: the drawing's names, the page document, the
recorder's arithmetic on fake counters, and the server's token and read-only rules."""

import json
import re
import socket
import types
import urllib.error
import urllib.request

import pytest

from emulator.dataplane.faults import fault_links
from emulator.errors import ConfigError
from emulator.experiments.spec import build
from emulator.experiments.ui import live
from emulator.experiments.ui.model import view_model
from emulator.experiments.ui.recorder import Recorder
from emulator.experiments.ui.server import UiServer
from emulator.fabric import addressing, presets
from emulator.fabric.runspec import RunSpec
from emulator.report import page


def plan(name, **params):
    return addressing.plan(presets.build(name, {k: str(v) for k, v in params.items()}))


def test_every_node_and_link_is_drawn_by_its_project_name():
    topo = plan("leaf-spine")
    m = view_model(topo)
    assert sorted(n["name"] for n in m["nodes"]) == sorted(
        [h["name"] for h in topo["hosts"]] + [s["name"] for s in topo["switches"]])
    assert [lk["name"] for lk in m["links"]] == [n for n, _ in fault_links(topo)]
    assert len(m["links"]) == len(topo["links"])
    h1 = next(lk for lk in m["links"] if lk["name"] == "h1-leaf1")
    assert (h1["a"], h1["b"], h1["ab"], h1["a_port"], h1["b_port"]) == \
        ("h1", "leaf1", "h1:eth0", "h1:eth0", "leaf1:eth1")
    up = next(lk for lk in m["links"] if lk["name"] == "leaf1-spine1")
    leaf1 = next(s for s in topo["switches"] if s["name"] == "leaf1")
    spine1 = next(s for s in topo["switches"] if s["name"] == "spine1")
    assert up["ab"] in {p["intf"] for p in leaf1["ports"]}
    assert up["ba"] in {p["intf"] for p in spine1["ports"]}
    assert up["watch"] == [["leaf1", up["ab"]], ["spine1", up["ba"]]]
    # tiers as rows: hosts at the bottom, spines above the leaves
    y = {n["name"]: n["y"] for n in m["nodes"]}
    assert y["h1"] < y["leaf1"] < y["spine1"]


def test_parallel_links_are_numbered_and_a_bonded_host_has_its_nic():
    names = [lk["name"] for lk in view_model(plan("dual-link", spines=1))["links"]]
    assert "leaf1-spine1" in names and "leaf1-spine1#2" in names
    topo = plan("dual-tor")
    m = view_model(topo)
    assert len(m["links"]) == len(topo["links"])
    assert {n["kind"] for n in m["nodes"]} >= {"nic", "host", "leaf", "spine"}
    inner = next(lk for lk in m["links"] if lk["name"] == "h1-h1.nic")
    assert (inner["a"], inner["b"], inner["ab"]) == ("h1", "h1.nic", "h1:bond0")


class FakeQueues:
    def __init__(self):
        self.values = {}

    def read(self):
        return dict(self.values)


def fake_recorder(tmp_path, clock):
    topo = plan("leaf-spine", spines=1, leaves=2, hosts_per_leaf=1)
    m = view_model(topo)
    sysfs = tmp_path / "sys"
    for lk in m["links"]:
        for _, intf in lk["watch"]:
            (sysfs / "class" / "net" / intf).mkdir(parents=True)
            (sysfs / "class" / "net" / intf / "operstate").write_text("up\n")
    session = types.SimpleNamespace(dir=str(tmp_path), pfc=None,
                                    net=types.SimpleNamespace(sysfs=lambda sw: str(sysfs)))
    rec = Recorder(session, m, clock=clock)
    rec._queues = FakeQueues()
    return rec, m, sysfs


def test_the_recorder_turns_counters_into_utilisation_state_and_drops(tmp_path, monkeypatch):
    now = [10_000_000_000]
    rec, m, sysfs = fake_recorder(tmp_path, lambda: now[0])
    monkeypatch.setattr("emulator.experiments.ui.recorder.softnet_drops", lambda: 7)
    up = next(lk for lk in m["links"] if lk["name"] == "leaf1-spine1")
    h2 = next(lk for lk in m["links"] if lk["name"] == "h2-leaf2")
    q = rec._queues.values
    q[up["ab"]], q[up["ba"]], q[h2["ba"]] = (0, 0, 0), (0, 0, 0), (0, 0, 0)
    assert rec.sample() is None                      # the baseline
    now[0] += 500_000_000                            # 0.5 s
    rate = up["rate_bps"]
    q[up["ab"]] = (3000, 2, rate // 64)              # a quarter of the rate over 0.5 s
    q[h2["ba"]] = (0, 0, 625_000)                    # 10 Mbit/s
    (sysfs / "class" / "net" / up["ba"] / "operstate").write_text("lowerlayerdown\n")
    s = rec.sample()
    assert s["t"] == 0.5
    assert s["util"]["leaf1-spine1"] == [0.25, 0]
    assert s["queue"]["leaf1-spine1"] == [3000, 0]
    assert s["down"] == ["leaf1-spine1"]
    assert s["link_drops"] == {"leaf1-spine1": [2, 0]}
    assert s["drops"] == {"queue": 2, "pfc": 0, "softnet": 0}
    assert s["rx_mbps"]["h2"] == 10.0


def test_fault_markers_come_from_whole_lines_of_the_fault_log(tmp_path):
    rec, _, _ = fake_recorder(tmp_path, lambda: 1_000_000_000)
    log = tmp_path / "faults.jsonl"
    assert rec._new_events() == []
    line = json.dumps({"t_ns": 3_000_000_000, "kind": "link_down", "target": "leaf1-spine1"})
    log.write_text(line + "\n" + line[:10])          # the second line is being written
    assert rec._new_events() == [{"t": 2.0, "t_ns": 3_000_000_000, "kind": "link_down",
                                  "target": "leaf1-spine1"}]
    assert rec._new_events() == []


def test_the_page_inlines_its_data_and_cannot_be_closed_by_it():
    doc = {"model": view_model(plan("leaf-spine")), "samples": [], "events": [],
           "title": "x</script><script>alert(1)</script>"}
    html = page.render(doc)
    assert html.count("</script>") == 2 and "</script><script>alert" not in html
    data = re.search(r'<script id="doc" type="application/json">(.*?)</script>', html, re.S)
    assert json.loads(data.group(1))["title"] == doc["title"]
    assert 'data-panel="fabric"' in html and "data-events" not in html
    assert "http" not in re.sub(r"http://www\.w3\.org/2000/svg", "", html)   # no fetches
    assert 'data-events="events?token=T"' in page.render(doc, "events?token=T")


def test_drill_timelines_become_binned_series_on_the_page_clock():
    t0 = 5_000_000_000
    tl = {"a": (t0, [125] * 20), "b": (t0 + 10_000_000, [250] * 10)}
    fs = live.flow_series(tl, t0 - 1_000_000_000, bin_ms=10)
    assert fs["t"] == [1.0, 1.01]
    assert fs["lines"] == {"a": [1.0, 1.0], "b": [0.0, 2.0]}


def get(url, method="GET"):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method),
                                    timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read(200)
    except urllib.error.HTTPError as e:
        return e.code, None, b""


def test_the_server_wants_its_token_answers_get_only_and_stops():
    server = UiServer(lambda doc, events: f"<p>{len(doc['samples'])} {events}</p>").start()
    try:
        assert server.url.startswith(f"http://127.0.0.1:{server.port}/?token=")
        base = f"http://127.0.0.1:{server.port}/"
        assert get(base)[0] == 403
        assert get(base + "?token=wrong")[0] == 403
        assert get(base + "state")[0] == 403 and get(base + "events")[0] == 403
        status, ctype, body = get(server.url)
        assert (status, ctype) == (200, "text/html; charset=utf-8")
        assert body == f"<p>0 events?token={server.token}</p>".encode()
        assert get(server.url, "POST")[0] == 405 and get(server.url, "DELETE")[0] == 405
        server.hub.add({"t": 0.25}, [{"t": 0.1, "kind": "link_down"}])
        state = json.loads(urllib.request.urlopen(
            server.url.replace("/?", "/state?"), timeout=10).read())
        assert state["samples"] == [{"t": 0.25}] and state["events"][0]["kind"] == "link_down"
        with urllib.request.urlopen(server.url.replace("/?", "/events?"), timeout=10) as r:
            assert r.headers["Content-Type"] == "text/event-stream"
            assert r.readline() == b"event: doc\n"
            server.hub.add({"t": 0.5}, [])
            r.readline(), r.readline()
            assert r.readline() == b"event: sample\n"
    finally:
        server.stop()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", server.port)) != 0


def test_bad_ui_options_are_one_clear_error():
    with pytest.raises(ConfigError, match="--ui-bind"):
        UiServer(lambda d, e: "", bind="192.0.2.1").start()     # not this machine's
    fabric = presets.build("leaf-spine", {})
    with pytest.raises(ConfigError, match="needs --ui"):
        build.check(RunSpec(fabric, ui=False, ui_bind="0.0.0.0"))
    assert live.LiveView.from_spec(RunSpec(fabric)) is None
    spec = RunSpec(fabric, ui=True)
    for command in ("drill workload", "drill chaos", "compare planes", "compare routing",
                    "compare fabrics", "compare cc", "compare lossless", "probe", "check"):
        with pytest.raises(ConfigError, match=f"not with {command}"):
            live.check_supported(command, spec)
    with pytest.raises(ConfigError, match="simai"):
        live.check_supported("compare", spec.replace(workload="simai:x.txt"))
    for command in ("run", "drill", "compare"):
        live.check_supported(command, spec)


# every command and sub-command that accepts --ui, from the command line
SPREAD = "examples/shared/llama-spread.yaml"
REFUSED = {"drill workload": ["drill", "workload", "--workload", "allreduce"],
           "drill chaos": ["drill", "chaos"],
           "compare routing": ["compare", "routing", "-p", "dragonfly"],
           "compare fabrics": ["compare", "fabrics"],
           "compare planes": ["compare", "planes"],
           "compare cc": ["compare", "cc"],
           "compare lossless": ["compare", "lossless"],
           "compare jobs": ["compare", "jobs", "--workload", "jobs:" + SPREAD],
           "drill jobs": ["drill", "jobs", "--workload", "jobs:" + SPREAD]}
FLAGS = {"drill workload": ["drill", "--workload", "allreduce"],     # the flag forms
         "drill chaos": ["drill", "--chaos"],
         "compare routing": ["compare", "-p", "dragonfly", "--routing", "minimal,valiant"],
         "compare fabrics": ["compare", "--fabrics", "rail-only"],
         "compare planes": ["compare", "--planes"],
         "compare cc": ["compare", "--cc", "none,dcqcn"],
         "compare lossless": ["compare", "--lossless", "on,off"],
         "compare jobs": ["compare", "--placements", "packed,spread",
                          "--workload", "jobs:" + SPREAD],
         "drill jobs": ["drill", "--workload", "jobs:" + SPREAD]}


def test_every_command_that_takes_ui_serves_it_or_refuses_it_in_one_line(tmp_path, capsys):
    from emulator.__main__ import build_parser, main
    from emulator.experiments import commands
    # the registry: each command's --ui is either served or listed here
    sub = build_parser()._subparsers._group_actions[0].choices
    takes = {c.name for c in commands.COMMANDS
             if "--ui" in sub[c.name.split()[0]]._option_string_actions}
    assert takes == set(live.SERVED) | set(REFUSED)
    assert not {"probe", "check"} & takes
    for name, argv in [*REFUSED.items(), *FLAGS.items()]:
        results = tmp_path / name.replace(" ", "-")
        assert main([*argv, "--ui", "--results", str(results)]) == 2, name
        out, err = capsys.readouterr()
        assert err.splitlines() == [f"error: --ui: not with {name}: the live page follows "
                                    "run, drill under probes and compare of load-balancing "
                                    "modes (report.html is written either way)"], (name, err)
        assert out == "" and not results.exists(), name       # nothing read, nothing made


def test_a_command_line_with_an_unserved_ui_exits_2_before_anything(tmp_path):
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "emulator", "compare", "-p", "dragonfly",
                        "--routing", "minimal,valiant,ugal", "--ui", "--results",
                        str(tmp_path / "r")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("error: --ui: not with compare routing")
    assert not (tmp_path / "r").exists()


def test_a_results_directory_without_a_page_gets_one_from_its_files(tmp_path):
    topo = addressing.plan(presets.build("leaf-spine", {}), "ab12")
    bare, drawn = tmp_path / "bare", tmp_path / "drawn"
    for d in (bare, drawn):
        d.mkdir()
        (d / "topology.json").write_text(json.dumps(topo))
    (bare / "faults.jsonl").write_text(json.dumps(
        {"t_ns": 5, "kind": "link_down", "target": "leaf1-spine1"}) + "\n")
    (drawn / "report.html").write_text("its own page")
    live.pages([str(bare), str(drawn), str(tmp_path / "gone")])
    html = (bare / "report.html").read_text()
    assert html.lstrip().lower().startswith("<!doctype html")
    doc = live.report_doc(str(bare))                      # what the page inlines
    assert len(doc["model"]["nodes"]) == len(topo["hosts"]) + len(topo["switches"])
    assert [e.get("target") for e in doc["events"]] == ["leaf1-spine1"]
    assert json.dumps(doc["events"][0], separators=(",", ":")) in html
    assert (drawn / "report.html").read_text() == "its own page"      # left as it was
    assert not (tmp_path / "gone").exists()
