"""One running fabric: plan -> controller -> fabric -> reachability, torn down in ``finally``.

``Session`` owns one running fabric and its controller; the experiments
(``emulator.experiments``) run on it.  The order of its set-up, and what
undoes each step (all in ``finally``, with SIGINT/SIGTERM turned into an
orderly exit and masked during teardown):

  1. validate the fabric and plan addresses (nothing created yet; errors exit 2)
  2. create the run's state directory and results directory, write
     ``topology.json``
  3. start the controller (``python -m controller``) on 127.0.0.1, unless
     ``remote:HOST:PORT``                                  -> terminate it
  4. build hosts, links, shapers and bridges               -> ``FabricNet.teardown``
  5. wait until every host pair reaches every other (pings, with a deadline)
"""

import json
import os
import re
import socket
import subprocess
import sys
import time

from emulator.fabric import addressing
from emulator.dataplane import datapath
from emulator.dataplane import logs
from emulator.fabric import spec
from emulator.dataplane.shaping import DEFAULT_QUEUE_MS, ROCE_MTU
from emulator.errors import EnvironmentProblem, RunFailed
from emulator.dataplane.runstate import RunState, child_env, processes_of
from emulator.dataplane.signals import Interrupted, signals_as_exceptions, signals_masked

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def require_root():
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            "must run as root (namespaces, veths and Open vSwitch need it): "
            "sudo .venv/bin/python -m emulator " + " ".join(sys.argv[1:]))


def check_dependencies():
    """One actionable message for a missing tool or daemon."""
    import shutil
    missing = [t for t in ("ovs-vsctl", "ovs-ofctl", "mnexec", "ping", "ethtool")
               if shutil.which(t) is None]
    if missing:
        raise EnvironmentProblem(f"missing {', '.join(missing)}: run sudo ./setup.sh "
                                 "(installs openvswitch-switch, mininet, iputils-ping, ethtool)")
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        raise EnvironmentProblem("Python cannot import mininet: run with the project's venv "
                                 "(.venv/bin/python, made by ./setup.sh)")
    probe = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True,
                           timeout=10)
    if probe.returncode != 0:
        raise EnvironmentProblem("Open vSwitch is not running (ovs-vsctl cannot reach "
                                 "ovsdb-server): run sudo ./setup.sh, which starts it")


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


def wait_until(cond, timeout, what, interval=0.02):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RunFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Controller:
    """The project's controller as a child process on 127.0.0.1."""

    def __init__(self, topology_path, log_path, app=None, lb="ecmp",
                 failover="fast-failover", env=None, holddown=None):
        self.port = free_port()
        self.log_path = log_path
        argv = [sys.executable, "-m", "controller", "--topology", topology_path,
                "--listen", f"127.0.0.1:{self.port}", "--log-file", log_path,
                "--lb", lb, "--failover", failover]
        if holddown is not None:
            argv += ["--bfd-holddown", holddown]     # BASE:MAX s, controller/damping.py
        if app:
            argv += ["--app", app]
        self.argv = argv
        self.env = env
        self.proc = None

    @property
    def url(self):
        return f"tcp:127.0.0.1:{self.port}"

    def start(self, timeout=30):
        self.log = open(self.log_path + ".stdout", "a")   # a restart appends
        self.proc = subprocess.Popen(self.argv, cwd=REPO, stdout=self.log, env=self.env,
                                     stderr=subprocess.STDOUT, start_new_session=True)

        def ready():
            if self.proc.poll() is not None:
                raise RunFailed(f"controller exited with status {self.proc.returncode} "
                                f"at start; see {self.log_path}")
            return listening(self.port)
        wait_until(ready, timeout, f"the controller to listen on 127.0.0.1:{self.port}")

    def converged(self):
        """Every ``CONVERGED`` event in the controller's log so far."""
        with open(self.log_path, errors="replace") as f:
            return converged_events(f.read())

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=10):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        self.log.close()
        return self.proc.returncode


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


def make_results_dir(base, tag):
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.abspath(os.path.join(base, f"{stamp}-{tag}"))
    os.makedirs(path, exist_ok=False)
    return path


def write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=False)
        f.write("\n")


# (run tag, problems in its logs) of every Session closed in this process:
# the integration tests fail on any (tests/integration/conftest.py).
CLOSED = []


class Session:
    """A built fabric with its controller: the context of run, drills, tests.

    ``with Session(fabric, ...) as s:`` builds everything and waits for
    reachability; leaving the block (normally, on an exception or a signal)
    tears it all down.
    """

    def __init__(self, fabric, results_base="results", controller="builtin",
                 datapath_request="auto", seed=None, queue_ms=DEFAULT_QUEUE_MS, shape=True,
                 reach_timeout=90.0, progress=None, mtu=ROCE_MTU, lb="ecmp",
                 failover="fast-failover", capture=None, telemetry=None, ecn=None,
                 holddown=None):
        self.fabric = fabric
        self.holddown = holddown         # the controller's BFD hold-down, BASE:MAX s
        self.lb = lb                     # the controller's load balancing (controller/lb.py)
        self.failover = failover         # none | controller | fast-failover
        self.results_base = results_base
        self.controller_spec = controller
        self.datapath_request = datapath_request
        self.seed = seed
        self.queue_ms = queue_ms
        self.mtu = mtu                   # RoCE path MTU; interfaces get shaping.link_mtu
        self.shape = shape
        self.capture_text = capture       # --capture NODE[:PORT][,...] (dataplane.capture)
        self.capture = None
        self.telemetry_port = telemetry   # serve /metrics on 127.0.0.1 (dataplane.telemetry)
        self.telemetry = None
        self.impairer = None              # the fabric file's loss:/state: (dataplane.impair)
        self.ecn = ecn                    # marking thresholds (dataplane.ecn.Ecn) or None
        self.marker = None
        self.reach_timeout = reach_timeout
        self.progress = progress or (lambda msg: None)
        self.state = self.net = self.controller = None
        self.results = {}
        self.teardown_errors = []

    def __enter__(self):
        import threading
        self._signals = None
        if threading.current_thread() is threading.main_thread():
            self._signals = signals_as_exceptions()
            self._signals.__enter__()
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        try:
            self.close()
        finally:
            if self._signals is not None:
                self._signals.__exit__(None, None, None)
        return False

    def _setup(self):
        from emulator.dataplane.net import FabricNet
        t0 = time.monotonic()
        self._ovs_log_offset = logs.ovs_log_offset()
        dp_type, dp_reason = datapath.detect(self.datapath_request)
        from emulator.dataplane import impair
        impair.require_netem(self.fabric)
        send_buffer = None
        if dp_type == "netdev" and self.shape:
            send_buffer = datapath.check_send_buffer()
        self.state = RunState.create()
        self.topo = addressing.plan(self.fabric, self.state.tag, seed=self.seed)
        from emulator.dataplane import capture
        captures = capture.parse(self.capture_text, self.topo)
        self.dir = make_results_dir(self.results_base, self.state.tag)
        self.state.record("results", self.dir)
        self.topology_path = os.path.join(self.dir, "topology.json")
        write_json(self.topology_path, self.topo)
        with open(os.path.join(self.dir, "fabric.yaml"), "w") as f:
            f.write(spec.dump(self.fabric))
        self.results.update({
            "run": self.state.tag, "fabric": self.fabric.name, "results_dir": self.dir,
            "datapath": {"type": dp_type, "reason": dp_reason},
            "mtu": {"roce": self.mtu, "interfaces": None},
            "command": sys.argv, "python": sys.version.split()[0],
        })
        self.progress(f"run {self.state.tag}: datapath {dp_type} ({dp_reason}); "
                      f"results in {self.dir}")
        note = send_buffer and datapath.queue_capacity_note(self.topo, self.queue_ms,
                                                            send_buffer)
        if note:
            self.progress(note)
        url = self._start_controller()
        self.net = FabricNet(self.topo, self.state, dp_type, url, queue_ms=self.queue_ms,
                             shape=self.shape, progress=self.progress, roce_mtu=self.mtu)
        self.net.build()
        self.results["mtu"]["interfaces"] = self.net.mtu
        if self.ecn is not None:
            from emulator.dataplane.ecn import Marker
            from emulator.dataplane.ecnq import DequeueMarker
            self.marker = (Marker if self.ecn.at == "enqueue" else DequeueMarker) \
                .for_session(self)
        t1 = time.monotonic()
        if self.controller_spec == "builtin":
            self._wait_installed()
        from emulator.dataplane.reach import check_pairs, wait_all_pairs
        pairs, how = check_pairs(self.topo)
        self.progress(f"waiting for the hosts to reach each other ({how})")
        seconds, rounds = wait_all_pairs(self.net, timeout=self.reach_timeout,
                                         progress=self.progress, pairs=pairs)
        self.results["reachability"] = {
            "pairs": len(pairs), "reachable": len(pairs), "checked": how, "rounds": rounds,
            "wait_s": round(seconds, 3)}
        self.results["timings"] = dict(self.net.timings)
        self.results["timings"]["reachable_after_build_s"] = round(time.monotonic() - t1, 3)
        self.results["timings"]["time_to_reachable_s"] = round(time.monotonic() - t0, 3)
        if impair.impaired(self.topo):
            self._impair()
        if captures:
            self.progress(f"capturing on {len(captures)} interface(s) into {self.dir}")
            self.capture = capture.Capture(self, captures, frame_len=self.net.mtu)
            self.capture.start()
        if self.telemetry_port:
            from emulator.dataplane.telemetry import Telemetry
            self.telemetry = Telemetry(self, self.telemetry_port).start()
            self.progress(f"telemetry: {self.telemetry.url}")

    def _wait_installed(self):
        """The builtin controller has installed every switch (its CONVERGED connect
        lines): probing before that only loads the datapath with frames that miss
        (on a 40-switch fabric the controller needs tens of seconds to install them)."""
        n = len(self.topo["switches"])
        self.progress(f"waiting for the controller to install {n} switches")

        def installed():
            done = {e.get("dpid") for e in self.controller.converged()
                    if e.get("event") == "connect"}
            return len(done) >= n
        wait_until(installed, self.reach_timeout, "the controller to install every switch",
                   interval=0.1)

    def _impair(self):
        """The fabric file's impairments, once the whole fabric was seen reachable."""
        from emulator.dataplane import impair
        from emulator.dataplane.faults import Injector
        self.impairer = Injector(self, nft_name="impair",
                                 log_path=os.path.join(self.dir, "impairments.jsonl"))
        t0 = time.monotonic()
        self.results["impairments"] = impair.apply(self, self.impairer, self.progress)
        downs = sum(1 for _, lk in impair.impaired(self.topo)
                    if lk["impair"].get("state") == "down")
        # only the builtin controller logs its convergence; an app's is not known
        if downs and self.controller_spec == "builtin" and self.failover != "none":
            def converged():
                return sum(1 for e in self.controller.converged()
                           if e.get("event") == "port" and not e.get("up")
                           and e.get("t_event", 0) >= t0) >= downs
            wait_until(converged, 20, "the controller to route around the links set down")

    def child_env(self):
        """The environment every process of this run starts with (it carries the tag)."""
        return child_env(self.state.tag)

    def _start_controller(self):
        spec_ = self.controller_spec
        if spec_.startswith("remote:"):
            hostport = spec_[len("remote:"):]
            host, _, port = hostport.rpartition(":")
            self.results["controller"] = {"kind": "remote", "target": hostport}
            self.progress(f"switches will connect to your controller at {hostport}; "
                          f"it finds the fabric in {self.topology_path}")
            return f"tcp:{host}:{port}"
        app = os.path.abspath(spec_[len("app:"):]) if spec_.startswith("app:") else None
        self.controller = Controller(self.topology_path,
                                     os.path.join(self.dir, "controller.log"), app=app,
                                     lb=self.lb, failover=self.failover, env=self.child_env(),
                                     holddown=self.holddown)
        self.state.record("controller", self.controller.argv)
        self.progress(f"starting controller on 127.0.0.1:{self.controller.port}")
        self.controller.start()
        self.results["controller"] = {"kind": "app" if app else "builtin",
                                      "listen": f"127.0.0.1:{self.controller.port}"}
        return self.controller.url

    def close(self):
        with signals_masked():
            if self.impairer is not None:
                self.impairer.close()
                self.impairer = None
            if self.telemetry is not None:
                self.telemetry.stop()
                self.telemetry = None
            if self.capture is not None:
                self.results.setdefault("captures", {}).update(self.capture.stop())
                self.capture = None
            if self.marker is not None:
                self.marker.close(self)
                self.marker = None
            if self.net is not None:
                self.progress("tearing down")
                self.teardown_errors += self.net.teardown()
                self.results.setdefault("timings", {}).update(
                    {k: round(v, 3) for k, v in self.net.timings.items()
                     if k.startswith("teardown")})
            if self.controller is not None:
                status = self.controller.stop()
                # setdefault: a controller that died at start never got its entry
                ctl = self.results.setdefault("controller", {"kind": "app"})
                ctl["exit_status"] = status
                ctl["problems"] = controller_problems(self.controller.log_path)
            if self.state is not None:
                problems = logs.ovs_problems(self._ovs_log_offset, self.state.tag)
                self.results["ovs_problems"] = problems
                CLOSED.append((self.state.tag, problems
                               + self.results.get("controller", {}).get("problems", [])))
                from emulator.dataplane.cleanup import kill_processes
                leftovers = processes_of(self.state.tag)
                if leftovers:
                    kill_processes(list(leftovers))
                self.state.release()
                self.state = None
                self.results["teardown_errors"] = list(self.teardown_errors)
                self.progress("warning: could not remove: " + "; ".join(self.teardown_errors)
                              + " (`sudo .venv/bin/python -m emulator clean` removes them)"
                              if self.teardown_errors else "removed everything this run created")
            self.net = None


__all__ = ["Session", "Controller", "require_root", "check_dependencies", "Interrupted"]
