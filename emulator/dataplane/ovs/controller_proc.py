"""The controller of a run as a child process, and waiting on conditions.

``Controller`` starts ``python -m controller`` listening on 127.0.0.1 (and on
a unix socket in the run's state directory when switches run in datapath
instances), waits until it listens, and stops it; ``controller_problems``
reads what went wrong in its logs.
"""

import json
import os
import re
import socket
import sys
from pathlib import Path

from emulator.dataplane.system.proc import STDOUT, Child, wait_until  # noqa: F401 (re-exported)

REPO = str(Path(__file__).resolve().parents[3])      # the checkout: emulator/dataplane/<room>/


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port):
    """True if something listens on TCP ``port`` in this namespace (no connect)."""
    want = f":{port:04X}"
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if fields[1].endswith(want) and fields[3] == "0A":
                        return True
        except OSError:
            pass
    return False


def converged_events(text):
    """The controller's ``CONVERGED {json}`` log lines (its monotonic timings), parsed."""
    return [json.loads(m) for m in re.findall(r"CONVERGED (\{.*\})", text)]


class Controller:
    """The project's controller as a child process on 127.0.0.1."""

    def __init__(self, topology_path, log_path, app=None, env=None, unix=None,
                 host="127.0.0.1", tls=None):
        """The run's modes are the topology document's ``modes`` block (the
        controller's whole configuration); ``host`` and ``tls`` ((key, certificate,
        CA) paths): a multi-server run's controller, on this machine's underlay
        address, over TLS only."""
        self.port = free_port()
        self.host = host
        self.tls = tls
        self.unix = unix                 # also listening on this unix socket
        self.log_path = log_path
        argv = [sys.executable, "-m", "controller", "--topology", topology_path,
                "--listen", f"{host}:{self.port}", "--log-file", log_path]
        if app:
            argv += ["--app", app]
        if unix:
            argv += ["--unix", unix]
        if tls:
            argv += ["--tls", ",".join(tls)]
        self.argv = argv
        self.env = env
        self.proc = None

    @property
    def url(self):
        return f"{'ssl' if self.tls else 'tcp'}:{self.host}:{self.port}"

    def start(self, timeout=30):
        self.log = open(self.log_path + ".stdout", "a")   # a restart appends
        self.proc = Child.start(self.argv, "controller", log=self.log_path, cwd=REPO,
                                stdout=self.log, stderr=STDOUT, env=self.env,
                                new_session=True)
        self.proc.wait_ready(
            lambda: listening(self.port) and (self.unix is None or os.path.exists(self.unix)),
            timeout, f"the controller to listen on {self.host}:{self.port}")

    def converged(self):
        """Every ``CONVERGED`` event in the controller's log so far."""
        with open(self.log_path, errors="replace") as f:
            return converged_events(f.read())

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=10):
        if self.proc is None:
            return None
        status = self.proc.stop(timeout)
        self.log.close()
        return status


def controller_problems(log_path):
    """Lines where the controller reported a handler exception or an OpenFlow error."""
    bad = []
    for path in (log_path, log_path + ".stdout"):
        try:
            with open(path, errors="replace") as f:
                bad += [line.rstrip() for line in f
                        if "CONTROLLER-EXCEPTION" in line or "OFP-ERROR" in line
                        or "Traceback" in line]
        except OSError:
            pass
    return bad
