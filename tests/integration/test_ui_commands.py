"""``--ui`` on the commands that serve it (root): ``run`` and ``compare`` print
the page's address once their first fabric is up, the page answers with its
token, and Ctrl-C ends them with their fabric removed.  A drill's page is
driven by a browser in test_ui_browser.py; every command that refuses ``--ui``
is checked in tests/unit/test_ui.py."""

import signal
import subprocess
import sys
import time
import urllib.request

from tests.conftest import REPO

# no pass of its own under FABRIC_LAB_LAYOUT: its subject is the page, not the datapath
LAYOUT_INDEPENDENT = True

SMALL = ["-p", "leaf-spine", "-P", "spines=2", "-P", "leaves=2", "-P", "hosts_per_leaf=1"]


def served(argv, tmp_path):
    """Start ``argv`` with --ui, fetch its page, stop it with Ctrl-C: (page, exit status)."""
    proc = subprocess.Popen([sys.executable, "-m", "emulator", *argv, *SMALL, "--ui",
                             "--results", str(tmp_path)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines, url = [], None
    try:
        deadline = time.monotonic() + 180
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("ui: "):
                url = line.split()[1]
                break
            assert time.monotonic() < deadline, "".join(lines[-20:])
        assert url, "".join(lines[-20:])
        with urllib.request.urlopen(url, timeout=20) as r:
            assert r.status == 200
            page = r.read().decode()
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert "removed everything this run created" in "".join(lines) + rest, rest[-2000:]
    return page, proc.returncode


def test_run_serves_its_page(tmp_path):
    page, status = served(["run"], tmp_path)
    assert page.lstrip().lower().startswith("<!doctype html") and "leaf-spine" in page
    assert status == 130


def test_compare_serves_its_page(tmp_path):
    page, status = served(["compare", "--modes", "ecmp", "--reps", "1"], tmp_path)
    assert page.lstrip().lower().startswith("<!doctype html") and "lb=ecmp" in page
    assert status == 130
