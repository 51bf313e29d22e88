"""The fabric in a browser (root): a drill with ``--ui`` watched by a headless
Chromium (Debian's ``chromium`` + ``chromium-driver``, ``browser.py``).

One short drill (default fabric, the default cut of leaf1-spine1, one repeat)
serves every assertion of the live page: one node per switch and host and one
link element per link, named as the project names them; the cut link marked
down within 2 s of the cut (``t_cut_ns``, the same CLOCK_MONOTONIC) and up
again after the restore (a screenshot goes into the run's results directory);
a request without the token gets 403, anything but GET 405; the process
listens on 127.0.0.1 only, and on nothing once it ends.  Then report.html of
that run opens from disk with every panel drawn, and ``emulator ui DIR``
serves it.
"""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.conftest import REPO
from tests.integration.browser import Browser

# no pass of its own under FABRIC_LAB_LAYOUT: its subject is the page, not the datapath
LAYOUT_INDEPENDENT = True

CUT = "leaf1-spine1"


class Command:
    """``python -m emulator ARGS`` with its output collected; ``url`` once printed."""

    def __init__(self, args):
        self.proc = subprocess.Popen([sys.executable, "-m", "emulator", *args], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines, self.url = [], None
        self.has_url = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            m = re.match(r"ui: (http://\S+)", line)
            if m and self.url is None:
                self.url = m.group(1)
                self.has_url.set()

    def wait(self, timeout):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()                   # a failed test leaves nothing running
            self.proc.wait(timeout=10)
            raise
        self.reader.join(timeout=10)
        return rc

    def output(self):
        return "".join(self.lines)

    def stop(self):
        """Interrupt it if it still runs (a failed test), then make sure it is gone."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.wait(120)
            except subprocess.TimeoutExpired:
                pass


def status_of(url, method="GET"):
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def listening(pid):
    """Local (address, port) of every listening TCP socket process ``pid`` holds."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:           # LISTEN
                    addr, port = cols[1].split(":")
                    out.append((addr, int(port, 16)))
    return out


@pytest.fixture(scope="module")
def watched_drill(tmp_path_factory):
    """The drill, watched: what the browser saw, and when (CLOCK_MONOTONIC ns)."""
    results = str(tmp_path_factory.mktemp("ui"))
    browser = Browser()
    seen = {}
    cmd = None
    try:
        cmd = Command(["drill", "--ui", "--repeat", "1", "--results", results])
        assert cmd.has_url.wait(120), cmd.output()
        url = cmd.url
        assert url.startswith("http://127.0.0.1:"), url
        browser.get(url)
        seen["nodes"] = browser.wait(
            "const n = document.querySelectorAll('[data-node]'); return n.length && "
            "[...n].map(e => e.dataset.node)", 60)
        seen["links"] = browser.js("return [...document.querySelectorAll('[data-link]')]"
                                   ".map(e => [e.dataset.link, e.dataset.state])")
        base = url.split("?")[0]
        seen["status"] = {"none": status_of(base), "wrong": status_of(base + "?token=x"),
                          "events": status_of(base + "events"),
                          "post": status_of(url, "POST")}
        seen["listening"] = listening(cmd.proc.pid)
        state = f"return document.querySelector('[data-link=\"{CUT}\"]').dataset.state"
        if browser.wait(state + " === 'down'", 120, every=0.02):
            seen["down_ns"] = time.monotonic_ns()
            seen["shot"] = browser.screenshot(os.path.join(results, "cut.png"))
            if browser.wait(state + " === 'up'", 30, every=0.02):
                seen["up_ns"] = time.monotonic_ns()
        seen["rc"] = cmd.wait(300)
        seen["output"] = cmd.output()
        seen["port"] = int(base.rsplit(":", 1)[1].strip("/"))
    finally:
        browser.close()
        if cmd is not None:
            cmd.stop()
    seen["drill"] = glob.glob(os.path.join(results, "drill-*"))[0]
    seen["dir"] = glob.glob(os.path.join(seen["drill"], "*-*", "topology.json"))[0] \
        .rsplit("/", 1)[0]
    return seen


def test_the_page_draws_every_node_and_link_by_name(watched_drill):
    with open(os.path.join(watched_drill["dir"], "topology.json")) as f:
        topo = json.load(f)
    assert watched_drill["rc"] == 0, watched_drill["output"][-3000:]
    want = {h["name"] for h in topo["hosts"]} | {s["name"] for s in topo["switches"]}
    assert sorted(watched_drill["nodes"]) == sorted(want)
    names = [n for n, _ in watched_drill["links"]]
    assert len(names) == len(topo["links"]) == len(set(names))
    assert CUT in names and "h1-leaf1" in names
    assert {s for _, s in watched_drill["links"]} == {"up"}


def test_the_cut_link_goes_down_within_2s_and_up_after_the_restore(watched_drill):
    with open(os.path.join(watched_drill["drill"], "drill.json")) as f:
        events = json.load(f)["modes"][0]["repeats"][0]["events"]
    cut = next(e for e in events if e["kind"] == "link_down")
    restore = next(e for e in events if e["kind"] == "link_up")
    assert "down_ns" in watched_drill, "the page never showed the cut"
    assert 0 <= watched_drill["down_ns"] - cut["t_cut_ns"] < 2e9
    assert watched_drill["down_ns"] < restore["t_ns"]
    assert watched_drill.get("up_ns", 0) > restore["t_ns"], "never shown up again"
    print(f"the page showed {CUT} down {(watched_drill['down_ns'] - cut['t_cut_ns']) / 1e6:.0f}"
          f" ms after the cut, up {(watched_drill['up_ns'] - restore['t_ns']) / 1e6:.0f} ms "
          "after the restore")
    # the screenshot is kept with the run
    os.replace(watched_drill["shot"], os.path.join(watched_drill["dir"], "cut.png"))
    with open(os.path.join(watched_drill["dir"], "cut.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_without_the_token_403_read_only_and_127_0_0_1_only(watched_drill):
    assert watched_drill["status"] == {"none": 403, "wrong": 403, "events": 403, "post": 405}
    # every listening socket of the emulator's process is on 127.0.0.1 (0100007F)
    assert watched_drill["listening"], "the page's server was not found"
    assert {a for a, _ in watched_drill["listening"]} == {"0100007F"}
    assert watched_drill["port"] in {p for _, p in watched_drill["listening"]}
    assert status_of_closed(watched_drill["port"])


def status_of_closed(port):
    import socket
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_report_html_opens_from_disk_with_every_panel_drawn(watched_drill):
    page = os.path.join(watched_drill["dir"], "report.html")
    browser = Browser()
    try:
        browser.get("file://" + page)
        drawn = browser.wait("const p = [...document.querySelectorAll('svg[data-panel]')];"
                             "return p.length && p.every(s => s.dataset.drawn === '1') && "
                             "Object.fromEntries(p.map(s => [s.id, +(s.dataset.series || 0)]))",
                             20)
        assert drawn and set(drawn) == {"fabric", "throughput", "queues", "drops"}, drawn
        assert drawn["throughput"] > 0 and drawn["queues"] > 0 and drawn["drops"] > 0
        kinds = browser.js("return [...document.querySelectorAll('#throughput [data-event]')]"
                           ".map(e => e.dataset.event)")
        assert "link_down" in kinds and "link_up" in kinds
        assert browser.js("return document.querySelectorAll('[data-node]').length") == 16
        # scrubbed to a sample taken while the link was cut, the picture shows it
        during = browser.js(f"const i = DOC.samples.findIndex(s => s.down.includes('{CUT}'));"
                            "if (i < 0) return null; const r = document.getElementById("
                            "'scrubber'); r.value = i; r.dispatchEvent(new Event('input'));"
                            f"return document.querySelector('[data-link=\"{CUT}\"]')"
                            ".dataset.state")
        assert during == "down"
    finally:
        browser.close()


def test_emulator_ui_serves_a_finished_run(watched_drill):
    cmd = Command(["ui", watched_drill["dir"]])
    try:
        assert cmd.has_url.wait(60), cmd.output()
        assert status_of(cmd.url.split("?")[0]) == 403
        with urllib.request.urlopen(cmd.url.replace("/?", "/state?"), timeout=10) as r:
            doc = json.loads(r.read())
        assert len(doc["model"]["links"]) == 24 and doc["samples"]
    finally:
        cmd.proc.send_signal(signal.SIGINT)
    assert cmd.wait(30) == 0, cmd.output()
