"""``run.yaml``: a results directory's run specification, and what it ran on.

Every results directory gets one (a run's, and a drill's or a comparison's
top directory): every field of the ``RunSpec`` (``fabric.runspec.to_doc``),
the run's id and start time, the command's own options where a command wrote
it (a drill's faults, a comparison's modes), and the versions the figures
depend on: the project's git commit, Open vSwitch, the kernel, clang and FRR
(None where a tool is missing).  ``emulator run --spec DIR/run.yaml`` reruns
it (experiments.spec.build.from_file).
"""

import os
import platform
import time
from pathlib import Path

import yaml

from emulator.dataplane.system import proc
from emulator.errors import RunFailed

REPO = str(Path(__file__).resolve().parents[3])
NAME = "run.yaml"


def _first_line(argv, word=-1):
    """Word ``word`` of the first line ``argv`` prints, or None (missing, failed)."""
    try:
        text = proc.run(argv, timeout=10)
        return text.splitlines()[0].split()[word]
    except (RunFailed, IndexError):
        return None


def git_commit():
    """The checkout's commit, with ``-dirty`` when files differ from it; None outside git."""
    head = _first_line(["git", "-C", REPO, "rev-parse", "HEAD"], 0)
    if head is None:
        return None
    try:
        dirty = proc.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                         timeout=20).strip()
    except RunFailed:
        dirty = ""
    return head + ("-dirty" if dirty else "")


def versions():
    """The versions a run's figures depend on (None where unknown)."""
    return {"commit": git_commit(), "openvswitch": _first_line(["ovs-vsctl", "--version"]),
            "kernel": platform.release(),
            "clang": _clang(), "frr": _frr(), "python": platform.python_version()}


def _clang():
    try:
        text = proc.run(["clang", "--version"], timeout=10)
    except RunFailed:
        return None
    words = text.split()
    return words[words.index("version") + 1] if "version" in words else None


def _frr():
    for path in ("/usr/lib/frr/zebra", "/usr/sbin/zebra"):
        if os.access(path, os.X_OK):
            return _first_line([path, "--version"])
    return None


def document(spec, tag=None, command=None, started=None):
    """run.yaml's content: the spec's sections, the id, the command's options, versions."""
    doc = {"id": {"run": tag, "started": time.strftime(
        "%Y-%m-%dT%H:%M:%S%z", time.localtime(started or time.time()))}}
    doc.update(spec.to_doc())
    if command is not None:
        doc["command"] = command
    doc["versions"] = versions()
    return doc


def write(directory, spec, tag=None, command=None):
    """Write ``directory``/run.yaml; returns its path."""
    path = os.path.join(directory, NAME)
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(document(spec, tag, command), f, sort_keys=False, width=100)
    return path


def read(path):
    """A run.yaml as a mapping; the path may be a results directory."""
    if os.path.isdir(path):
        path = os.path.join(path, NAME)
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)
