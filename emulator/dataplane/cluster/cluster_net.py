"""A fabric on several servers, seen from the run's process as one fabric.

``ClusterNet`` stands where ``FabricNet`` stands in a one-machine run.  It
starts one worker per server (``dataplane.cluster.servers.RemoteWorker``), hands
each its part of the plan (``fabric.cluster.part``), its tunnels and the
controller's TLS material, and builds all servers at once.  Requests that
touch hosts or switch ports go to the server that carries them:

  * reachability: each server sends the echoes of its own hosts
    (``ping_round``), to any host of the fabric;
  * a collective: each server starts the ranks of its hosts and returns
    their result documents (``run_ranks``);
  * a cut: the server of the switch sets its port down (``set_link``);
  * counters: every server reads its switch ports (``intf_counters``).

``teardown`` asks every worker to remove its share; a worker whose ssh
session closes (this process died) removes it by itself.
"""

import os
import time

from emulator.dataplane.cluster import servers as srv
from emulator.dataplane.cluster.cluster_traffic import RemoteEngines
from emulator.dataplane.cluster.servers import RemoteWorker, in_parallel
from emulator.dataplane.links import impair
from emulator.dataplane.observe.counters import machine_cpu
from emulator.dataplane.ovs.controller_proc import Controller
from emulator.errors import ConfigError, EnvironmentProblem
from emulator.fabric import addressing, cluster
from emulator.fabric.units import link_mtu
from lab.modes import FlowControl


class ClusterNet:
    """The running fabric of a multi-server run."""

    def __init__(self, topo, state, servers, where, ssh, controller_url, tls,
                 datapath_type="netdev", queue_ms=30.0, shape=True, roce_mtu=4096,
                 progress=None, env=None):
        self.topo = topo
        self.state = state
        self.servers = list(servers)
        self.where = where
        self.ssh = ssh
        self.controller_url = controller_url
        self.tls = tls
        self.datapath_type = datapath_type
        self.queue_ms = queue_ms
        self.shape = shape
        self.roce_mtu = roce_mtu
        self.progress = progress or (lambda msg: None)
        self.env = env
        self.workers = {}
        self.timings = {}
        self.mtu = None
        self.pfc = None
        self.instances = []          # no instance of this machine: each server has its own
        self.shared_clock = False    # one kernel's clock for every server (set by start)
        self.ovs_problems = []       # ERR lines of the servers' Open vSwitch about the run
        self.interface_mtu = None    # every interface's, when the tunnels carry less
        self.record = {}             # where the clocks' alignment is reported (results)
        self.clock_offset_ns = {}    # server: its monotonic clock minus ours (measure_clocks)
        self.last_change_ns = {}     # server: when set_links last changed its interfaces
        self.clock_error_ns = 0
        self.tunnels = cluster.tunnels(topo, where, servers, state.tag)
        self.intf_server = {p["intf"]: where[sw["name"]]
                            for sw in topo["switches"] for p in sw["ports"]}

    def server_of(self, node):
        return self.where[node]

    def build(self):
        t0 = time.monotonic()
        crossing = sum(len(t) for t in self.tunnels.values()) // 2
        self.progress(f"starting workers on {len(self.servers)} servers "
                      f"({cluster.describe(self.where, self.servers)}); "
                      f"{crossing} links cross servers")
        for s in self.servers:
            # a record for the reader (clean finds a server's share by its tag there);
            # each is in ``workers`` once started, so teardown reaches the started ones
            self.state.record("server", {"name": s.name, "address": s.address})
            self.workers[s.name] = RemoteWorker(s, self.ssh, self.state.tag, self.env)
        self.timings["workers_s"] = time.monotonic() - t0
        with open(self.tls["sw-key"]) as k, open(self.tls["sw"]) as c, \
                open(self.tls["ca"]) as ca:
            ssl = {"key": k.read(), "cert": c.read(), "ca": ca.read()}

        def build_one(name):
            return self.workers[name].call(
                "build", wait=600, part=cluster.part(self.topo, self.where, name),
                tunnels=self.tunnels[name], controller=self.controller_url, ssl=ssl,
                queue_ms=self.queue_ms, shape=self.shape, roce_mtu=self.roce_mtu,
                datapath=self.datapath_type, mtu=self.interface_mtu)
        self.progress("building every server's share of the fabric")
        built = in_parallel(build_one, list(self.workers))
        self.mtu = next(iter(built.values()))["mtu"]
        for name, reply in built.items():
            self.timings[f"build_{name}_s"] = round(reply["timings"].get("build_s", 0), 3)
        if not self.shared_clock:     # one kernel's clock: nothing to align
            self.measure_clocks()
        self.timings["build_s"] = time.monotonic() - t0

    # ----- requests that go to the server carrying the node -------------------

    def ping_round(self, pairs, wait_s=0.5):
        """One echo per (src, dst) host pair, each sent by its source's server."""
        ips = {h["name"]: h["ip"] for h in self.topo["hosts"]}
        by_server = {}
        for src, dst in pairs:
            by_server.setdefault(self.where[src], []).append([src, dst])
        replies = in_parallel(lambda name: self.workers[name].call(
            "ping", pairs=by_server[name], ips=ips, wait_s=wait_s), list(by_server))
        return {tuple(p) for r in replies.values() for p in r["answered"]}

    def run_ranks(self, configs, timeout):
        """Run a collective's ranks on their hosts' servers; {rank: (status, result
        document or None, log tail)}."""
        by_server = {}
        for cfg in configs:
            host = cfg["ranks"][cfg["rank"]]["name"]
            by_server.setdefault(self.where[host], []).append(cfg)
        replies = in_parallel(lambda name: self.workers[name].call(
            "ranks", wait=timeout + 60, configs=by_server[name], timeout=timeout),
            list(by_server))
        out = {}
        for r in replies.values():
            for k, status in r["status"].items():
                out[int(k)] = (status, r["results"].get(k), r["logs"].get(k, ""))
        return out

    def detector(self, session, delay_s, clock):
        """Modeled loss of signal, timed by each server's worker (``RemoteDetector``)."""
        return RemoteDetector(self, delay_s)

    def netns_of(self, host):
        """How a traffic plan names ``host``'s namespace: its server fills the path in."""
        return f"host:{host}"

    def engines(self, plan, name="engine"):
        """One traffic engine per server on that server's part of ``plan``."""
        return RemoteEngines(self, plan, name)

    def switch_netns(self, switch):
        """How a fault names ``switch``'s ports' namespace: its server resolves it."""
        return f"switch:{switch}"

    def _ends_by_server(self, ends):
        """{server: [[where, ifname]]} of ``ends`` (``switch:NAME``/``host:NAME``)."""
        out = {}
        for where, ifname in ends:
            out.setdefault(self.where[where.partition(":")[2]], []).append([where, ifname])
        return out

    def set_links(self, ends, state):
        """Set interfaces down or up on their servers, all servers at once: ``ends``
        [(``switch:NAME`` or ``host:NAME``, interface name)]."""
        by_server = self._ends_by_server(ends)
        done = in_parallel(lambda name: self.workers[name].call(
            "links", ends=by_server[name], state=state), list(by_server))
        self.last_change_ns = {name: r["t_ns"] for name, r in done.items()}   # their clocks
        return self.last_change_ns

    def cut(self, ends, ports, delay_s=None):
        """Set ``ends`` down, each server its own, and with ``delay_s`` have each tell
        its switches among ``ports`` [(switch, port)] that long after its cut
        (``dataplane.links.detect``): (when the last server set its ends down, the signal
        document as ``Injector._signal`` gives it, when the first did), times on
        this machine's clock."""
        by_server, notify = self._ends_by_server(ends), {}
        for sw, port in ports:
            notify.setdefault(self.where[sw], []).append([sw, port])
            by_server.setdefault(self.where[sw], [])
        done = in_parallel(lambda name: self.workers[name].call(
            "links", ends=by_server[name], state="down", ports=notify.get(name, []),
            notify=delay_s), list(by_server))
        self.last_change_ns = {name: r["t_ns"] for name, r in done.items()}
        changed = [r["t_ns"] - self.clock_offset_ns.get(name, 0)
                   for name, r in done.items() if by_server[name]]
        first = min(changed) if changed else None
        t_cut = max(changed) if changed else time.monotonic_ns()
        if delay_s is None:
            return t_cut, {}, first
        docs = []
        for name, r in done.items():
            off = self.clock_offset_ns.get(name, 0)
            if "detect" in r:
                docs.append({k: (v - off if k.startswith("t_") else v)
                             for k, v in r["detect"].items()})
        return t_cut, {"detect": {
            "detect_ms": round(delay_s * 1e3, 3),
            "t_notify_ns": max(d["t_notify_ns"] for d in docs),
            "t_acked_ns": max(d["t_acked_ns"] for d in docs),
            "ports": [p for d in docs for p in d["ports"]]}}, first

    def ovs(self, switch):
        """The Open vSwitch carrying ``switch``, as far as ``appctl`` (ofproto/trace)."""
        return _RemoteOvs(self.workers[self.where[switch]], switch)

    def controller_status(self, switches):
        """{switch: its controller connection as its server's Open vSwitch sees it}."""
        by_server = {}
        for sw in switches:
            by_server.setdefault(self.where[sw], []).append(sw)
        replies = in_parallel(lambda name: self.workers[name].call(
            "controller_status", switches=by_server[name]), list(by_server))
        return {sw: f"{st} (server {name})" for name, r in replies.items()
                for sw, st in r["status"].items()}

    def measure_clocks(self, samples=5):
        """{server: its CLOCK_MONOTONIC minus this machine's, in ns}: the midpoint of
        the quickest of ``samples`` round trips (off by at most half of it)."""
        def one(name):
            best = None
            for _ in range(samples):
                t0 = time.monotonic_ns()
                remote = self.workers[name].call("clock")["t_ns"]
                t1 = time.monotonic_ns()
                if best is None or t1 - t0 < best[0]:
                    best = (t1 - t0, remote - (t0 + t1) // 2)
            return best
        got = in_parallel(one, list(self.workers))
        self.clock_offset_ns = {name: off for name, (_, off) in got.items()}
        self.clock_error_ns = max(rtt // 2 for rtt, _ in got.values())
        self.record["clocks"] = {
            "offset_ms": {n: round(o / 1e6, 3) for n, o in self.clock_offset_ns.items()},
            "error_ms": round(self.clock_error_ns / 1e6, 3)}
        return self.clock_offset_ns

    def intf_counters(self):
        replies = in_parallel(lambda name: self.workers[name].call("counters"),
                              list(self.workers))
        out = {}
        for r in replies.values():
            out.update({k: tuple(v) if v else None for k, v in r["counters"].items()})
        return out

    def snapshot(self):
        """Every server's drop counters merged (``counters.snapshot``); the CPU clock
        is this machine's (a server's own busy time is in its results)."""
        replies = in_parallel(lambda name: self.workers[name].call("snapshot"),
                              list(self.workers))
        out = {"t": time.monotonic(), "ovs_socket": {}, "ovs_interface": {}, "softnet": 0,
               "queues": {}, "pfc_drops": {}, "ovs_cpu_s": 0.0, "machine": machine_cpu()}
        for r in replies.values():
            snap = r["snapshot"]
            out["ovs_socket"].update(snap["ovs_socket"])
            out["ovs_interface"].update({k: tuple(v) for k, v in snap["ovs_interface"].items()})
            out["queues"].update({k: tuple(v) for k, v in snap["queues"].items()})
            out["softnet"] += snap["softnet"]
            out["ovs_cpu_s"] += snap["ovs_cpu_s"] or 0.0
        return out

    def ovses(self):
        return []

    def teardown(self):
        t0 = time.monotonic()
        errors = []
        done = in_parallel(lambda name: self.workers[name].close(), list(self.workers))
        for name, (errs, problems) in done.items():
            errors += [f"server {name}: {e}" for e in errs]
            self.ovs_problems += [f"server {name}: {p}" for p in problems]
        self.workers = {}
        self.timings["teardown_s"] = time.monotonic() - t0
        return errors



class RemoteDetector:
    """``dataplane.links.detect.Detector`` on several servers: each server's worker tells its
    own switches, ``delay_s`` after its own interfaces changed (``set_links``)."""

    def __init__(self, net, delay_s):
        self.net = net
        self.delay_s = delay_s

    def notify(self, ports, down, t_cut_ns=None, timeout=5.0):
        by_server = {}
        for sw, port in ports:
            by_server.setdefault(self.net.where[sw], []).append([sw, port])

        def one(name):
            off = self.net.clock_offset_ns.get(name, 0)
            cut = self.net.last_change_ns.get(name, (t_cut_ns or time.monotonic_ns()) + off)
            doc = self.net.workers[name].call(
                "detect", wait=timeout + 10, ports=by_server[name], down=down,
                due_ns=cut + int(self.delay_s * 1e9), delay_s=self.delay_s)["detect"]
            return {k: (v - off if k.startswith("t_") else v) for k, v in doc.items()}
        docs = in_parallel(one, list(by_server))
        return {"detect_ms": round(self.delay_s * 1e3, 3),
                "t_notify_ns": max(d["t_notify_ns"] for d in docs.values()),
                "t_acked_ns": max(d["t_acked_ns"] for d in docs.values()),
                "ports": [p for d in docs.values() for p in d["ports"]]}

    def close(self):
        pass


class _RemoteOvs:
    """A switch's Open vSwitch on its server, for ``appctl`` only."""

    def __init__(self, worker, switch):
        self.worker = worker
        self.switch = switch

    def appctl(self, *args, timeout=20):
        return self.worker.call("appctl", wait=timeout + 10, switch=self.switch,
                                args=list(args))["text"]


UNSUPPORTED = (("capture_text", "--capture"), ("telemetry_port", "--telemetry"),
               ("ecn", "--ecn"))


def refuse(session):
    """One clear error for what a multi-server run does not do (yet)."""
    for attr, option in UNSUPPORTED:
        if getattr(session, attr):
            raise ConfigError(option, f"{option} runs on one machine only: not with --servers")
    if session.fabric.flow_control != FlowControl.NONE:
        raise ConfigError("--servers", "a lossless fabric runs on one machine only: "
                                       "not with --servers")
    if impair.impaired(addressing_plan(session)):
        raise ConfigError("--servers", "link impairments in the fabric file (loss:, state:, "
                                       "delay:) run on one machine only: not with --servers")
    if session.controller_spec.startswith("remote:"):
        raise ConfigError("--controller", "a multi-server run starts its own controller "
                                          "(builtin or app:), reached over TLS")


def addressing_plan(session):
    return addressing.plan(session.fabric)


def start(session, dp_type):
    """Place the fabric on the servers, check them, start the controller on this
    machine's underlay address with the run's TLS keys; the ``ClusterNet`` to build."""
    servers = session.servers
    where = cluster.place(session.topo, servers, session.placement)
    toward = {s.name: srv.local_address(s.address) for s in servers}
    addresses = sorted(set(toward.values()))
    if len(addresses) > 1:
        raise EnvironmentProblem(f"this machine reaches the servers from {len(addresses)} "
                                 f"addresses ({', '.join(addresses)}): the controller listens "
                                 "on one; put the servers on one underlay network")
    ssh = srv.ssh_base(session.ssh_config, session.state.dir)
    session.progress(f"checking {len(servers)} servers over ssh")
    docs, here = srv.preflight(servers, ssh, session.mtu, toward)
    tls = srv.make_tls(session.state.path("tls"), addresses[0])
    shared_clock = all(d["boot_id"] == here["boot_id"] for d in docs.values())
    ports, _ = cluster.crossing(session.topo, where)
    session.results["servers"] = {
        "placement": session.placement, "crossing_links": len(ports) // 2,
        "controller": f"{addresses[0]} (TLS)",
        "one_way_latency": ("measured: every server runs on this machine's clock"
                            if shared_clock else
                            "not measured: the servers' clocks are not shared"),
        "servers": {s.name: {"address": s.address, "user": s.user,
                             "nodes": sorted(n for n, w in where.items() if w == s.name),
                             "underlay_mtu": docs[s.name]["underlay_mtu"],
                             "ovs": docs[s.name]["ovs"]} for s in servers}}
    session.controller = Controller(
        session.topology_path, os.path.join(session.dir, "controller.log"),
        app=session.app_path(), env=session.child_env(), host=addresses[0],
        tls=(tls["ctl-key"], tls["ctl"], tls["ca"]))
    session.state.record("controller", session.controller.argv)
    session.progress(f"starting controller on {addresses[0]}:{session.controller.port} (TLS)")
    session.controller.start()
    session.results["controller"] = {"kind": "app" if session.app_path() else "builtin",
                                     "listen": f"{addresses[0]}:{session.controller.port}",
                                     "tls": True}
    net = ClusterNet(session.topo, session.state, servers, where, ssh,
                     session.controller.url, tls, datapath_type=dp_type,
                     queue_ms=session.queue_ms, shape=session.shape, roce_mtu=session.mtu,
                     progress=session.progress, env=session.child_env())
    net.shared_clock = shared_clock
    net.record = session.results["servers"]
    tunnel_mtu = min(cluster.check_mtu(d["underlay_mtu"], session.mtu, name)
                     for name, d in docs.items())
    if tunnel_mtu < link_mtu(session.mtu):
        net.interface_mtu = tunnel_mtu        # every interface: one MTU end to end
    return net
