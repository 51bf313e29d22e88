"""The routers' FIBs during a run: every change stamped, a flow's kernel path, and a
fault's convergence (the arithmetic is ``fabric.routing.fib``'s).

``FibWatch`` keeps a ``system.fibmon.FibMonitor`` on every router's namespace
from the moment the fabric has converged, so the state each FIB started from
is known and every later change carries its CLOCK_MONOTONIC time.
``kernel_path`` asks each router's kernel, hop by hop, where one RoCEv2 flow
goes (its five-tuple hashed as the packet's would be): the path in the form
``experiments.measure.paths`` uses, ``["h1:eth0", "leaf1:eth3", ..., "h5"]``.
"""

import time

from emulator.dataplane.system.fibmon import FibMonitor, RouteLookup, dump
from emulator.errors import RunFailed
from emulator.fabric.routing.fib import (
    FibState,
    convergence,
    expected_routes,
    missing_routes,
)

ROCE_PORT = 4791


def owners(topo):
    """{leaf subnet: the leaf that delivers it}."""
    return {sw["bgp"]["subnet"]: sw["name"] for sw in topo["switches"]
            if sw.get("bgp", {}).get("subnet")}


def neighbour(topo):
    """{(switch, interface): the switch at its other end, None for a host}."""
    return {(sw["name"], p["intf"]): (None if p["peer_kind"] == "host" else p["peer"])
            for sw in topo["switches"] for p in sw["ports"]}


def intf_of(topo, switch, port_name):
    return next(p["intf"] for sw in topo["switches"] if sw["name"] == switch
                for p in sw["ports"] if p["name"] == port_name)


class FibWatch:
    """Every router's FIB events from ``start`` on (see the module docstring)."""

    def __init__(self, net):
        self.net, self.topo = net, net.topo
        self.monitor = None

    def start(self):
        spaces = {sw["name"]: self.net.switch_netns(sw["name"]) for sw in self.topo["switches"]}
        self.monitor = FibMonitor(spaces).start()
        return self

    def stop(self):
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None

    def initial(self):
        """{switch: FibState} as the watch found them."""
        out = {}
        for name, evs in self.monitor.initial.items():
            st = FibState()
            for ev in evs:
                st.apply(ev)
            out[name] = st
        return out

    def events(self, since_ns=0):
        return self.monitor.events(since_ns)

    def replayed(self):
        """{switch: FibState} now, from the start's dump and every event since."""
        states = self.initial()
        for ev in self.events():
            states[ev["switch"]].apply(ev)
        return states

    def kernel(self):
        """{switch: FibState} now, from a fresh dump of every router's kernel (what
        ``replayed`` should agree with once the FIBs are quiet)."""
        out = {}
        for sw in self.topo["switches"]:
            st = FibState()
            for ev in dump(self.net.switch_netns(sw["name"]), {}):
                st.apply(ev)
            out[sw["name"]] = st
        return out

    def missing(self):
        """[routes that differ] between every router's kernel and the converged fabric
        (``fabric.routing.fib.expected_routes``)."""
        now = {sw: {dst: sorted(st.devs(dst) or []) for dst in st.routes}
               for sw, st in self.kernel().items()}
        return missing_routes(expected_routes(self.topo), now)

    def wait_converged(self, timeout_s, poll_s=0.05):
        """Wait until every router's FIB reaches each leaf's /24 by every shortest path;
        the CLOCK_MONOTONIC ns it did.  RunFailed naming what is missing past
        ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            diff = self.missing()
            if not diff:
                return time.monotonic_ns()
            if time.monotonic() > deadline:
                raise RunFailed(f"BGP: the routers' FIBs did not converge within "
                                f"{timeout_s:g} s after every session was Established "
                                f"({'; '.join(diff[:6])})")
            time.sleep(poll_s)

    def convergence(self, t_fault_ns, t_end_ns, dead_ends=(), dead_switches=()):
        """``fabric.routing.fib.convergence`` of the fault at ``t_fault_ns`` over this
        run's events; ``dead_ends``: {(switch, interface)}."""
        return convergence(self.initial(), self.events(), owners(self.topo),
                           neighbour(self.topo), t_fault_ns, t_end_ns, dead_ends,
                           dead_switches)


class PathTracer:
    """A flow's path through the routers' kernels (one netlink socket per router)."""

    def __init__(self, net):
        self.net, self.topo = net, net.topo
        self._lookups = {}

    def _lookup(self, switch):
        if switch not in self._lookups:
            self._lookups[switch] = RouteLookup(self.net.switch_netns(switch))
        return self._lookups[switch]

    def path(self, src_name, hp, dp, sport, dport=ROCE_PORT):
        """The hops of one flow from host port ``hp`` to host port ``dp`` (plan entries)
        with UDP source port ``sport``: [``src:port``, ``switch:ethN``, ..., ``dst``]
        (no last host: the kernel has no route somewhere)."""
        switches = {sw["name"]: sw for sw in self.topo["switches"]}
        by_intf = {p["intf"]: (sw["name"], p) for sw in self.topo["switches"]
                   for p in sw["ports"]}
        node = hp["switch"]
        iif = intf_of(self.topo, node, f"eth{hp['switch_port']}")
        path = [f"{src_name}:{hp['port']}"]
        while node in switches and len(path) <= len(switches) + 1:
            got = self._lookup(node).get(dp["ip"], src=hp["ip"], iif=iif, sport=sport,
                                         dport=dport)
            if not got or not got["dev"] or got["dev"] not in by_intf:
                return path
            _, port = by_intf[got["dev"]]
            path.append(f"{node}:{port['name']}")
            if port["peer_kind"] == "host":
                path.append(port["peer"])
                return path
            peer = switches[port["peer"]]
            iif = next(p["intf"] for p in peer["ports"] if p["port"] == port["peer_port"])
            node = port["peer"]
        return path

    def close(self):
        for lk in self._lookups.values():
            lk.close()
        self._lookups.clear()
