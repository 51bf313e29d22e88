"""The part of a run on one server: ``python -m emulator.dataplane.cluster.worker``.

The run's own process (``dataplane.cluster.servers``) starts one worker per server,
over ssh, in the server's root namespace.  The worker builds that server's
share of the fabric with the same code as a one-machine run (``FabricNet``
on the server's part of the plan, its switches in one datapath instance of
its own, the crossing links as VXLAN ports), then answers requests, one JSON
object per line on stdin, one reply per line on stdout:

  build    {part, tunnels, controller, ssl, queue_ms, roce_mtu, shape, datapath}
  ping     {pairs, ips}            -> {answered}: echoes from this server's hosts
  ranks    {configs, timeout}      -> {results, logs}: collective ranks of its hosts
  engine_start {plan, name}, engine_go {}, engine_wait_line {word, timeout},
  engine_result {timeout}, engine_kill {}
                                   -> a traffic engine on its part of a plan
  counters {}                      -> {counters}: its switch ports' counters
  snapshot {}                      -> {snapshot}: its drop counters and OVS CPU
  links    {ends, state}           -> set switch or host interfaces down or up
  appctl   {switch, args}          -> ovs-appctl of that switch's instance
  detect   {ports, down, due_ns, delay_s} -> modeled loss of signal (dataplane.links.detect)
  clock    {}                      -> its CLOCK_MONOTONIC (the run aligns timelines)
  teardown {}                      -> removes everything, then exits

Whatever ends it (a teardown request, the run's ssh connection closing when
the run's process dies, SIGTERM or SIGHUP), it removes what it built.  It
carries the run's tag (``FABRIC_LAB_RUN``), and its state directory is under
``FABRIC_LAB_STATE``, so ``emulator clean`` on the server finds its leftovers.

``--probe`` prints what the server has (versions, root, tools, underlay MTU)
as one JSON line and exits: the run checks every server with it first.  So the
worker imports the rest of the emulator (and Mininet with it) only in the
request that needs it ("lazy: see above"): a server without Mininet still
answers the probe, and the run says what it lacks.
"""

import hashlib
import json
import os
import sys
import time
from pathlib import Path

from emulator.dataplane.system import netlink
from emulator.dataplane.system.proc import STDOUT, TimedOut, attempt
from emulator.dataplane.system.signals import signals_as_exceptions, signals_masked
from emulator.errors import RunFailed

REPO = str(Path(__file__).resolve().parents[3])      # the checkout: emulator/dataplane/<room>/
PROJECT_DIRS = ("emulator", "traffic", "controller")


def project_version():
    """A digest of the project's Python sources: every server must run the same code."""
    h = hashlib.sha256()
    for top in PROJECT_DIRS:
        for root, dirs, files in sorted(os.walk(os.path.join(REPO, top))):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    h.update(os.path.relpath(path, REPO).encode())
                    with open(path, "rb") as f:
                        h.update(f.read())
    return h.hexdigest()[:16]


def _version(argv):
    try:
        out = attempt(argv, timeout=10)
    except RunFailed:             # no such command, or no answer
        return None
    return out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout else None


def versions():
    """The versions every machine of a run must share, and the kernel's boot id
    (one boot id: one clock)."""
    try:
        import mininet.net
        mn = mininet.net.VERSION
    except ImportError:
        mn = None
    return {"ovs": _version(["ovs-vswitchd", "--version"]), "mininet": mn,
            "python": sys.version.split()[0], "project": project_version(),
            "boot_id": _read("/proc/sys/kernel/random/boot_id")}


def probe(toward):
    """What this server has, for the run's preflight (``servers.preflight``)."""
    import shutil
    mtu = None
    try:
        dev = netlink.route_get(toward)[0]["dev"]
        with open(f"/sys/class/net/{dev}/mtu") as f:
            mtu = int(f.read())
    except (OSError, ValueError, KeyError, IndexError, RunFailed):
        pass
    tools = ("ovsdb-server", "ovs-vswitchd", "ovsdb-tool", "ovs-vsctl", "mnexec", "ip", "tc")
    return {"root": os.geteuid() == 0, **versions(),
            "missing": [t for t in tools if shutil.which(t) is None], "underlay_mtu": mtu,
            "ovs_netdev": os.path.exists("/sys/class/net/ovs-netdev"),
            "tunnels": tunnel_kinds(),
            "wmem_default": int(_read("/proc/sys/net/core/wmem_default") or 0)}


NETDEV = "ovs-netdev"
PROBE_LINK = "flprobe-tun"     # made and removed at once by ``tunnel_kinds``


def tunnel_kinds():
    """The Ethernet tunnels this kernel can make, of vxlan, geneve and gretap (each
    tried with a device made and removed at once)."""
    args = {"vxlan": {"vxlan_id": 1, "vxlan_port": 4789},
            "geneve": {"geneve_id": 1, "geneve_remote": "192.0.2.1"},
            "gretap": {"gre_remote": "192.0.2.1"}}
    have = []
    with netlink.Netlink() as ipr:
        for kind, extra in args.items():
            try:
                ipr.link("add", ifname=PROBE_LINK, kind=kind, **extra)
            except netlink.NetlinkError:
                continue
            have.append(kind)
            idx = ipr.index(PROBE_LINK)
            if idx is not None:
                ipr.link("del", index=idx)
    return have
OPS = ("build", "ping", "ranks", "engine_start", "engine_go", "engine_wait_line",
       "engine_result", "engine_kill", "counters", "snapshot", "links", "appctl", "detect", "clock",
       "controller_status", "teardown")


def _delete_link(name):
    """Remove interface ``name`` of this namespace if it is there; [] or [error]."""
    try:
        netlink.delete_link(name)
    except netlink.NetlinkError as e:
        return [f"removing {name}: {e}"]
    return []


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


class Worker:
    """One server's share of a running fabric."""

    def __init__(self, tag, server):
        self.tag = tag
        self.server = server
        self.state = None
        self.net = None
        self.engine = None
        self.detector = None

    def build(self, req):
        from emulator.dataplane.net import FabricNet  # lazy: see above
        from emulator.dataplane.runstate import RunState  # lazy: see above
        self.state = RunState.create_named(self.tag, self.server)
        # the userspace datapath's own device, made in this namespace: ours to remove
        self.state.record("interface", NETDEV)
        part = req["part"]
        files = {}
        for key in ("key", "cert", "ca"):
            path = self.state.path(f"tls-{key}.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(req["ssl"][key])
            files[key] = path
        switches = [sw["name"] for sw in part["switches"]]
        self.net = FabricNet(part, self.state, req["datapath"], req["controller"],
                             queue_ms=req["queue_ms"], shape=req["shape"],
                             roce_mtu=req["roce_mtu"],
                             placement=[(f"ovs-{self.server}", switches)] if switches else [],
                             tunnels=req["tunnels"],
                             ssl=(files["key"], files["cert"], files["ca"]),
                             instance_netns=False, mtu=req.get("mtu"), rmem_may_stay=True)
        self.net.build()
        return {"timings": self.net.timings, "mtu": self.net.mtu}

    def ping(self, req):
        from types import SimpleNamespace

        from emulator.dataplane.observe.reach import ping_round  # lazy: see above
        hosts = [{"name": n, "ip": ip} for n, ip in req["ips"].items()]
        view = SimpleNamespace(topo={"hosts": hosts}, hosts=self.net.hosts)
        pairs = [tuple(p) for p in req["pairs"]]
        return {"answered": sorted(ping_round(view, pairs, wait_s=req.get("wait_s", 0.5)))}

    def ranks(self, req):
        """Run the collective's ranks of this server's hosts; return their result
        documents and the tails of their logs."""
        procs = []
        coll = self.state.path("collective")
        os.makedirs(coll, exist_ok=True)
        for cfg in req["configs"]:
            k = cfg["rank"]
            cfg = dict(cfg, output=os.path.join(coll, f"rank{k}.json"))
            path = os.path.join(coll, f"rank{k}.config.json")
            with open(path, "w") as f:
                json.dump(cfg, f)
            name = cfg["ranks"][k]["name"]
            log = open(os.path.join(coll, f"rank{k}.log"), "w")
            p = self.net.popen_in(name, [sys.executable, "-m", "traffic", "rank",
                                         "--config", path], cwd=REPO, stdout=log,
                                  stderr=STDOUT)
            procs.append((k, p, log, cfg["output"]))
        deadline = time.monotonic() + req["timeout"]
        out = {"results": {}, "status": {}, "logs": {}}
        try:
            for k, p, log, _ in procs:
                try:
                    p.wait(timeout=max(1.0, deadline - time.monotonic()))
                except TimedOut:
                    p.kill()
                out["status"][k] = p.returncode
        finally:
            for k, p, log, _ in procs:
                p.kill()
                log.close()
        for k, _, log, output in procs:
            try:
                with open(output) as f:
                    out["results"][k] = json.load(f)
            except (OSError, ValueError):
                pass
            with open(log.name, errors="replace") as f:
                out["logs"][k] = f.read()[-4000:]
        return out

    def engine_start(self, req):
        """A traffic engine on this server's part of a plan (``mix.plan_for``; its
        ``netns`` fields name hosts, ``host:NAME``); returns once it is ready."""
        from emulator.dataplane.engine_proc import EngineProcess  # lazy: see above
        from emulator.dataplane.runstate import child_env  # lazy: see above
        plan = dict(req["plan"])
        for key in ("streams", "receivers"):
            plan[key] = [dict(e, netns=f"/proc/{self.net.hosts[e['netns'][5:]].pid}/ns/net")
                         for e in plan[key]]
        work = self.state.path("traffic")
        os.makedirs(work, exist_ok=True)
        self.engine = EngineProcess(plan, work, env=child_env(self.tag), name=req["name"])
        self.engine.start()
        return {}

    def engine_go(self, req):
        if self.engine is None:
            raise RunFailed("no traffic engine to start")
        self.engine.go()
        return {}

    def engine_result(self, req):
        if self.engine is None:
            return {"result": None}
        try:
            return {"result": self.engine.result(req.get("timeout"))}
        finally:
            self.engine.kill()
            self.engine = None

    def counters(self, req):
        return {"counters": self.net.intf_counters()}

    def snapshot(self, req):
        """This server's drop counters and Open vSwitch CPU (``counters.snapshot``)."""
        from emulator.dataplane.observe.counters import snapshot  # lazy: see above
        snap = snapshot(self.net)
        snap["queues"] = {k: list(v) for k, v in snap["queues"].items()}
        return {"snapshot": snap}

    def links(self, req):
        """Set interfaces down or up: ``ends`` [[where, ifname]], where is
        ``switch:NAME`` or ``host:NAME`` (``ClusterNet.set_links``)."""
        from emulator.dataplane.system.netlink import ns_sockets  # lazy: see above
        state = req["state"]
        with ns_sockets() as sock:
            targets = []
            for where, ifname in req["ends"]:
                kind, _, node = where.partition(":")
                ns = self.net.switch_netns(node) if kind == "switch" \
                    else f"/proc/{self.net.hosts[node].pid}/ns/net"
                ipr = sock(ns)
                idx = ipr.link_lookup(ifname=ifname)
                if not idx:
                    raise OSError(f"interface {ifname} of {node} not found")
                targets.append((ipr, idx[0]))
            for ipr, idx in targets:
                ipr.link("set", index=idx, state=state)
            if state == "up":
                for (where, ifname), (ipr, idx) in zip(req["ends"], targets):
                    if where.startswith("host:"):
                        self._restore_routes(where[5:], ifname, ipr, idx)
        t_ns = time.monotonic_ns()
        out = {"t_ns": t_ns}
        if req.get("notify") is not None and req.get("ports"):   # a cut's modeled detection
            out.update(self.detect({"ports": req["ports"], "down": True, "delay_s":
                                    req["notify"], "due_ns": t_ns + int(req["notify"] * 1e9)}))
        return out

    def _restore_routes(self, host, ifname, ipr, idx):
        """A host's routes through ``ifname``, which setting it down removed (the
        multi-plane rails' routes: ``faults.Injector._restore_routes``)."""
        doc = next(h for h in self.net.topo["hosts"] if h["name"] == host)
        for r in doc.get("routes", ()):
            if r["dev"] == ifname:
                ipr.route("replace", dst=r["dst"], prefsrc=r["src"], oif=idx)

    def appctl(self, req):
        """``ovs-appctl`` of the instance carrying ``switch`` (e.g. ofproto/trace)."""
        return {"text": self.net.ovs(req["switch"]).appctl(*req["args"], timeout=20)}

    def controller_status(self, req):
        """What this server's Open vSwitch says of ``switches``' controller connections."""
        return {"status": self.net.controller_status(req["switches"])}

    def detect(self, req):
        """Tell this server's switches of ``ports``' loss of signal (or its return) at
        ``due_ns`` on this server's clock (``dataplane.links.detect``, the run's delay)."""
        from types import SimpleNamespace

        from emulator.dataplane.links.detect import Detector  # lazy: see above
        if self.detector is None:
            self.detector = Detector(SimpleNamespace(net=self.net, topo=self.net.topo),
                                     req["delay_s"])
        ports = [tuple(p) for p in req["ports"]]
        t_cut = req["due_ns"] - int(req["delay_s"] * 1e9) if req["down"] else None
        return {"detect": self.detector.notify(ports, req["down"], t_cut)}

    def clock(self, req):
        return {"t_ns": time.monotonic_ns()}

    def engine_kill(self, req):
        if self.engine is not None:
            self.engine.kill()
            self.engine = None
        return {}

    def engine_wait_line(self, req):
        if self.engine is None:
            raise RunFailed("no traffic engine")
        self.engine.wait_line(req["word"], req["timeout"])
        return {}

    def teardown(self, req=None):
        errors, problems = [], []
        if self.engine is not None:
            self.engine.kill()
            self.engine = None
        if self.detector is not None:
            self.detector.close()
            self.detector = None
        if self.net is not None:
            from emulator.dataplane.observe.logs import ovs_problems  # lazy: see above
            errors += self.net.teardown()
            problems = ovs_problems(0, self.tag, own_logs=[
                os.path.join(i.dir, "ovs-vswitchd.log") for i in self.net.instances])
            self.net = None
            errors += _delete_link(NETDEV)
        if self.state is not None:
            self.state.release()
            self.state = None
        return {"errors": errors, "ovs_problems": problems}


def serve(tag, server, inp, out):
    """Answer requests from ``inp`` until a teardown or end of input; always tear down.

    A reader thread takes the requests: when the run's side of the session ends
    while a long request runs (a collective, a traffic engine), the worker is
    interrupted (SIGHUP) and tears down at once instead of finishing it."""
    import queue
    import signal
    import threading

    worker = Worker(tag, server)
    lines = queue.Queue()
    busy = threading.Event()

    def read():
        for line in inp:
            lines.put(line)
        lines.put(None)
        if busy.is_set():
            os.kill(os.getpid(), signal.SIGHUP)
    with signals_as_exceptions():
        threading.Thread(target=read, name="requests", daemon=True).start()
        try:
            while True:
                line = lines.get()
                if line is None:
                    return 0
                req = json.loads(line)
                op = req.get("op")
                busy.set()
                try:
                    if op not in OPS:
                        raise ValueError(f"unknown request {op!r}")
                    reply = {"ok": True, **getattr(worker, op)(req)}
                except Exception as e:      # noqa: BLE001 one request failed, not the worker
                    reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                finally:
                    busy.clear()
                out.write(json.dumps(reply) + "\n")
                out.flush()
                if op == "teardown":
                    return 0
        finally:
            with signals_masked():
                worker.teardown()


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python -m emulator.dataplane.cluster.worker")
    ap.add_argument("--probe", metavar="ADDRESS",
                    help="print what this server has (toward the run's ADDRESS) and exit")
    ap.add_argument("--server", default="server", help="this server's name in the run")
    args = ap.parse_args(argv)
    if args.probe:
        print(json.dumps(probe(args.probe)))
        return 0
    tag = os.environ.get("FABRIC_LAB_RUN")
    if not tag:
        print("FABRIC_LAB_RUN is not set: the run starts its workers", file=sys.stderr)
        return 2
    # requests and replies own stdout; everything else (Mininet's log) goes to stderr
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    from mininet.log import setLogLevel
    setLogLevel("error")
    return serve(tag, args.server, sys.stdin, replies)


if __name__ == "__main__":
    sys.exit(main())
