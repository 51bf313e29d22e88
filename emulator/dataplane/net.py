"""Build the fabric on Mininet hosts and Open vSwitch bridges, and tear it down.

Model -> Linux:
  * a host is a Mininet ``Host`` (a shell in its own network namespace); its
    fabric ports keep their names (``eth0``) inside the namespace;
  * a switch is an OVS bridge ``fl<tag><k><i>`` (see ``addressing``), fail
    mode ``secure``, OpenFlow 1.3 + 1.5, datapath id and OpenFlow port numbers
    from the addressing plan, created for all switches in ONE ovs-vsctl
    transaction;
  * a link is a veth pair made over netlink (pyroute2), the host end created
    directly inside the host's namespace; both ends get a TBF shaper at the
    link rate (``shaping``): host ends when the host is configured, switch
    ends once their bridge exists (OVS replaces a port's qdisc when adding it).

Everything is journaled in the run's state directory before it is created
and removed by ``teardown`` (called from ``finally``), so an interrupted build
leaves nothing behind.  Mininet objects are kept so ``--cli`` works.
"""

import ctypes
import fcntl
import os
import socket
import struct
import time
from contextlib import contextmanager

from mininet.link import Link
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host, OVSSwitch
from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from emulator.dataplane import proc
from emulator.dataplane import shaping
from emulator.dataplane.shaping import DEFAULT_QUEUE_MS
from emulator.errors import RunFailed
from emulator.dataplane.runstate import child_env, tag_of_name
from traffic.netns import entered


# The userspace datapath reads each port through an AF_PACKET socket whose
# receive buffer is net.core.rmem_default (208 kB, ~100 frames).  When the one
# forwarding thread is descheduled for a few ms on a busy machine, that buffer
# overflows and frames vanish without any counter.  The buffer size is fixed
# when ovs-vswitchd opens the port, so rmem_default is raised only while the
# bridges are created, then restored.
OVS_PORT_RCVBUF = 8 << 20
RMEM_DEFAULT = "/proc/sys/net/core/rmem_default"


@contextmanager
def socket_buffers(size):
    with open(RMEM_DEFAULT) as f:
        old = f.read().strip()
    if int(old) >= size:
        yield
        return
    with open(RMEM_DEFAULT, "w") as f:
        f.write(str(size))
    try:
        yield
    finally:
        with open(RMEM_DEFAULT, "w") as f:
            f.write(old)


class _Tagged:
    """A Mininet node whose processes (its shell, ``popen``) carry the run's tag.

    Mininet starts them with ``Popen`` and our environment; ``env`` given to
    the node is passed to each instead (the tag lets ``emulator clean`` find them).
    """

    def __init__(self, name, env=None, **params):
        self._env = env
        super().__init__(name, **params)

    def _popen(self, cmd, **params):
        if self._env is not None:
            params.setdefault("env", self._env)
        return super()._popen(cmd, **params)


class FabricHost(_Tagged, Host):
    """A Mininet host whose processes carry the run's tag."""


class FabricSwitch(_Tagged, OVSSwitch):
    """An OVS bridge configured by ``FabricNet`` in one checked transaction.

    Mininet's own start/stop run unchecked ovs-vsctl commands per switch; here
    they are no-ops and the node keeps its fabric name (``leaf1``) for the CLI
    while the bridge has the run's name (``self.bridge``).
    """

    def __init__(self, name, bridge=None, **params):
        super().__init__(name, **params)
        self.bridge = bridge

    def start(self, controllers):
        pass

    def stop(self, deleteIntfs=True):
        pass

    def dpctl(self, *args):
        return self.cmd("ovs-ofctl", "-O", "OpenFlow15", args[0], self.bridge, *args[1:])


class FabricLink(Link):
    """A Mininet link whose veth pair was already made over netlink."""

    @staticmethod
    def makeIntfPair(*args, **kwargs):
        pass


class FabricNet:
    """The running fabric of one run."""

    def __init__(self, topo, state, datapath_type, controller_url,
                 queue_ms=DEFAULT_QUEUE_MS, shape=True, progress=None,
                 roce_mtu=shaping.ROCE_MTU):
        self.topo = topo
        self.state = state
        self.datapath_type = datapath_type
        self.controller_url = controller_url
        self.queue_ms = queue_ms
        self.shape = shape
        self.mtu = shaping.link_mtu(roce_mtu)      # every interface of the fabric
        self.frame = self.mtu + 14                 # the largest frame a shaper must pass
        self.progress = progress or (lambda msg: None)
        self.mn = None
        self.hosts = {}
        self.switches = {}
        self.bridges = [sw["bridge"] for sw in topo["switches"]]
        self.timings = {}

    # ----- build ---------------------------------------------------------

    def build(self):
        t0 = time.monotonic()
        setLogLevel("error")
        self.mn = Mininet(topo=None, build=False, controller=None, autoSetMacs=False,
                          autoStaticArp=False, inNamespace=False)
        self._start_nodes()
        self.timings["nodes_s"] = time.monotonic() - t0
        self._make_links()
        self.timings["links_s"] = time.monotonic() - t0 - self.timings["nodes_s"]
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
        with IPRoute() as ipr:
            for link in self.topo["links"]:
                ends = [link["a"].split(":"), link["b"].split(":")]
                # Put the host end (if any) second: it is created in the host's netns.
                if ends[0][0] in self.hosts:
                    ends.reverse()
                (n1, p1), (n2, p2) = ends
                name1 = intf_of[(n1, int(p1[3:]))]
                if n2 in self.hosts:
                    name2 = p2
                    peer = {"ifname": name2, "net_ns_pid": self.hosts[n2].pid,
                            "address": host_port[(n2, p2)]["mac"], "mtu": self.mtu}
                else:
                    name2 = intf_of[(n2, int(p2[3:]))]
                    peer = {"ifname": name2, "mtu": self.mtu, "group": group}
                self.state.record("interface", name1)
                try:
                    ipr.link("add", ifname=name1, kind="veth", mtu=self.mtu, group=group,
                             peer=peer)
                except NetlinkError as e:
                    raise RunFailed(f"creating veth {name1} <-> {n2}:{name2}: {e.args[1]}")
                quiet_ipv6(name1)
                if n2 not in self.hosts:
                    quiet_ipv6(name2)
                node2 = self.hosts.get(n2) or self.switches[n2]
                self.mn.addLink(self.switches[n1], node2, port1=int(p1[3:]),
                                port2=int(p2[3:]) if p2.startswith("eth") else 0,  # bond0
                                intfName1=name1, intfName2=name2,
                                cls=FabricLink, up=None)
                ipr.link("set", index=ipr.link_lookup(ifname=name1)[0], state="up")
                if n2 not in self.hosts:
                    ipr.link("set", index=ipr.link_lookup(ifname=name2)[0], state="up")

    def _make_bridges(self):
        self.progress(f"creating {len(self.bridges)} Open vSwitch bridges "
                      f"(datapath {self.datapath_type})")
        args = []
        for sw in self.topo["switches"]:
            br = sw["bridge"]
            self.state.record("bridge", br)
            args += ["--", "add-br", br,
                     "--", "set", "bridge", br, f"datapath_type={self.datapath_type}",
                     "fail_mode=secure", "protocols=OpenFlow13,OpenFlow15",
                     f"other-config:datapath-id={sw['dpid_hex']}",
                     "other-config:disable-in-band=true",
                     f"external-ids:fabric-lab-run={self.state.tag}"]
            for p in sw["ports"]:
                args += ["--", "add-port", br, p["intf"],
                         "--", "set", "interface", p["intf"], f"ofport_request={p['port']}"]
            if self.controller_url:
                args += ["--", "set-controller", br, self.controller_url,
                         "--", "set", "controller", br, "max_backoff=1000",
                         "inactivity_probe=15000"]
        # set-controller creates the Controller row; the 'set controller <br>' form
        # addresses a bridge's controller by bridge name.
        with socket_buffers(OVS_PORT_RCVBUF):
            proc.ovs_vsctl(*args[1:], timeout=120)

    def _shape_switch_ports(self):
        """Shape every switch port, once its bridge exists.

        ovs-vswitchd applies a port's QoS (none here) by replacing whatever root
        qdisc it finds when it adds the port, so a shaper installed earlier is
        gone once ovs-vsctl returns (a 5 Mbit/s uplink carried 7.6 Mbit/s); OVS
        leaves the qdisc alone afterwards.
        """
        if not self.shape:
            return
        with IPRoute() as ipr:
            for _, p in self._switch_ports():
                idx = ipr.link_lookup(ifname=p["intf"])[0]
                shaping.apply(ipr, idx, p["rate_bps"], self.queue_ms, self.frame)

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
                with entered(f"/proc/{host.pid}/ns/net"), IPRoute() as ipr:
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
                            shaping.apply(ipr, idx, p["rate_bps"], self.queue_ms, self.frame)
                    for r in h.get("routes", ()):
                        # multi-plane: another rail's address leaves through that rail's NIC
                        ipr.route("add", dst=r["dst"], prefsrc=r["src"],
                                  oif=ipr.link_lookup(ifname=r["dev"])[0])
            except (OSError, NetlinkError) as e:
                raise RunFailed(f"configuring host {h['name']}: {e}")
            intfs = {p["port"]: host.intf(p["port"]) for p in h["ports"]}
            for p in h["ports"]:
                intfs[p["port"]].ip, intfs[p["port"]].prefixLen = p["ip"], p["prefix_len"]
                intfs[p["port"]].mac = p["mac"]

    # ----- run-time helpers ---------------------------------------------

    def host(self, name):
        return self.hosts[name]

    def run_in(self, host, argv, timeout=30, check=True):
        """Run ``argv`` in ``host``'s namespace (checked, with timeout)."""
        return proc.run(["mnexec", "-a", str(self.hosts[host].pid), *argv],
                        timeout=timeout, check=check)

    def popen_in(self, host, argv, **kwargs):
        return self.hosts[host].popen(argv, **kwargs)

    def intf_counters(self):
        """{intf: (tx_bytes, rx_bytes, tx_packets)} for every switch interface."""
        out = {}
        for _, p in self._switch_ports():
            base = f"/sys/class/net/{p['intf']}/statistics/"
            try:
                with open(base + "tx_bytes") as f1, open(base + "rx_bytes") as f2, \
                        open(base + "tx_packets") as f3:
                    out[p["intf"]] = (int(f1.read()), int(f2.read()), int(f3.read()))
            except OSError:
                out[p["intf"]] = None
        return out

    def controllers_connected(self):
        """Bridges whose controller connection is up."""
        text = proc.ovs_vsctl("--format=csv", "--columns=_uuid,is_connected",
                              "list", "controller", timeout=10)
        connected = sum(1 for line in text.splitlines()[1:] if line.endswith("true"))
        return connected

    # ----- teardown -------------------------------------------------------

    def teardown(self):
        """Remove everything this run created; safe to call on a partial build."""
        errors = []
        t0 = time.monotonic()
        try:
            args = []
            for br in self.bridges:
                args += ["--", "--if-exists", "del-br", br]
            proc.ovs_vsctl(*args[1:], timeout=120)
        except RunFailed as e:
            errors.append(str(e))
        t1 = time.monotonic()
        errors += terminate_nodes(list(self.hosts.values()) + list(self.switches.values()))
        t2 = time.monotonic()
        errors += delete_interfaces(self.state.tag)
        t3 = time.monotonic()
        self.timings.update({"teardown_bridges_s": t1 - t0, "teardown_nodes_s": t2 - t1,
                             "teardown_links_s": t3 - t2, "teardown_s": t3 - t0})
        return errors


SIOCETHTOOL, ETHTOOL_STXCSUM = 0x8946, 0x17


def tx_checksum_off(ifname):
    """``ethtool -K IFNAME tx off`` (its ioctl: every TX checksum feature off) in the
    calling thread's network namespace; OSError if the kernel refuses."""
    value = ctypes.create_string_buffer(struct.pack("II", ETHTOOL_STXCSUM, 0))
    ifreq = struct.pack("16sP", ifname.encode(), ctypes.addressof(value)).ljust(40, b"\0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)


def write_sysctl(key, value):
    """Set ``/proc/sys/KEY`` as the calling thread's namespace sees it (net/... keys
    are per namespace); a key compiled out of the kernel (IPv6) is skipped."""
    try:
        with open(f"/proc/sys/{key}", "w") as f:
            f.write(value)
    except FileNotFoundError:
        pass


def quiet_ipv6(ifname):
    """No IPv6 on a switch port: its router solicitations would only hit table-miss."""
    try:
        with open(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6", "w") as f:
            f.write("1")
    except FileNotFoundError:     # IPv6 compiled out: nothing to quiet
        pass


def link_group(tag):
    """The interface group (IFLA_GROUP) of run ``tag``'s root-namespace veths: "FL"
    and the tag, so one RTM_DELLINK removes them all (``delete_interfaces``)."""
    return 0x464C0000 | int(tag, 16)


def terminate_nodes(nodes):
    """End the Mininet nodes' shells: SIGHUP to all first, then reap each (one at a
    time, each shell's exit was waited for before the next was signalled)."""
    import signal
    errors = []
    for node in nodes:
        try:
            node.unmountPrivateDirs()
            if node.shell is not None and node.shell.poll() is None:
                os.killpg(node.shell.pid, signal.SIGHUP)
        except ProcessLookupError:
            pass
        except Exception as e:    # a half-started node: keep going
            errors.append(f"{node.name}: {e}")
    for node in nodes:
        try:
            node.cleanup()        # closes its pty and waits for its shell
        except Exception as e:
            errors.append(f"{node.name}: {e}")
    return errors


def delete_interfaces(tag):
    """Delete every root-namespace interface named for run ``tag``.

    Its veths carry the run's group (``link_group``): when every interface of that
    group is named for the run, one request deletes them all, in one batch of the
    kernel's (one by one, each paid its own RCU grace period: 768 links took
    ~12 s on 2 cores).  Whatever is left (a group shared with a foreign
    interface, names made by other modules) goes one at a time."""
    errors = []
    group = link_group(tag)
    with IPRoute() as ipr:
        links = [(link.get_attr("IFLA_IFNAME"), link.get_attr("IFLA_GROUP"), link["index"])
                 for link in ipr.get_links()]
        grouped = [name for name, g, _ in links if g == group]
        if grouped and all(tag_of_name(name) == tag for name in grouped):
            try:
                ipr.link("del", group=group)
            except NetlinkError as e:
                errors.append(f"delete interface group {group:#x}: {e}")
            links = [(link.get_attr("IFLA_IFNAME"), link.get_attr("IFLA_GROUP"),
                      link["index"]) for link in ipr.get_links()]
        for name, _, index in links:
            if tag_of_name(name) == tag:
                try:
                    ipr.link("del", index=index)
                except NetlinkError as e:
                    if e.code != 19:   # ENODEV: its veth peer went first
                        errors.append(f"delete {name}: {e}")
    return errors
