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

import dataclasses
import json
import os
import shutil
import sys
import threading
import time

from emulator.dataplane.adaptive.ugal_stage import check_session, stage_for
from emulator.dataplane.cleanup import kill_processes
from emulator.dataplane.cluster import cluster_net
from emulator.dataplane.faults import Injector
from emulator.dataplane.links import impair
from emulator.dataplane.lossless import ecn
from emulator.dataplane.lossless.ecn import Marker
from emulator.dataplane.lossless.ecnq import DequeueMarker
from emulator.dataplane.lossless.pfc_run import Pfc
from emulator.dataplane.lossless.trim import Trim
from emulator.dataplane.net import FabricNet
from emulator.dataplane.observe import capture, logs, run_yaml
from emulator.dataplane.observe.reach import check_pairs, wait_all_pairs
from emulator.dataplane.observe.telemetry import Telemetry
from emulator.dataplane.ovs import datapath
from emulator.dataplane.ovs import instances as ovs_instances
from emulator.dataplane.ovs.agent_proxy import start_for
from emulator.dataplane.ovs.controller_proc import (  # noqa: F401
    REPO,
    Controller,
    controller_problems,
    converged_events,
    free_port,
    listening,
    wait_until,
)
from emulator.dataplane.routed import frr
from emulator.dataplane.routed.setup import close as routed_close
from emulator.dataplane.routed.setup import setup as routed_setup
from emulator.dataplane.runstate import RunState, child_env, processes_of
from emulator.dataplane.system import ovs as ovs_tools
from emulator.dataplane.system.signals import Interrupted, signals_as_exceptions, signals_masked
from emulator.errors import ConfigError, EnvironmentProblem, RunFailed
from emulator.fabric import addressing, spec, switch_agent
from emulator.fabric import layout as layouts
from emulator.fabric.lossless import PfcConfig
from emulator.fabric.runspec import RunSpec
from lab.modes import CC, Control, EcnAt, Failover, FlowControl


def require_root():
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            "must run as root (namespaces, veths and Open vSwitch need it): "
            "sudo .venv/bin/python -m emulator " + " ".join(sys.argv[1:]))


def check_dependencies(controls=None):
    """One actionable message for a missing tool or daemon of the control planes
    ``controls`` will run (default: OpenFlow's)."""
    controls = set(controls or [Control.OPENFLOW])
    if Control.BGP in controls:
        if shutil.which("mnexec") is None:
            raise EnvironmentProblem("missing mnexec: run sudo ./setup.sh (installs mininet)")
        frr.check_installed()
    if Control.OPENFLOW not in controls:
        return
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
    if not ovs_tools.reachable(timeout=10):
        raise EnvironmentProblem("Open vSwitch is not running (ovs-vsctl cannot reach "
                                 "ovsdb-server): run sudo ./setup.sh, which starts it")


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
# Results directories made by Sessions of this process, in order: a command writes
# a page into each it left without one (experiments.ui.live.around).
MADE = []


# Session's keyword form (docs/controller-apps.md: a user's own tests) -> RunSpec fields
LEGACY = {"results_base": "results", "datapath_request": "datapath", "seed": "hash_seed",
          "holddown": "bfd_holddown"}


def spec_of(fabric, **kw):
    """The RunSpec of ``Session(fabric, results_base=..., controller=..., ...)``, the keyword
    form users' tests write; ``ecn`` may be an ``Ecn``, ``switch_agent`` a model, and
    ``layout`` the datapath layout (it becomes the fabric's)."""
    values = {LEGACY.get(k, k): v for k, v in kw.items()}
    e = values.pop("ecn", None)
    if e is not None and not isinstance(e, str):
        values.update(ecn=e.spec(), ecn_at=e.at)
    elif e is not None:
        values["ecn"] = e
    layout = values.pop("layout", None)
    if layout is not None:
        fabric = dataclasses.replace(fabric, layout=layout)
    agent = values.get("switch_agent")
    if agent is not None and not isinstance(agent, str):
        fabric = dataclasses.replace(fabric, switch_agent=switch_agent.fleet(agent))
        values.pop("switch_agent")
    return RunSpec(fabric=fabric, **values)


class Session:
    """A built fabric with its controller: the context of run, drills, tests.

    ``with Session(spec) as s:`` builds everything ``spec`` (a RunSpec) asks for and
    waits for reachability; leaving the block (normally, on an exception or a
    signal) tears it all down.  ``Session(fabric, controller=..., ...)``, the
    keyword form, builds the RunSpec from its keywords (``spec_of``).
    """

    def __init__(self, spec, progress=None, **kw):
        if not isinstance(spec, RunSpec):
            spec = spec_of(spec, **kw)
        elif kw:
            raise TypeError(f"Session(spec) takes no settings besides the spec: {sorted(kw)}")
        self.spec = spec
        fabric = self.fabric = spec.fabric
        self.routing = spec.routing       # a dragonfly's routing: minimal | valiant | ugal ...
        cl = fabric.cluster               # fabric.cluster.Cluster: on several servers, or None
        self.servers = cl.servers if cl else ()
        self.ssh_config = cl.ssh_config if cl else None
        self.placement = cl.placement if cl else "auto"
        self.switch_agent = switch_agent.proxied(   # a Fleet, or None: all ideal
            switch_agent.for_run(spec.switch_agent, fabric, spec.controller))
        self.agent = None                 # its proxy (dataplane.ovs.agent_proxy), if any
        self.layout = None                # datapath instances: the fabric's (fabric.layout)
        self.watch = None
        self.holddown = spec.bfd_holddown  # the controller's BFD hold-down, BASE:MAX s
        self.lb = spec.lb                 # the controller's load balancing (controller/lb.py)
        self.flowlet_frames = spec.flowlet_frames   # --lb dlb's flowlet timer
        if spec.lb.adaptive and self.servers:
            raise ConfigError("--lb", f"{spec.lb} (adaptive routing in the switches' data "
                                      "plane) runs on one machine: leave out servers: or use "
                                      "--lb controller-dlb")
        self.adaptive = None             # --lb dlb|packet: the switches' own stage
        if spec.routing.adaptive:
            check_session(spec.routing, spec.lb.adaptive, self.servers)
        self.failover = spec.failover    # none | controller | fast-failover
        self.results_base = spec.results
        self.controller_spec = spec.controller
        self.datapath_request = spec.datapath
        self.seed = spec.hash_seed
        self.queue_ms = spec.queue_ms
        self.mtu = spec.mtu              # RoCE path MTU; interfaces get shaping.link_mtu
        self.shape = spec.shape
        self.capture_text = spec.capture  # --capture NODE[:PORT][,...] (dataplane.observe.capture)
        self.capture = None
        self.telemetry_port = spec.telemetry   # serve /metrics on 127.0.0.1 (observe.telemetry)
        self.telemetry = None
        self.impairer = None              # the fabric file's loss:/state: (dataplane.links.impair)
        self.ecn = ecn.parse(spec.ecn, at=spec.ecn_at)   # marking thresholds (Ecn) or None
        # UET frames trimmed at the switch ports past a queue (dataplane.lossless.trim)
        self.trim = None if spec.trim is None else Trim(size=spec.trim, at=spec.trim_at or 0)
        self.marker = None
        self.reach_timeout = spec.reach_timeout
        self.progress = progress or (lambda msg: None)
        self.state = self.net = self.controller = None
        self.fib = None                   # --control bgp: the routers' FIB events (routed.fib)
        self.results = {}
        self.teardown_errors = []
        self._server_problems = []       # a multi-server run's servers' OVS ERR lines

    def __enter__(self):
        self._signals = None
        if threading.current_thread() is threading.main_thread():
            self._signals = signals_as_exceptions()
            self._signals.__enter__()
        try:
            self._setup()
        except BaseException:
            self.close()
            self._raise_failure()
            raise
        return self

    @property
    def pfc(self):
        """The running lossless fabric (dataplane.lossless.pfc_run.Pfc), or None."""
        return self.net.pfc if self.net is not None else None

    def _raise_failure(self):
        """A dead datapath instance is the run's one error (not the SIGHUP it sent)."""
        failure = self.watch and self.watch.failure
        if failure:
            raise RunFailed(failure) from None

    def _setup(self):
        t0 = time.monotonic()
        self._ovs_log_offset = logs.ovs_log_offset()
        impair.require_netem(self.fabric)
        if self.spec.control.routed:        # Linux routers running FRR (dataplane.routed)
            return routed_setup(self, t0)
        send_buffer = None
        if self.servers:     # their own instances, each in a server's root namespace
            dp_type, dp_reason = "netdev", "the servers' own Open vSwitch instances"
        else:
            dp_type, dp_reason = datapath.detect(self.datapath_request)
            if dp_type == "netdev" and self.shape:
                send_buffer = datapath.check_send_buffer()
        if self.servers:
            cluster_net.refuse(self)
        else:
            layout_choice = self._resolve_layout(dp_type)
        captures = self._open_run(dp_type, dp_reason,
                                  {"openvswitch": ovs_tools.version()})
        note = send_buffer and datapath.queue_capacity_note(self.topo, self.queue_ms,
                                                            send_buffer)
        if note:
            self.progress(note)
        if self.servers:
            self.net = cluster_net.start(self, dp_type)
        else:
            placement = self._place(*layout_choice)
            url = self._start_controller(unix=self.state.path("controller.sock")
                                         if placement else None)
            self.net = FabricNet(self.topo, self.state, dp_type, url, queue_ms=self.queue_ms,
                                 shape=self.shape, progress=self.progress, roce_mtu=self.mtu,
                                 placement=placement,
                                 controller_unix=self.agent.unix if self.agent
                                 else self.controller and self.controller.unix,
                                 flow_control=self.fabric.flow_control,
                                 cnp_band=self.spec.cc == CC.DCQCN,
                                 trim=self.trim is not None)
        self.watch = ovs_instances.Watch(self.net.instances,
                                         interrupt=self._signals is not None)
        self.net.build()
        self.watch.start()
        t1 = self._lossless_and_marking()
        if self.controller_spec == "builtin":
            self._wait_installed()
        self._reach_and_observe(t0, t1, captures)

    def _open_run(self, dp_type, dp_reason, versions):
        """The run's tag and state, its plan, results directory and the documents written
        before anything is built (topology.json, run.yaml, fabric.yaml); the captures
        asked for, checked against the plan."""
        self.state = RunState.create()
        self.topo = addressing.plan(self.fabric, self.state.tag, seed=self.seed)
        captures = capture.parse(self.capture_text, self.topo)
        self.dir = make_results_dir(self.results_base, self.state.tag)
        MADE.append(self.dir)
        self.state.record("results", self.dir)
        self.topology_path = os.path.join(self.dir, "topology.json")
        self.topo["modes"] = self.modes()       # the controller's configuration
        write_json(self.topology_path, self.topo)
        run_yaml.write(self.dir, self.spec, self.state.tag)
        with open(os.path.join(self.dir, "fabric.yaml"), "w") as f:
            f.write(spec.dump(self.fabric))
        self.results.update({
            "run": self.state.tag, "fabric": self.fabric.name, "results_dir": self.dir,
            "datapath": {"type": dp_type, "reason": dp_reason},
            "mtu": {"roce": self.mtu, "interfaces": None},
            "command": sys.argv, "python": sys.version.split()[0],
            "versions": dict(versions),    # the report adds the rest
        })
        self.progress(f"run {self.state.tag}: datapath {dp_type} ({dp_reason}); "
                      f"results in {self.dir}")
        return captures

    def _lossless_and_marking(self):
        """PFC, ECN marking and the adaptive stage on the built fabric; the time after."""
        self.results["mtu"]["interfaces"] = self.net.mtu
        self.results["flow_control"] = self.fabric.flow_control
        if self.fabric.flow_control != FlowControl.NONE:
            self.net.pfc = Pfc.for_session(
                self, PfcConfig(mode=self.fabric.flow_control, **dict(self.fabric.pfc)))
        if self.ecn is not None and self.pfc is not None and self.ecn.at == EcnAt.DEQUEUE:
            self.results["ecn"] = {"marking": self.ecn.text(), "ports": "lossless queues"}
            self.progress(f"ECN marking at dequeue of the lossless queues: {self.ecn.text()}")
        elif self.ecn is not None and (self.ecn.at == EcnAt.DEQUEUE or self.trim is None):
            self.marker = (Marker if self.ecn.at == EcnAt.ENQUEUE else DequeueMarker) \
                .for_session(self)
        elif self.trim is not None:     # the queues counted for trimming, nothing marked
            self.marker = DequeueMarker.for_session(self)
        if self.spec.adaptive:
            self.adaptive = stage_for(self)
        return time.monotonic()

    def _reach_and_observe(self, t0, t1, captures):
        """Every host pair reachable (its time recorded), then the fabric file's
        impairments, the captures and the telemetry."""
        pairs, how = check_pairs(self.topo)
        self.progress(f"waiting for the hosts to reach each other ({how})")
        seconds, rounds = wait_all_pairs(self.net, timeout=self.reach_timeout,
                                         progress=self.progress, pairs=pairs,
                                         room=1 << 30 if self.servers else None)
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
            self.telemetry = Telemetry(self, self.telemetry_port).start()
            self.progress(f"telemetry: {self.telemetry.url}")

    def _resolve_layout(self, dp_type):
        """(layout, why, placement), checked before anything is made: the layout
        the fabric can have, the tools an instance layout needs, and a controller
        its namespaces can reach.  A placement names switches only, so the plan
        without the run's tag gives the run's."""
        chosen, why = layouts.resolve(self.fabric, os.cpu_count() or 1, dp_type, os.environ,
                                     asked=self.layout)
        if chosen == "shared":
            return chosen, why, []
        placement = layouts.place(addressing.plan(self.fabric), chosen)
        missing = [t for t in ovs_instances.TOOLS if shutil.which(t) is None]
        if missing:
            raise EnvironmentProblem(
                f"layout {chosen} needs {', '.join(missing)}, which this machine lacks: "
                "run sudo ./setup.sh (installs openvswitch-switch, mininet, util-linux), "
                "or use --layout shared")
        if self.controller_spec.startswith("remote:"):
            raise ConfigError("--layout", f"layout {chosen} runs switches in their own "
                                          "namespaces, which cannot reach a remote controller's "
                                          "TCP address: use --layout shared with --controller "
                                          "remote:HOST:PORT")
        return chosen, why, placement

    def _place(self, chosen, why, placement):
        """Say the switches' datapath instances at start, and record them."""
        crossing = layouts.crossing_links(self.topo, placement)
        self.results["layout"] = {"layout": chosen, "why": why, "crossing_links": crossing,
                                  "instances": {n: g for n, g in placement}}
        self.progress(f"layout {chosen} ({why}): {layouts.describe(placement)}"
                      + (f"; {crossing} links join two instances" if placement else ""))
        if self.results["datapath"]["type"] == "netdev":   # what ovs-vswitchd allocates with
            pid = None if placement else ovs_instances.SYSTEM.vswitchd_pid()
            allocator = self.results["datapath"]["allocator"] = (
                datapath.vswitchd_allocator(pid) if pid
                else "tcmalloc" if datapath.allocator_path() else "malloc")
            note = pid and datapath.allocator_note(allocator)
            if note:
                self.progress(note)
        return placement

    def _wait_installed(self):
        """The builtin controller has installed every switch (its CONVERGED connect
        lines): probing before that only loads the datapath with frames that miss
        (on a 40-switch fabric the controller needs tens of seconds to install them)."""
        n = len(self.topo["switches"])
        self.progress(f"waiting for the controller to install {n} switches")

        def waiting():
            done = {e.get("dpid") for e in self.controller.converged()
                    if e.get("event") == "connect"}
            return [sw["name"] for sw in self.topo["switches"] if sw["dpid"] not in done]
        try:
            wait_until(lambda: not waiting(), self.reach_timeout,
                       "the controller to install every switch", interval=0.1)
        except RunFailed as e:
            raise RunFailed(f"{e}; {self._not_installed(waiting())}") from None

    def _not_installed(self, names):
        """Which switches the controller has not installed, what their Open vSwitch
        says of the connection, and what the controller logged that went wrong."""
        try:
            status = self.net.controller_status(names)
        except (RunFailed, OSError, ValueError) as e:
            status = {"(their status)": f"unreadable: {e}"}
        said = "; ".join(f"{n}: {status.get(n, 'status unknown')}" for n in names)
        problems = controller_problems(self.controller.log_path)[-3:]
        alive = "" if self.controller.alive() else "; the controller process has exited"
        return (f"not installed: {said}{alive}"
                + (f"; the controller logged: {' | '.join(problems)}" if problems else "")
                + f" (its log: {self.controller.log_path})")

    def _impair(self):
        """The fabric file's impairments, once the whole fabric was seen reachable."""
        self.impairer = Injector(self, nft_name="impair",
                                 log_path=os.path.join(self.dir, "impairments.jsonl"))
        t0 = time.monotonic()
        self.results["impairments"] = impair.apply(self, self.impairer, self.progress)
        downs = sum(1 for _, lk in impair.impaired(self.topo)
                    if lk["impair"].get("state") == "down")
        # only the builtin controller logs its convergence; an app's is not known
        if downs and self.controller_spec == "builtin" and self.failover != Failover.NONE:
            def converged():
                return sum(1 for e in self.controller.converged()
                           if e.get("event") == "port" and not e.get("up")
                           and e.get("t_event", 0) >= t0) >= downs
            wait_until(converged, 20, "the controller to route around the links set down")

    def modes(self):
        """The ``modes`` block of topology.json: what the controller acts on."""
        return {"lb": str(self.lb), "failover": str(self.failover),
                "routing": str(self.routing), "bfd_holddown": self.holddown or "0"}

    def app_path(self):
        """The controller app file of ``--controller app:PATH``, or None (ours)."""
        spec_ = self.controller_spec
        return os.path.abspath(spec_[len("app:"):]) if spec_.startswith("app:") else None

    def child_env(self):
        """The environment every process of this run starts with (it carries the tag)."""
        return child_env(self.state.tag)

    def _start_controller(self, unix=None):
        """Start the controller (with a switch-agent model, and the proxy in front of
        it, dataplane.ovs.agent_proxy); the URL switches connect to."""
        if self.switch_agent is None:
            return self._start_controller_only(unix)
        self.agent = start_for(self, self._start_controller_only(None), unix)
        return self.agent.url

    def _start_controller_only(self, unix=None):
        spec_ = self.controller_spec
        if spec_.startswith("remote:"):
            hostport = spec_[len("remote:"):]
            host, _, port = hostport.rpartition(":")
            self.results["controller"] = {"kind": "remote", "target": hostport}
            self.progress(f"switches will connect to your controller at {hostport}; "
                          f"it finds the fabric in {self.topology_path}")
            return f"tcp:{host}:{port}"
        app = self.app_path()
        self.controller = Controller(self.topology_path,
                                     os.path.join(self.dir, "controller.log"), app=app,
                                     env=self.child_env(), unix=unix)
        self.state.record("controller", self.controller.argv)
        self.progress(f"starting controller on 127.0.0.1:{self.controller.port}")
        self.controller.start()
        self.results["controller"] = {"kind": "app" if app else "builtin",
                                      "listen": f"127.0.0.1:{self.controller.port}"}
        return self.controller.url

    def __exit__(self, *exc):
        try:
            self.close()
        finally:
            if self._signals is not None:
                self._signals.__exit__(None, None, None)
        self._raise_failure()
        return False

    def close(self):
        with signals_masked():
            if self.watch is not None:
                self.watch.stop()
            if self.impairer is not None:
                self.impairer.close()
                self.impairer = None
            if self.telemetry is not None:
                self.telemetry.stop()
                self.telemetry = None
            if self.capture is not None:
                self.results.setdefault("captures", {}).update(self.capture.stop())
                self.capture = None
            if self.adaptive is not None:
                self.adaptive.close(self)
                self.adaptive = None
            if self.marker is not None:
                self.marker.close(self)
                self.marker = None
            if self.pfc is not None:
                self.pfc.close(self)
                self.net.pfc = None
            if self.fib is not None:
                self.fib.stop()
                self.fib = None
            if self.net is not None:
                self.progress("tearing down")
                self.teardown_errors += self.net.teardown()
                routed_close(self)   # a BGP run: its routers' logs into the results
                self._server_problems = getattr(self.net, "ovs_problems", [])
                ovs_instances.keep_logs(self.net.instances, self.dir)
                self.results.setdefault("timings", {}).update(
                    {k: round(v, 3) for k, v in self.net.timings.items()
                     if k.startswith("teardown")})
            if self.agent is not None:
                self.agent.stop()
            if self.controller is not None:
                status = self.controller.stop()
                # setdefault: a controller that died at start never got its entry
                ctl = self.results.setdefault("controller", {"kind": "app"})
                ctl["exit_status"] = status
                ctl["problems"] = controller_problems(self.controller.log_path)
            if self.state is not None:
                own = [os.path.join(i.dir, "ovs-vswitchd.log")
                       for i in (self.net.instances if self.net is not None else [])]
                problems = logs.ovs_problems(self._ovs_log_offset, self.state.tag,
                                             own_logs=own) + list(self._server_problems)
                self.results["ovs_problems"] = problems
                CLOSED.append((self.state.tag, problems
                               + self.results.get("controller", {}).get("problems", [])))
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
