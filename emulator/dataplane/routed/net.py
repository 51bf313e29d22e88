"""The fabric of a BGP run: Linux routers in their own namespaces, built like the
OpenFlow fabric but without bridges.

Model -> Linux (the parts that differ from ``dataplane.net``):
  * a switch is a Mininet node ``FabricRouter`` with network and mount
    namespaces of its own (``mnexec -n``, which mounts a sysfs of that
    namespace at its /sys: its ports' counters read as a datapath instance's
    do, ``sysfs``); its FRR daemons start inside it;
  * its ports are the plan's veth ends (``fl<tag><k><i>-e<N>``), made inside
    its namespace, with the switch's router MAC and the routed plan's /31
    (``fabric.routing.addresses``), shaped by the same TBF (``links.shaping``);
    its loopback carries the router id;
  * the kernel forwards: ``ip_forward``, ``fib_multipath_hash_policy=1`` (the
    five-tuple, so a RoCEv2 flow's UDP source port picks its path) and
    ``fib_multipath_hash_seed`` = the plan's seed of that switch (per
    switch, or the run's shared ``--hash-seed``: polarization);
    ``ignore_routes_with_linkdown=1``: a next hop whose carrier is gone is
    skipped by the kernel itself, one set down is dead (``fabric.routing.fib``,
    pinned by tests/integration/test_bgp.py); rp_filter and redirects off;
  * a host has an address per NIC (a /31 of its leaf's /24), a default route
    through its first NIC's gateway and, with several NICs, a table and a
    rule per source address; the gateway's MAC is in the plan (frames the
    traffic engine builds carry it).

Teardown: FRR's daemons, then every node (a namespace goes with its last
process, and its veth ends with it).
"""

import signal
import time

from emulator.dataplane.links import hb
from emulator.dataplane.links.ifaces import write_sysctl
from emulator.dataplane.net import FabricNet, name_intfs
from emulator.dataplane.nodes import FabricHost
from emulator.dataplane.routed.frr import Frr, Router
from emulator.dataplane.runstate import child_env
from emulator.dataplane.system import nft
from emulator.dataplane.system.netlink import Netlink, NetlinkError, netns_of
from emulator.errors import RunFailed
from emulator.fabric.routing import frrconf
from lab.modes import Peering
from traffic.nic.netns import entered

ROUTER_SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    "net/ipv4/conf/all/forwarding": "1",
    "net/ipv4/fib_multipath_hash_policy": "1",      # L4: the five-tuple
    "net/ipv4/conf/all/ignore_routes_with_linkdown": "1",   # carrier lost: skip it
    "net/ipv4/conf/default/ignore_routes_with_linkdown": "1",
    "net/ipv4/conf/all/rp_filter": "0",
    "net/ipv4/conf/default/rp_filter": "0",
    "net/ipv4/conf/all/send_redirects": "0",
    "net/ipv4/conf/default/send_redirects": "0",
    "net/ipv4/conf/all/accept_redirects": "0",
}
# a dead control plane's forwarding: everything the router would forward is dropped
BLACKHOLE = ("table inet {table} {{\n  chain forward {{\n"
             "    type filter hook forward priority -300; policy drop;\n  }}\n}}\n")
NO_IPV6 = {"net/ipv6/conf/all/disable_ipv6": "1", "net/ipv6/conf/default/disable_ipv6": "1"}


class FabricRouter(FabricHost):
    """A switch of a routed fabric: a Mininet node whose processes carry the run's tag."""


class RoutedNet(FabricNet):
    """The running routed fabric of one run (see the module docstring)."""

    def __init__(self, topo, state, queue_ms, shape=True, progress=None, roce_mtu=None,
                 flow_control=None, bfd=(300, 3), peering=Peering.NUMBERED):
        kw = {"roce_mtu": roce_mtu} if roce_mtu else {}
        if flow_control is not None:
            kw["flow_control"] = flow_control
        super().__init__(topo, state, "routed", None, queue_ms=queue_ms, shape=shape,
                         progress=progress, **kw)
        self.bfd, self.peering = bfd, Peering(peering)
        self.frr = None
        self.paths = None          # routed.fib.PathTracer, once the fabric has converged
        self.ovs_of = {}

    # ----- where things are (what FabricNet asks of an Open vSwitch) -----------

    def switch_netns(self, switch):
        return netns_of(self.switches[switch].pid)

    def sysfs(self, switch):
        return f"/proc/{self.switches[switch].pid}/root/sys"

    def _ns_pid(self, switch):
        return {"net_ns_pid": self.switches[switch].pid}

    def ovses(self):
        return []

    def ovs(self, switch):
        raise RunFailed(f"{switch} is a router (--control bgp): no Open vSwitch carries it")

    def detector(self, session, delay_s, clock):
        """None: a router sees its carrier go itself (no modelled loss of signal)."""
        return None

    def controller_status(self, switches):
        return {}

    # ----- build ---------------------------------------------------------------

    def build(self):
        t0 = self._nodes_and_links()        # no datapath instances: no placement
        t1 = time.monotonic()
        self._configure_hosts()
        self._configure_routers()
        self._shape_switch_ports()
        self.timings["routers_cfg_s"] = time.monotonic() - t1
        t2 = time.monotonic()
        self._start_frr()
        self.timings["frr_start_s"] = time.monotonic() - t2
        self.mn.built = True
        self.timings["build_s"] = time.monotonic() - t0

    def _start_nodes(self):
        self.progress(f"starting {len(self.topo['hosts'])} host and "
                      f"{len(self.topo['switches'])} router namespaces")
        for h in self.topo["hosts"]:
            host = self.mn.addHost(h["name"], cls=FabricHost, ip=None,
                                   env=child_env(self.state.tag))
            self.state.record("process", {"pid": host.pid, "node": h["name"]})
            self.hosts[h["name"]] = host
        for sw in self.topo["switches"]:
            node = self.mn.addHost(sw["name"], cls=FabricRouter, ip=None,
                                   env=child_env(self.state.tag))
            self.state.record("process", {"pid": node.pid, "node": sw["name"]})
            self.switches[sw["name"]] = node

    def _configure_routers(self):
        """Sysctls, loopback, router MAC and /31 of every port, in each router."""
        self.progress(f"configuring {len(self.switches)} routers")
        for sw in self.topo["switches"]:
            bgp = sw["bgp"]
            try:
                with entered(self.switch_netns(sw["name"])), Netlink() as ipr:
                    sysctls = dict(ROUTER_SYSCTLS)
                    if self.peering != Peering.UNNUMBERED:
                        sysctls.update(NO_IPV6)
                    for key, value in sysctls.items():
                        write_sysctl(key, value)
                    # the kernel's own seed (0: its random one) of this switch's hash
                    write_sysctl("net/ipv4/fib_multipath_hash_seed", str(bgp["hash_seed"]))
                    lo = ipr.link_lookup(ifname="lo")[0]
                    ipr.link("set", index=lo, state="up")
                    ipr.addr("add", index=lo, address=bgp["router_id"], prefixlen=32)
                    for p in sw["ports"]:
                        idx = ipr.link_lookup(ifname=p["intf"])[0]
                        ipr.link("set", index=idx, address=bgp["mac"])
                        if self.peering != Peering.UNNUMBERED or p["peer_kind"] == "host":
                            ipr.addr("add", index=idx, address=p["ip"],
                                     prefixlen=p["prefix_len"])
                        ipr.link("set", index=idx, state="up")
            except (OSError, NetlinkError) as e:
                raise RunFailed(f"configuring router {sw['name']}: {e}")

    def _configure_hosts(self):
        """Addresses, routes and rules inside every host (see the module docstring)."""
        self.progress("configuring hosts")
        for h in self.topo["hosts"]:
            host = self.hosts[h["name"]]
            try:
                with entered(netns_of(host.pid)), Netlink() as ipr:
                    for key, value in NO_IPV6.items():
                        write_sysctl(key, value)
                    ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
                    for p in h["ports"]:
                        idx = ipr.link_lookup(ifname=p["port"])[0]
                        ipr.addr("add", index=idx, address=p["ip"], prefixlen=p["prefix_len"])
                        ipr.link("set", index=idx, state="up")
                        if self.shape:
                            self._shape(ipr, idx, p["rate_bps"], switch=False)
                    first = h["ports"][0]
                    ipr.route("add", dst="0.0.0.0/0", gateway=first["gateway"],
                              oif=ipr.link_lookup(ifname=first["port"])[0])
                    add_host_routes(ipr, h)
                    hb.add(ipr, self.topo, h, self.queue_ms, self.frame, self.shape)
            except (OSError, NetlinkError) as e:
                raise RunFailed(f"configuring host {h['name']}: {e}")
            name_intfs(host, h)

    def _start_frr(self):
        routers = {}
        base = self.state.path("frr")
        for sw in self.topo["switches"]:
            node = self.switches[sw["name"]]
            routers[sw["name"]] = Router(sw["name"], node, base,
                                         frrconf.configs(sw, *self.bfd, self.peering))
        self.frr = Frr(routers)
        self.state.record("frr", base)
        self.frr.start(self.progress)
        for name, r in routers.items():
            # ``leaf1 vtysh -c ...`` in the CLI reaches this router's daemons
            self.switches[name].cmd(f"vtysh() {{ command vtysh --vty_socket {r.dir} \"$@\"; }}")

    # ----- the control plane's faults (faults.Injector) -------------------------

    def control_plane_crash(self, switch):
        """``switch``'s control plane dies with its carrier up: its forwarding is
        blackholed (an nftables forward hook dropping everything) and its daemons are
        killed (no goodbye: only BFD or the hold timer can tell its peers).  Returns
        what the log records."""
        nft.apply(self.switch_netns(switch), BLACKHOLE.format(table=self._crash_table()))
        t_blackholed = time.monotonic_ns()
        self.frr.routers[switch].kill()
        return {"t_blackholed_ns": t_blackholed}

    def control_plane_recover(self, switch):
        """Forwarding back, the daemons started again (each waited for)."""
        r = self.frr.routers[switch]
        nft.delete_table(self.switch_netns(switch), self._crash_table(), family="inet")
        for daemon in ("zebra", "bfdd", "bgpd"):
            r.start(daemon)
            r.wait(daemon)
        return {}

    def daemon_restart(self, switch, daemon):
        """Stop ``daemon`` of ``switch`` (SIGTERM: bgpd says goodbye to its peers) and
        start it again; returns when it is back."""
        r = self.frr.routers[switch]
        if daemon not in r.children:
            raise RunFailed(f"{switch} runs no {daemon} (zebra, bfdd, bgpd)")
        r.signal_all(signal.SIGTERM, (daemon,))
        status = r.reap((daemon,))
        t_stopped = time.monotonic_ns()
        r.start(daemon)
        r.wait(daemon)
        return {"exit_status": status.get(daemon), "t_stopped_ns": t_stopped}

    def _crash_table(self):
        return f"fl{self.state.tag}cpcrash"

    # ----- teardown -------------------------------------------------------------

    def teardown(self):
        errors = []
        t0 = time.monotonic()
        if self.frr is not None:
            errors += self.frr.stop()
        return errors + self._nodes_and_links_down(t0, "teardown_frr_s")


def add_host_routes(ipr, host):
    """A host's routes to other islands and its per-NIC tables and rules (the routed plan)."""
    index = {p["port"]: ipr.link_lookup(ifname=p["port"])[0] for p in host["ports"]}
    for r in host.get("routes", ()):
        ipr.route("replace", dst=r["dst"], gateway=r["via"], prefsrc=r["src"],
                  oif=index[r["dev"]])
    for rule in host.get("rules", ()):
        ipr.route("replace", dst="0.0.0.0/0", gateway=rule["via"], oif=index[rule["dev"]],
                  table=rule["table"])
        ipr.rule("add", src=rule["src"], src_len=32, table=rule["table"], priority=rule["table"])
