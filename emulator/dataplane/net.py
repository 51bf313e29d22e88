"""Build the fabric on Mininet hosts and Open vSwitch bridges, and tear it down.

Model -> Linux:
  * a host is a Mininet ``Host`` (a shell in its own network namespace); its
    fabric ports keep their names (``eth0``) inside the namespace;
  * a switch is an OVS bridge ``fl<tag><k><i>`` (see ``addressing``), fail
    mode ``secure``, OpenFlow 1.3 + 1.5, datapath id and OpenFlow port numbers
    from the addressing plan, created for all switches of one Open vSwitch in
    ONE ovs-vsctl transaction: the machine's own (layout ``shared``) or the
    run's datapath instances (``instances``, ``fabric.layout``), each in its
    own network namespace with its switches' veth ends;
  * a link is a veth pair made over netlink (``system.netlink``), the host end created
    directly inside the host's namespace; both ends get a TBF shaper at the
    link rate (``shaping``): host ends when the host is configured, switch
    ends once their bridge exists (OVS replaces a port's qdisc when adding it).

Everything is journaled in the run's state directory before it is created
and removed by ``teardown`` (called from ``finally``), so an interrupted build
leaves nothing behind.  Mininet objects are kept so ``--cli`` works.
"""

import json
import time
from contextlib import contextmanager

from mininet.log import setLogLevel
from mininet.net import Mininet

from emulator.dataplane.links import hb, shaping
from emulator.dataplane.links.detect import Detector
from emulator.dataplane.links.ifaces import (
    delete_interfaces,
    link_group,
    quiet_ipv6,
    terminate_nodes,
    tx_checksum_off,
    write_sysctl,
)
from emulator.dataplane.lossless import pfc
from emulator.dataplane.lossless import trim as trimming
from emulator.dataplane.nodes import FabricHost, FabricLink, FabricSwitch
from emulator.dataplane.ovs import instances as ovs_instances
from emulator.dataplane.runstate import child_env
from emulator.dataplane.system import proc
from emulator.dataplane.system.netlink import Netlink, NetlinkError, netns_of, ns_sockets
from emulator.errors import RunFailed
from lab.modes import FlowControl
from traffic.nic.netns import entered

# In an instance's namespace: no IPv6 on switch ports (solicitations hit table-miss)
INSTANCE_SYSCTLS = {"net/ipv6/conf/default/disable_ipv6": 1, "net/ipv6/conf/all/disable_ipv6": 1}

# The userspace datapath reads each port through an AF_PACKET socket whose
# receive buffer is net.core.rmem_default (208 kB, ~100 frames).  When the one
# forwarding thread is descheduled for a few ms on a busy machine, that buffer
# overflows and frames vanish without any counter.  The buffer size is fixed
# when ovs-vswitchd opens the port, so rmem_default is raised only while the
# bridges are created, then restored.
OVS_PORT_RCVBUF = 8 << 20
RMEM_DEFAULT = "/proc/sys/net/core/rmem_default"


@contextmanager
def socket_buffers(size, may_stay=False):
    """``may_stay``: where rmem_default cannot be changed (a network namespace other
    than the machine's first: a server made of a namespace, in the tests), go on
    with it as it is."""
    with open(RMEM_DEFAULT) as f:
        old = f.read().strip()
    if int(old) >= size:
        yield
        return
    try:
        with open(RMEM_DEFAULT, "w") as f:
            f.write(str(size))
    except PermissionError:
        if not may_stay:
            raise
        yield
        return
    try:
        yield
    finally:
        with open(RMEM_DEFAULT, "w") as f:
            f.write(old)


def name_intfs(host, h):
    """Mininet's record of a configured host's interfaces: address, prefix, MAC."""
    for p in h["ports"]:
        intf = host.intf(p["port"])
        intf.ip, intf.prefixLen, intf.mac = p["ip"], p["prefix_len"], p["mac"]


class FabricNet:
    """The running fabric of one run."""

    def __init__(self, topo, state, datapath_type, controller_url,
                 queue_ms=shaping.DEFAULT_QUEUE_MS, shape=True, progress=None,
                 roce_mtu=shaping.ROCE_MTU, placement=(), controller_unix=None,
                 flow_control=FlowControl.NONE, tunnels=(), ssl=None, instance_netns=True,
                 mtu=None, rmem_may_stay=False, cnp_band=False, trim=False):
        """``placement``: [(instance name, [switch names])] (``fabric.layout.place``;
        empty: every switch in the machine's Open vSwitch); instances reach the
        controller at ``controller_unix``, a unix socket path.  On one server of
        several (``dataplane.cluster.worker``): ``tunnels``, this server's ends of the
        crossing links (``fabric.cluster.tunnels``), ``ssl`` (key, certificate, CA
        certificate paths) for an ``ssl:`` controller, and ``instance_netns`` False
        (the instance's daemon in this namespace, where the controller's address is
        routed), ``mtu`` for every interface when the tunnels carry less than
        the RoCE MTU's (``fabric.cluster.check_mtu``); ``cnp_band``: CNPs ahead of
        the data at every lossy port (``links.shaping.add_cnp_band``, under DCQCN);
        ``trim``: a lossy switch port's trimming classes (``lossless.trim.apply_tree``,
        whose class ahead of data takes the CNPs too) instead."""
        self.topo = topo
        self.state = state
        self.datapath_type = datapath_type
        self.controller_url = controller_url
        self.queue_ms = queue_ms
        self.shape = shape
        self.mtu = mtu or shaping.link_mtu(roce_mtu)   # every interface of the fabric
        self.frame = self.mtu + 14                 # the largest frame a shaper must pass
        self.progress = progress or (lambda msg: None)
        self.mn = None
        self.hosts = {}
        self.switches = {}
        self.bridges = [sw["bridge"] for sw in topo["switches"]]
        self.timings = {}
        self.placement = [(name, list(group)) for name, group in placement]
        self.controller_unix = controller_unix
        self.flow_control = flow_control           # none | pfc: classes and a pause gate
        self.cnp_band = cnp_band
        self.trim = trim                           # switch ports: two classes (lossless.trim)
        self.pfc = None                            # its running PFC (dataplane.lossless.pfc_run)
        self.tunnels = list(tunnels)
        self.ssl = ssl
        self.instance_netns = instance_netns
        self.rmem_may_stay = rmem_may_stay
        self.instances = []
        self.ovs_of = {sw["name"]: ovs_instances.SYSTEM for sw in topo["switches"]}

    # ----- build ---------------------------------------------------------

    def build(self):
        t0 = self._nodes_and_links()
        # Hosts first: their ends are up (carrier on the switch ends) before any
        # bridge exists, so every switch connects with its host ports live.  The
        # other order made the first leaves connect with host ports down, and their
        # PORT_STATUS "up", queued behind 72 serial installs, recomputed and pushed
        # the whole fabric again (20 s of a 256-host start).
        t2 = time.monotonic()
        self._configure_hosts()
        self.timings["hosts_cfg_s"] = time.monotonic() - t2
        t1 = time.monotonic()
        self._make_bridges()
        self._shape_switch_ports()
        self.timings["bridges_s"] = time.monotonic() - t1
        self.mn.built = True
        self.timings["build_s"] = time.monotonic() - t0

    def _nodes_and_links(self):
        """Mininet without a topology of its own, the datapath instances, the nodes
        and the links between them, timed; when it began."""
        t0 = time.monotonic()
        setLogLevel("error")
        self.mn = Mininet(topo=None, build=False, controller=None, autoSetMacs=False,
                          autoStaticArp=False, inNamespace=False)
        self._start_instances()
        self._start_nodes()
        self.timings["nodes_s"] = time.monotonic() - t0
        self._make_links()
        self.timings["links_s"] = time.monotonic() - t0 - self.timings["nodes_s"]
        return t0

    def _start_instances(self):
        if not self.placement:
            return
        self.progress(f"starting {len(self.placement)} Open vSwitch instances")
        # each is listed before it starts: a failure half-way leaves the started
        # ones (and the one that failed) to teardown
        for name, group in self.placement:
            inst = ovs_instances.Instance(name, group, self.state.dir,
                                          child_env(self.state.tag),
                                          own_netns=self.instance_netns)
            self.state.record("instance", {"name": name, "dir": inst.dir})
            self.instances.append(inst)
            inst.start(INSTANCE_SYSCTLS)
            for sw in group:
                self.ovs_of[sw] = inst

    def ovs(self, switch):
        """The Open vSwitch (``instances.Ovs``) that carries ``switch``."""
        return self.ovs_of[switch]

    def switch_netns(self, switch):
        """Path of the network namespace of ``switch``'s ports (None: this one)."""
        return self.ovs_of[switch].netns

    def sysfs(self, switch):
        """Where ``switch``'s ports' /sys/class/net is (its instance's own sysfs)."""
        pid = self.ovs_of[switch].holder_pid
        return "/sys" if pid is None else f"/proc/{pid}/root/sys"

    def intf_netns(self):
        """{switch interface: its namespace path} for the ports in a datapath
        instance's namespace (none for the machine's own)."""
        return {p["intf"]: self.switch_netns(sw["name"]) for sw, p in self._switch_ports()
                if self.switch_netns(sw["name"])}

    def ovses(self):
        """The Open vSwitches (``instances.Ovs``) carrying this fabric, each once."""
        return list(dict.fromkeys(self.ovs_of.values()))

    def _start_nodes(self):
        self.progress(f"starting {len(self.topo['hosts'])} host namespaces")
        for h in self.topo["hosts"]:
            host = self.mn.addHost(h["name"], cls=FabricHost, ip=None,
                                   env=child_env(self.state.tag))
            self.state.record("process", {"pid": host.pid, "node": h["name"]})
            self.hosts[h["name"]] = host
        for sw in self.topo["switches"]:
            node = self.mn.addSwitch(sw["name"], cls=FabricSwitch, bridge=sw["bridge"],
                                     env=child_env(self.state.tag),
                                     ovs=self.ovs_of[sw["name"]],
                                     dpid=sw["dpid_hex"], failMode="secure",
                                     datapath="user" if self.datapath_type == "netdev"
                                     else "kernel")
            self.state.record("process", {"pid": node.pid, "node": sw["name"]})
            self.switches[sw["name"]] = node

    def _switch_ports(self):
        """(switch, port entry) for every switch port, from the plan."""
        for sw in self.topo["switches"]:
            for p in sw["ports"]:
                yield sw, p

    def _make_links(self):
        self.progress(f"creating {len(self.topo['links'])} links")
        intf_of = {(sw["name"], p["port"]): p["intf"] for sw, p in self._switch_ports()}
        host_port = {(h["name"], p["port"]): p for h in self.topo["hosts"] for p in h["ports"]}
        group = link_group(self.state.tag)     # teardown deletes them all in one request
        with Netlink() as ipr, ns_sockets() as sock:
            for link in self.topo["links"]:
                ends = [link["a"].split(":"), link["b"].split(":")]
                # Put the host end (if any) second: it is created in the host's netns.
                if ends[0][0] in self.hosts:
                    ends.reverse()
                (n1, p1), (n2, p2) = ends
                name1 = intf_of[(n1, int(p1[3:]))]
                # a switch end is made in its instance's namespace, if it has one
                where1 = self._ns_pid(n1)
                if n2 in self.hosts:
                    name2 = p2
                    peer = {"ifname": name2, "net_ns_pid": self.hosts[n2].pid,
                            "address": host_port[(n2, p2)]["mac"], "mtu": self.mtu}
                else:
                    name2 = intf_of[(n2, int(p2[3:]))]
                    peer = {"ifname": name2, "mtu": self.mtu, "group": group,
                            **self._ns_pid(n2)}
                self.state.record("interface", name1)
                try:
                    ipr.link("add", ifname=name1, kind="veth", mtu=self.mtu, group=group,
                             peer=peer, **where1)
                except NetlinkError as e:
                    raise RunFailed(f"creating veth {name1} <-> {n2}:{name2}: {e.args[1]}")
                node2 = self.hosts.get(n2) or self.switches[n2]
                self.mn.addLink(self.switches[n1], node2, port1=int(p1[3:]),
                                port2=int(p2[3:]) if p2.startswith("eth") else 0,  # bond0
                                intfName1=name1, intfName2=name2,
                                cls=FabricLink, up=None)
                for node, name in ((n1, name1), (n2, name2)):
                    if node in self.hosts:
                        continue
                    ns = self.switch_netns(node)
                    if ns is None:                 # an instance's namespace has it off
                        quiet_ipv6(name)
                    s = sock(ns)
                    s.link("set", index=s.link_lookup(ifname=name)[0], state="up")
            for t in self.tunnels:
                self._make_tunnel(ipr, sock, t, group)

    def _make_tunnel(self, ipr, sock, t, group):
        """One end of a crossing link: a VXLAN device made here (its UDP socket is in
        this namespace, on the underlay) and put in its switch's namespace."""
        self.state.record("interface", t["intf"])
        try:
            ipr.link("add", ifname=t["intf"], kind="vxlan", vxlan_id=t["vni"],
                     vxlan_local=t["local"], vxlan_group=t["remote"],
                     vxlan_port=t.get("dstport", 4789), vxlan_learning=0, mtu=self.mtu,
                     group=group, **self._ns_pid(t["switch"]))
        except NetlinkError as e:
            raise RunFailed(f"creating the VXLAN tunnel {t['intf']} ({t['switch']} -> "
                            f"{t['peer']}, {t['local']} -> {t['remote']}): {e.args[1]}")
        ns = self.switch_netns(t["switch"])
        s = sock(ns)
        idx = s.link_lookup(ifname=t["intf"])[0]
        if ns is None:
            quiet_ipv6(t["intf"])
        s.link("set", index=idx, state="up")

    def _ns_pid(self, switch):
        """Netlink attributes that create an interface in ``switch``'s namespace."""
        pid = self.ovs_of[switch].holder_pid
        return {"net_ns_pid": pid} if pid else {}

    def _make_bridges(self):
        where = f"{len(self.instances)} instances" if self.instances else "one instance"
        self.progress(f"creating {len(self.bridges)} Open vSwitch bridges "
                      f"(datapath {self.datapath_type}, {where})")
        by_ovs = {}
        for sw in self.topo["switches"]:
            by_ovs.setdefault(self.ovs_of[sw["name"]], []).append(sw)
        with socket_buffers(OVS_PORT_RCVBUF, self.rmem_may_stay):
            for ovs, switches in by_ovs.items():
                url = self.controller_url
                if ovs is not ovs_instances.SYSTEM and self.controller_unix:
                    url = f"unix:{ovs.controller_link(self.controller_unix)}"
                args = []
                if self.ssl and ovs is not ovs_instances.SYSTEM:
                    args += ["--", "set-ssl", *self.ssl]
                for sw in switches:
                    args += self._bridge_args(sw, url)
                ovs.vsctl(*args[1:], timeout=120)

    def _bridge_args(self, sw, controller_url):
        """ovs-vsctl commands ('--' separated) that make ``sw``'s bridge."""
        br = sw["bridge"]
        self.state.record("bridge", br)
        args = ["--", "add-br", br,
                "--", "set", "bridge", br, f"datapath_type={self.datapath_type}",
                "fail_mode=secure", "protocols=OpenFlow13,OpenFlow15",
                f"other-config:datapath-id={sw['dpid_hex']}",
                "other-config:disable-in-band=true",
                f"external-ids:fabric-lab-run={self.state.tag}"]
        for p in sw["ports"]:
            args += ["--", "add-port", br, p["intf"],
                     "--", "set", "interface", p["intf"], f"ofport_request={p['port']}"]
        if controller_url:
            # set-controller creates the Controller row; the 'set controller <br>'
            # form addresses a bridge's controller by bridge name.
            args += ["--", "set-controller", br, controller_url,
                     "--", "set", "controller", br, "max_backoff=1000",
                     "inactivity_probe=15000"]
        return args

    def _shape_switch_ports(self):
        """Shape every switch port, once its bridge exists.

        ovs-vswitchd applies a port's QoS (none here) by replacing whatever root
        qdisc it finds when it adds the port, so a shaper installed earlier is
        gone once ovs-vsctl returns (a 5 Mbit/s uplink carried 7.6 Mbit/s); OVS
        leaves the qdisc alone afterwards.
        """
        if not self.shape:
            return
        with ns_sockets() as sock:
            for sw, p in self._switch_ports():
                ipr = sock(self.switch_netns(sw["name"]))
                idx = ipr.link_lookup(ifname=p["intf"])[0]
                self._shape(ipr, idx, p["rate_bps"], switch=True)

    def _shape(self, ipr, idx, rate_bps, switch):
        """A TBF at the link rate; with PFC, classes and the lossless gate under it;
        with trimming, a switch port's strict-priority class ahead of data."""
        if self.flow_control == FlowControl.NONE:
            if switch and self.trim:    # its class ahead of data carries CNPs too (small)
                trimming.apply_tree(ipr, idx, shaping.tbf_params(
                    rate_bps, self.queue_ms, self.frame), self.frame)
                return
            shaping.apply(ipr, idx, rate_bps, self.queue_ms, self.frame, self.cnp_band)
            return
        pfc.apply_tree(ipr, idx, rate_bps,
                       shaping.tbf_params(rate_bps, self.queue_ms, self.frame)["limit"],
                       self.frame, pfc.SWITCH_QUEUE if switch else pfc.HOST_QUEUE)

    def _configure_hosts(self):
        """Addresses, MTU-safe offloads and quiet IPv6 inside every host namespace.

        All from this process: its thread enters each host's namespace (``setns``),
        so the netlink socket, the sysctl files and the ethtool ioctl are that
        namespace's; no process per host (a shell per host was 12 s of a 256-host
        build on 2 cores)."""
        self.progress("configuring hosts")
        userspace = self.datapath_type == "netdev"
        for h in self.topo["hosts"]:
            host = self.hosts[h["name"]]
            try:
                with entered(netns_of(host.pid)), Netlink() as ipr:
                    # no IPv6 in the host: its solicitations would only hit table-miss
                    for conf in ("all", "default"):
                        write_sysctl(f"net/ipv6/conf/{conf}/disable_ipv6", "1")
                    ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
                    for p in h["ports"]:
                        idx = ipr.link_lookup(ifname=p["port"])[0]
                        if userspace:
                            # Userspace OVS forwards the partial checksum as-is:
                            # the host finishes it (ethtool -K PORT tx off)
                            tx_checksum_off(p["port"])
                        ipr.addr("add", index=idx, address=p["ip"],
                                 prefixlen=p["prefix_len"])
                        ipr.link("set", index=idx, state="up")
                        if self.shape:
                            self._shape(ipr, idx, p["rate_bps"], switch=False)
                    for r in h.get("routes", ()):
                        # rail-only: another rail's address leaves through that rail's NIC
                        ipr.route("add", dst=r["dst"], prefsrc=r["src"],
                                  oif=ipr.link_lookup(ifname=r["dev"])[0])
                    hb.add(ipr, self.topo, h, self.queue_ms, self.frame, self.shape)  # rail-only
            except (OSError, NetlinkError) as e:
                raise RunFailed(f"configuring host {h['name']}: {e}")
            name_intfs(host, h)

    # ----- run-time helpers ---------------------------------------------

    def host(self, name):
        return self.hosts[name]

    def detector(self, session, delay_s, clock):   # modeled loss of signal (links.detect)
        return Detector(session, delay_s, clock=clock)

    def run_in(self, host, argv, timeout=30, check=True):
        """Run ``argv`` in ``host``'s namespace (checked, with timeout)."""
        return proc.run(["mnexec", "-a", str(self.hosts[host].pid), *argv],
                        timeout=timeout, check=check)

    def popen_in(self, host, argv, **kwargs):
        """``argv`` started in ``host``'s namespace (Mininet's ``popen``: stdout and
        stderr piped unless given), as a ``system.proc.Child``."""
        return proc.Child(self.hosts[host].popen(argv, **kwargs), f"{argv[0]} in {host}")

    def cnp_band_packets(self):
        """CNPs that went through the switch ports' CNP bands (0 without them; with
        trimming a switch port's class ahead of data carries CNPs among other frames)."""
        if not self.cnp_band or self.trim:
            return 0
        total = 0
        with ns_sockets() as sock:
            for sw, p in self._switch_ports():
                ipr = sock(self.switch_netns(sw["name"]))
                total += shaping.cnp_band_packets(ipr, ipr.link_lookup(ifname=p["intf"])[0])
        return total

    def intf_counters(self):
        """{intf: (tx_bytes, rx_bytes, tx_packets)} for every switch interface."""
        out = {}
        for sw, p in self._switch_ports():
            base = f"{self.sysfs(sw['name'])}/class/net/{p['intf']}/statistics/"
            try:
                with open(base + "tx_bytes") as f1, open(base + "rx_bytes") as f2, \
                        open(base + "tx_packets") as f3:
                    out[p["intf"]] = (int(f1.read()), int(f2.read()), int(f3.read()))
            except OSError:
                out[p["intf"]] = None
        return out

    def controller_status(self, switches):
        """What each of ``switches``' Open vSwitch says of its controller connection:
        {name: "connected" or its rconn state and last error}, for a message."""
        out = {}
        for ovs in self.ovses():
            mine = {sw["bridge"]: sw["name"] for sw in self.topo["switches"]
                    if sw["name"] in switches and self.ovs_of[sw["name"]] is ovs}
            if not mine:
                continue
            rows = json.loads(ovs.vsctl("--format=json", "--columns=_uuid,is_connected,status",
                                        "list", "controller", timeout=10))["data"]
            status = {uuid: (up, dict(st[1])) for (_, uuid), up, st in rows}
            bridges = json.loads(ovs.vsctl("--format=json", "--columns=name,controller",
                                           "list", "bridge", timeout=10))["data"]
            for name, ctl in bridges:
                if name in mine:
                    up, st = status.get(ctl[1], (False, {})) if ctl[0] == "uuid" else (
                        False, {"state": "no controller set"})
                    out[mine[name]] = "connected" if up else ", ".join(
                        f"{k} {v}" for k, v in sorted(st.items())) or "not connected"
        return out

    # ----- teardown -------------------------------------------------------

    def teardown(self):
        """Remove everything this run created; safe to call on a partial build."""
        errors = []
        t0 = time.monotonic()
        shared = [sw["bridge"] for sw in self.topo["switches"]
                  if self.ovs_of[sw["name"]] is ovs_instances.SYSTEM]
        try:
            args = []
            for br in shared:
                args += ["--", "--if-exists", "del-br", br]
            if args:
                ovs_instances.SYSTEM.vsctl(*args[1:], timeout=120)
        except RunFailed as e:
            errors.append(str(e))
        # an instance goes whole: its daemons, then its namespace with its veth ends
        errors += ovs_instances.stop_all(self.instances)
        return errors + self._nodes_and_links_down(t0, "teardown_bridges_s")

    def _nodes_and_links_down(self, t0, switches_key):
        """The teardown's last steps, the same for every fabric: stop the nodes, delete
        the run's interfaces; the timings, the switches' own step (since ``t0``) named
        ``switches_key``.  Its errors."""
        t1 = time.monotonic()
        errors = terminate_nodes(list(self.hosts.values()) + list(self.switches.values()))
        t2 = time.monotonic()
        errors += delete_interfaces(self.state.tag)
        t3 = time.monotonic()
        self.timings.update({switches_key: t1 - t0, "teardown_nodes_s": t2 - t1,
                             "teardown_links_s": t3 - t2, "teardown_s": t3 - t0})
        return errors
