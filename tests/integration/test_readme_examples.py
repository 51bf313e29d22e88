"""The README's commands run as printed (root), each shortened.

The commands are read from the README's "Five commands to try next" block,
continuation lines joined, ``&&`` chains and ``> FILE`` kept, and run one
after another from a scratch directory (the repository on PYTHONPATH, its
``examples`` and ``tests`` linked in).  Each gets the options of ``SHORTER`` appended
(argparse keeps the last value: fewer repeats, smaller sizes, a shorter
soak), and ``--results`` into the scratch directory; every one must exit 0.
A command the README gains without an entry in ``SHORTER`` fails the test.
The dragonfly's example runs on the smallest dragonfly (a=2, h=1, p=1: 3
groups, 6 hosts) with its three routing modes.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): the README's
# commands as printed run in the default layout, and their environment drops it
LAYOUT_INDEPENDENT = True

REPO = Path(__file__).resolve().parents[2]
SECTION = "## Five commands to try next"

# a command's first words -> the options that shorten it (appended), or None: as is
SHORTER = {
    "run --workload allreduce": ["--sizes", "1M"],
    "drill --fault": ["--repeat", "1"],
    "drill --switch-agent": ["--repeat", "1"],
    "drill chaos": ["--duration", "15"],
    "drill --control": ["--repeat", "1"],
    "compare --modes": ["--reps", "1", "--sizes", "128K", "-P", "hosts_per_leaf=2"],
    "compare -p dragonfly": ["--reps", "1", "--sizes", "192K",
                             "-P", "a=2", "-P", "h=1", "-P", "p=1"],
    "compare --fabrics": ["--reps", "1", "--sizes", "256K"],
    "run -P hosts_per_leaf=4 --baseline": ["--iterations", "1", "--size-scale", "3000"],
    "run --controller": ["--duration", "2"],
    "show": None,
    "validate": None,
    "run -f": ["--duration", "2"],
}
RESULTS = ("run", "drill", "compare")


def readme_lines():
    """The README's example lines (one per command line, continuations joined)."""
    text = (REPO / "README.md").read_text()
    block = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    block = re.sub(r"\\\n\s*", " ", block)
    return [ln.strip() for ln in block.splitlines()
            if ln.startswith("    ") and not ln.strip().startswith("#") and ln.strip()]


def groups():
    """The README's lines, a line that reads a file an earlier one wrote joined to it
    (``show --yaml > my.yaml`` then ``validate my.yaml && ... run -f my.yaml``)."""
    out, written = [], {}
    for ln in readme_lines():
        words = set(shlex.split(ln.replace("&&", " ")))
        owner = next((written[w] for w in words if w in written), None)
        if owner is None:
            out.append([ln])
            owner = len(out) - 1
        else:
            out[owner].append(ln)
        written.update({t: owner for _, t in steps(ln) if t})
    return out


def steps(line):
    """[(argv after ``-m emulator``, file its output goes to or None)] of one line."""
    out = []
    for part in line.split("&&"):
        words = shlex.split(part)
        target = None
        if ">" in words:
            i = words.index(">")
            words, target = words[:i], words[i + 1]
        i = words.index("-m")
        assert words[i + 1] == "emulator", part
        out.append((words[i + 2:], target))
    return out


def shorter(argv):
    for key, extra in SHORTER.items():
        if " ".join(argv).startswith(key):
            return extra
    raise AssertionError(f"README command {' '.join(argv)!r}: no entry in SHORTER")


def test_every_readme_command_is_known():
    argvs = [a for ln in readme_lines() for a, _ in steps(ln)]
    assert len(argvs) == len(SHORTER)
    for argv in argvs:
        shorter(argv)


@pytest.mark.parametrize("lines", groups(), ids=lambda g: " ".join(
    shlex.split(g[0].split("-m emulator", 1)[1])[:2]))
def test_a_readme_command_runs_as_printed(lines, tmp_path):
    (tmp_path / "examples").symlink_to(REPO / "examples")
    (tmp_path / "tests").symlink_to(REPO / "tests")     # the jobs files' SimAI workloads
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("FABRIC_LAB_LAYOUT", None)
    for argv, target in (step for ln in lines for step in steps(ln)):
        extra = shorter(argv) or []
        if argv[0] in RESULTS:
            extra = extra + ["--results", str(tmp_path / "results")]
        p = subprocess.run([sys.executable, "-m", "emulator", *argv, *extra], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=900, check=False)
        assert p.returncode == 0, (argv, p.stdout[-3000:], p.stderr[-3000:])
        if target:
            (tmp_path / target).write_text(p.stdout)
        assert "Traceback" not in p.stderr, p.stderr[-3000:]
