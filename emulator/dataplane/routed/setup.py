"""The Session's steps under ``--control bgp`` (``Session._setup`` hands them here).

  1. refuse what cannot run under BGP (a fabric that is not a Clos, a
     controller app, data-plane load balancing, several servers) and check
     FRR is installed: exit 2, nothing built;
  2. the run's state, routed plan and results directory (``Session._open_run``);
  3. build the routers, hosts and links and start FRR (``net.RoutedNet``);
  4. watch every router's FIB from then on (``fib.FibWatch``);
  5. wait until every eBGP session is Established (bgpd's log), then until
     every router's kernel reaches each leaf's /24 by every shortest path
     (``fib.FibWatch.wait_converged``: bgpd sends a new peer its first UPDATEs
     after a coalescing delay, so Established is not converged), then until
     every host pair answers (the same echoes as the OpenFlow fabric); record
     each session's state and time to Established.

``close`` copies the routers' configurations and logs into the results
directory (``frr/<switch>/``) once their daemons are gone.
"""

import os
import shutil
import time

from emulator.dataplane.routed import bgp, frr
from emulator.dataplane.routed.fib import FibWatch, PathTracer
from emulator.dataplane.routed.net import RoutedNet
from emulator.errors import ConfigError
from emulator.fabric.routing import asn
from emulator.fabric.routing import bfd as bfds
from lab.modes import LB

ESTABLISH_TIMEOUT_S = 60.0
LB_UNDER_BGP = (LB.ECMP, LB.SPRAY)     # the kernel hashes; NICs may still spray


def check(spec):
    """ConfigError (exit 2) for what a BGP run cannot do, before anything is built."""
    asn.check(spec.fabric, spec.fabric_source)
    bfds.parse(spec.bfd)
    if spec.lb not in LB_UNDER_BGP:
        raise ConfigError("--lb", f"{spec.lb} under --control bgp: the routers' kernels hash "
                                  "the five-tuple (ecmp); the NICs may spray (--lb spray); "
                                  "the controller's and the switches' own modes need "
                                  "--control openflow")
    if spec.controller != "builtin":
        raise ConfigError("--controller", f"{spec.controller} under --control bgp: the "
                                          "switches run eBGP, there is no OpenFlow controller")
    if spec.fabric.cluster is not None:
        raise ConfigError("--control", "bgp runs on one machine: not with --servers")
    if spec.fabric.layout not in (None, "auto", "shared"):
        raise ConfigError("--layout", "under --control bgp every router has its own "
                                      "namespace: no datapath layout to choose")
    if spec.switch_agent is not None or spec.fabric.switch_agent is not None:
        raise ConfigError("--switch-agent", "models OpenFlow agents: not under --control bgp")
    if spec.routing.adaptive:
        raise ConfigError("--routing", "adaptive routing is the switches' OpenFlow data "
                                       "plane: not under --control bgp")


def setup(s, t0):
    """``Session._setup`` under BGP (see the module docstring)."""
    spec = s.spec
    check(spec)
    frr.check_installed()
    interval, mult = bfds.parse(spec.bfd)
    captures = s._open_run("kernel", "--control bgp: Linux routers forward in the kernel",
                           {"frr": frr.version()})
    s.results["controller"] = {"kind": "none", "control": str(spec.control)}
    s.results["bgp"] = {"bfd": {"interval_ms": interval, "multiplier": mult},
                        "peering": str(spec.peering)}
    s.net = RoutedNet(s.topo, s.state, s.queue_ms, shape=s.shape, progress=s.progress,
                      roce_mtu=s.mtu, flow_control=s.fabric.flow_control,
                      bfd=(interval, mult), peering=spec.peering)
    s.net.build()
    s.fib = FibWatch(s.net).start()      # every FIB change from here on
    t1 = s._lossless_and_marking()
    n = sum(1 for sw in s.topo["switches"] for p in sw["ports"] if p["peer_kind"] != "host")
    s.progress(f"waiting for {n // 2} eBGP sessions to be Established")
    up = bgp.wait_established(s.net.frr, s.topo, ESTABLISH_TIMEOUT_S, spec.peering)
    settled = s.fib.wait_converged(ESTABLISH_TIMEOUT_S)
    started = min(r.started_at["bgpd"] for r in s.net.frr.routers.values())
    epoch_t0 = time.time() - (time.monotonic() - t0)      # the run's start, wall clock
    s._reach_and_observe(t0, t1, captures)
    s.results["timings"].update({
        "bgpd_started_s": round(started - epoch_t0, 3),
        "all_established_s": round(max(up.values()) - epoch_t0, 3),
        "fib_settled_s": round(settled / 1e9 - t0, 3)})
    s.results["bgp"]["sessions"] = bgp.sessions(s.net.frr, s.topo, started, spec.peering)
    s.results["bgp"]["established"] = sum(x["state"] == "Established"
                                          for x in s.results["bgp"]["sessions"])
    s.results["bgp"]["leaf_table"] = leaf_table(s)
    s.net.paths = PathTracer(s.net)


def leaf_table(s):
    """The first leaf's BGP table and kernel route for the last leaf's subnet (the
    engineer's first look at a fabric: report.md shows it), or None."""
    leaves = [sw for sw in s.topo["switches"] if sw["bgp"].get("subnet")]
    if len(leaves) < 2:
        return None
    first, last = leaves[0], leaves[-1]
    r = s.net.frr.routers[first["name"]]
    prefix = last["bgp"]["subnet"]
    return {"switch": first["name"], "prefix": prefix, "bgp": bgp.table(r, prefix),
            "fib": bgp.fib_route(r, prefix)}


def close(s):
    """After the teardown of a BGP run: its routers' configurations and logs kept in the
    results directory."""
    net = s.net
    if getattr(net, "frr", None) is None:
        return
    if getattr(net, "paths", None) is not None:
        net.paths.close()
    for name, r in net.frr.routers.items():
        dest = os.path.join(s.dir, "frr", name)
        os.makedirs(dest, exist_ok=True)
        for f in sorted(os.listdir(r.dir)) if os.path.isdir(r.dir) else []:
            if f.endswith((".conf", ".log", ".out")):
                shutil.copy(os.path.join(r.dir, f), dest)
