"""Fault injection into a running Session: links, switches, controller, gray loss.

Model.  A *link* is named by its two nodes, ``leaf1-spine1`` or
``leaf1:spine1`` (the first link between them in the plan).  Its *ends* are interfaces: a switch end is the bridge port's
veth in the root namespace (``fl<tag>l1-e3``), a host end the host's ``eth0``
in its namespace (reached as ``/proc/<pid>/ns/net``).  Every change is a
netlink verb (``system.netlink``), never ``ip``:

* link down/up on side ``a``, ``b`` or ``both``.  Setting one veth end down
  takes the carrier of the other away too, so both switches see the link go;
  ``both`` removes the few hundred microseconds the carrier change needs.
  A host end set down loses its routes (the kernel deletes them): link up
  puts the host's routes through that interface back (multi-plane rails);
* flap: ``count`` x (down for period/2, up for period/2);
* switch crash: every interface of the bridge set down (OVS keeps the bridge,
  its flows and its controller connection: to the rest of the fabric the
  switch is dark, which is what a dead box looks like); recover sets them up;
* controller crash: SIGKILL of the controller process; restart runs the same
  argv again (``Session.controller.start``), the switches reconnect;
* under ``--control bgp`` (``dataplane.routed``): a control-plane crash (the
  router's forwarding blackholed and its FRR daemons killed, carrier up) and
  its recovery, and a daemon restart (``leaf1:bgpd``);
* gray loss: an nftables ``netdev`` table of the run (``fl<tag>loss``) with an
  EGRESS chain on the chosen end dropping ``numgen random mod 100 < P``.
  Egress, because OVS's userspace datapath reads its ports with packet
  sockets, which see a frame before any ingress hook could drop it.  netem,
  the usual tool, is missing on this kernel (docs/platform.md); nft is
  detected and its absence reported.

Every event is logged with CLOCK_MONOTONIC nanoseconds (``t_ns`` before the
change, ``t_done_ns`` after), the clock the traffic engine stamps packets
with, into ``self.events`` and one JSON line each in ``faults.jsonl``.  A
change and its line are made with Ctrl-C held (``signals_masked``): a change
made is a change logged, so the log is the injector's own record of what it
did (a chaos soak checks its report against it).
"""

import json
import os
import time

from emulator.dataplane.links.nftrules import corrupt_rule, loss_rule
from emulator.dataplane.runstate import tag_of_name
from emulator.dataplane.system import nft
from emulator.dataplane.system.netlink import Netlink
from emulator.dataplane.system.signals import signals_masked
from emulator.errors import ConfigError, RunFailed
from emulator.fabric.analysis.survival import surviving_pairs  # noqa: F401 (re-exported)
from emulator.fabric.lossless import storm_end


def nic_of(topo):
    """{bonded host: its NIC switch}."""
    return {h["name"]: h["bond"]["nic"] for h in topo["hosts"] if h.get("bond")}


def link_nodes(text, where="fault"):
    """``a-b`` or ``a:b`` -> (a, b), as named (node names with a '-' are written
    with ':', ``leaf-1:spine-1``)."""
    sep = ":" if ":" in text else "-"
    left, _, right = text.partition(sep)
    if not left or not right or sep in right:
        raise ConfigError(where, f"{text!r} is not a link: use NODE-NODE, e.g. leaf1-spine1")
    return left, right


def parse_link(text, topo, where="fault"):
    """``a-b`` or ``a:b`` -> ((switch name, its port entry), other node name): the
    first link between the two nodes in the plan."""
    left, right = link_nodes(text, where)
    switches = {s["name"]: s for s in topo["switches"]}
    hosts = {h["name"] for h in topo["hosts"]}
    for name in (left, right):
        if name not in switches and name not in hosts:
            raise ConfigError(where, f"unknown node {name!r}")
    # a bonded host's links are its NIC switch's (``h1-leaf1`` = ``h1.nic-leaf1``)
    nic = nic_of(topo)
    left, right = nic.get(left, left), nic.get(right, right)
    sw_name, other = (left, right) if left in switches else (right, left)
    if sw_name not in switches:
        raise ConfigError(where, f"{text!r}: a link has at least one switch end")
    for p in switches[sw_name]["ports"]:
        if p["peer"] == other:
            return (sw_name, p), other
    raise ConfigError(where, f"no link between {left!r} and {right!r}")


# ---- which links a fault can take, and what survives it (pure) --------------------

def fault_links(topo):
    """Every link a fault can cut, as ``(name, ((switch, port entry), other node))``.

    The second item is what ``parse_link`` returns and ``Injector.link_down``
    accepts, so parallel links (``dual-link spines=1``) are told apart by
    their port; the name is ``parse_link``'s spelling (``leaf1-spine1``,
    ``h1-leaf1`` for a bonded host's link) plus ``#k`` for the k-th parallel
    link.  A bonded host's ``bond0`` <-> NIC link is inside the host: not a
    fault target.
    """
    nic_host = {v: k for k, v in nic_of(topo).items()}
    out, seen = [], set()
    for sw in topo["switches"]:
        for p in sw["ports"]:
            if sw["name"] in nic_host:
                if p["peer_kind"] == "host":
                    continue                       # bond0 <-> NIC: inside the host
                base = f"{nic_host[sw['name']]}-{p['peer']}"
            elif p["peer"] in nic_host:
                continue                           # listed from the NIC's side
            elif p["peer_kind"] == "host":
                base = f"{p['peer']}-{sw['name']}"
            elif (p["peer"], p["peer_port"]) in seen:
                continue                           # listed from the other end
            else:
                base = f"{sw['name']}-{p['peer']}"
            seen.add((sw["name"], p["port"]))
            k = sum(1 for n, _ in out if n == base or n.startswith(base + "#"))
            out.append((base if k == 0 else f"{base}#{k + 1}", ((sw["name"], p), p["peer"])))
    return out


class Injector:
    """Injects faults into ``session`` and logs each with CLOCK_MONOTONIC ns."""

    def __init__(self, session, log_path=None, clock=time.monotonic_ns, detect=None,
                 nft_name="loss"):
        """``detect``: None (OVS notices carrier loss itself) or the modeled
        loss-of-signal delay in seconds (``dataplane.links.detect``); ``nft_name``:
        the run's nftables table for random loss is ``fl<tag><nft_name>``."""
        self.nft_name = nft_name
        self._losses = {}              # interface -> its nftables rule
        self.s = session
        self.clock = clock
        self.log_path = log_path or os.path.join(session.dir, "faults.jsonl")
        self.events = []
        self._ipr = {}                 # netns path or None -> its Netlink
        self._nft_table = None
        self._ifindex = {}
        self.detector = None
        if detect is not None:           # the fabric's own: here, or on its servers
            self.detector = session.net.detector(session, detect, clock)

    # ---- plumbing --------------------------------------------------------

    def _ipr_for(self, netns):
        """A netlink socket made inside ``netns`` (a thread enters it: no helper
        process, whose every call a cut would wait on)."""
        if netns not in self._ipr:
            self._ipr[netns] = Netlink(netns)
        return self._ipr[netns]

    def close(self):
        """Undo gray loss and close netlink sockets (links are left as they are)."""
        try:
            self.loss_stop()
        finally:
            for ipr in self._ipr.values():
                ipr.close()
            self._ipr.clear()
            if self.detector is not None:
                self.detector.close()
                self.detector = None

    def _log(self, kind, target, t_ns, **extra):
        ev = {"t_ns": t_ns, "t_done_ns": self.clock(), "kind": kind, "target": target, **extra}
        self.events.append(ev)
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(ev) + "\n")
        return ev

    def ends(self, link, side="both"):
        """[(netns path or None, ifname)] of the chosen side(s) of ``link``."""
        (sw_name, port), other = parse_link(link, self.s.topo) if isinstance(link, str) else link
        a = (self.s.net.switch_netns(sw_name), port["intf"])
        if port["peer_kind"] == "host":
            b = (self._host_netns(other), str(port["peer_port"]))
        else:
            peer = next(s for s in self.s.topo["switches"] if s["name"] == other)
            b = (self.s.net.switch_netns(other),
                 next(p["intf"] for p in peer["ports"] if p["port"] == port["peer_port"]))
        # side a is the first node the user named
        first = link_nodes(link)[0] if isinstance(link, str) else sw_name
        if nic_of(self.s.topo).get(first, first) != sw_name:
            a, b = b, a
        return {"a": [a], "b": [b], "both": [a, b]}[side]

    def _host_netns(self, name):
        """Where host ``name``'s ports are: its namespace, or on several servers a name
        its server resolves (``ClusterNet.netns_of``)."""
        net = self.s.net
        return net.netns_of(name) if hasattr(net, "netns_of") \
            else f"/proc/{net.hosts[name].pid}/ns/net"

    def _remote(self):
        """True when the fabric is on several servers: changes go to their servers."""
        return hasattr(self.s.net, "set_links")

    def _index(self, netns, ifname):
        """The interface's index (looked up once: a lookup is a netlink dump)."""
        key = (netns, ifname)
        if key not in self._ifindex:
            idx = self._ipr_for(netns).link_lookup(ifname=ifname)
            if not idx:
                raise RunFailed(f"interface {ifname} not found")
            self._ifindex[key] = idx[0]
        return self._ifindex[key]

    def _resolved(self, ends):
        """[(netlink socket, index)] of ``ends``, looked up before any change is timed;
        on several servers the ends themselves (their servers look them up)."""
        if self._remote():
            return [("remote", end) for end in ends]
        with signals_masked():      # the netlink event loop would swallow a Ctrl-C
            return [(self._ipr_for(netns), self._index(netns, ifname)) for netns, ifname in ends]

    def _set(self, targets, state):
        """Set each ``_resolved`` end down/up; returns the clock once the first had
        changed (a veth's peer follows its carrier: the link is down from then)."""
        if self._remote():
            self.s.net.set_links([end for _, end in targets], state)
            return self.clock()
        t_first = None
        with signals_masked():      # a Ctrl-C lands once every end is set, not inside
            for ipr, index in targets:      # the netlink event loop (which swallows it)
                ipr.link("set", index=index, state=state)
                if t_first is None:
                    t_first = self.clock()
        return self.clock() if t_first is None else t_first

    # ---- faults ----------------------------------------------------------

    def switch_ports(self, link):
        """[(switch, port number)]: the switch ends of ``link`` (one or two)."""
        (sw_name, port), other = parse_link(link, self.s.topo) if isinstance(link, str) else link
        out = [(sw_name, port["port"])]
        if port["peer_kind"] != "host":
            out.append((other, port["peer_port"]))
        return out

    def _signal(self, ports, down, t_cut):
        """Modeled detection: tell the switches ``detect`` after the carrier went
        (``dataplane.links.detect``); {} without it."""
        if self.detector is None or not ports:
            return {}
        return {"detect": self.detector.notify(ports, down, t_cut)}

    def _cut(self, targets, ports):
        """Set ``targets`` down and signal ``ports``' switches: (t_cut_ns: when the
        first end was down, signal, when the first end went down or None).  On
        several servers each server does both in one request (its switches learn ``detect`` after its own
        cut, not after a round trip more), and the fault's time is when the first
        server set its end down, on this machine's clock (``ClusterNet.cut``)."""
        if self._remote():
            notify = self.detector.delay_s if self.detector is not None else None
            return self.s.net.cut([end for _, end in targets], ports, notify)
        # The link is dead once its first end is down (a veth's peer loses its carrier
        # with it): the switches' loss of signal is timed from then.  Setting the other
        # ends down can take milliseconds more (rtnetlink waits while Open vSwitch
        # reconfigures on the first end's event: 1.1-8.7 ms measured), which timing the
        # detection from the last end used to add to the modelled delay.
        t_first = self._set(targets, "down")
        return t_first, self._signal(ports, True, t_first), None

    def _cut_ends(self, link, side):
        """The ends a cut sets down, and those it leaves up: with the adaptive
        stage (--lb dlb|packet) a cut of both sides keeps the ports whose egress
        rescues frames administratively up; the other end set down takes their
        carrier at once."""
        ends = self.ends(link, side)
        stage = getattr(self.s, "adaptive", None)
        if side != "both" or stage is None or self._remote():
            return ends, []
        keep = stage.rescuing_ends()
        down = [e for e in ends if e not in keep] or ends[-1:]
        return down, [e for e in ends if e not in down]

    def link_down(self, link, side="both"):
        ends, kept = self._cut_ends(link, side)
        targets = self._resolved(ends)
        with signals_masked():          # a change made is a change logged, Ctrl-C or not
            t = self.clock()
            t_cut, signal, first = self._cut(targets, self.switch_ports(link))
            if kept:
                signal["kept_up"] = [ifname for _, ifname in kept]
            return self._log("link_down", link, first or t, side=side, t_cut_ns=t_cut,
                             **signal)

    def _requeue(self, ports):
        """The ECN marker counts the queues of switch ``ports`` afresh (ecnq.reset)."""
        if getattr(self.s, "marker", None) is not None:
            intf = {(sw["name"], p["port"]): p["intf"] for sw in self.s.topo["switches"]
                    for p in sw["ports"]}
            self.s.marker.reset([intf[key] for key in ports if key in intf])

    def link_up(self, link, side="both"):
        t = self.clock()
        ends = self.ends(link, side)
        with signals_masked():
            self._set(self._resolved(ends), "up")
            self._requeue(self.switch_ports(link))
            for netns, ifname in ends:
                if netns and netns.startswith("/proc/") and tag_of_name(ifname) is None:
                    # a host's end (on this machine)
                    self._restore_routes(netns, ifname)
            return self._log("link_up", link, t, side=side,
                             **self._signal(self.switch_ports(link), False, t))

    def _restore_routes(self, netns, ifname):
        """Put back the host routes through ``ifname`` that setting it down removed.

        The kernel deletes every route through an interface set down, so a
        multi-plane host whose rail-1 NIC was cut on its host end would send
        rail-1 addresses through another rail's connected route forever after.
        """
        host = next(h for h in self.s.topo["hosts"]
                    if f"/proc/{self.s.net.hosts[h['name']].pid}/ns/net" == netns)
        ipr = self._ipr_for(netns)
        idx = self._index(netns, ifname)
        with signals_masked():
            for r in host.get("routes", ()):
                if r["dev"] == ifname:
                    ipr.route("replace", dst=r["dst"], prefsrc=r["src"], oif=idx)

    def flap(self, link, count, period_s, side="both", sleep=time.sleep):
        """``count`` down/up cycles of ``period_s`` each; ends up."""
        for _ in range(count):
            self.link_down(link, side)
            sleep(period_s / 2)
            self.link_up(link, side)
            sleep(period_s / 2)

    def _switch_intfs(self, name):
        sw = next((s for s in self.s.topo["switches"] if s["name"] == name), None)
        if sw is None:
            raise ConfigError("fault", f"unknown switch {name!r}")
        return [(self.s.net.switch_netns(name), p["intf"]) for p in sw["ports"]]

    def _neighbour_ports(self, name):
        """[(switch, port)] of the switches facing ``name``: they lose its signal."""
        sw = next(s for s in self.s.topo["switches"] if s["name"] == name)
        return [(p["peer"], p["peer_port"]) for p in sw["ports"] if p["peer_kind"] != "host"]

    def switch_crash(self, name):
        targets = self._resolved(self._switch_intfs(name))
        with signals_masked():
            t = self.clock()
            t_cut, signal, first = self._cut(targets, self._neighbour_ports(name))
            return self._log("switch_crash", name, first or t, t_cut_ns=t_cut, **signal)

    def switch_recover(self, name):
        t = self.clock()
        with signals_masked():
            self._set(self._resolved(self._switch_intfs(name)), "up")
            self._requeue(self._neighbour_ports(name) +
                          [(name, p["port"]) for sw in self.s.topo["switches"]
                           if sw["name"] == name for p in sw["ports"]])
            return self._log("switch_recover", name, t,
                             **self._signal(self._neighbour_ports(name), False, t))

    def controller_kill(self):
        ctl = self.s.controller
        if ctl is None or not ctl.alive():
            raise RunFailed("no running controller of this session to kill")
        with signals_masked():      # the change and its log line together
            t = self.clock()
            ctl.proc.kill()
            return self._log("controller_kill", "controller", t, pid=ctl.proc.pid)

    def controller_restart(self, timeout=30):
        ctl = self.s.controller
        if ctl.alive():
            raise RunFailed("the controller is still running")
        ctl.log.close()                 # start() opens a new stdout log
        t = self.clock()
        # start() truncates the .stdout file: keep the crashed run's output
        stdout = ctl.log_path + ".stdout"
        if os.path.exists(stdout):
            os.replace(stdout, f"{stdout}.{len(self.events)}")
        ctl.start(timeout=timeout)
        return self._log("controller_restart", "controller", t, pid=ctl.proc.pid)

    # ---- a routed fabric's control plane (--control bgp: dataplane.routed) ------

    def _routed(self, what):
        if not hasattr(self.s.net, "control_plane_crash"):
            raise ConfigError("fault", f"{what} is a routed fabric's fault: --control bgp")
        return self.s.net

    def control_plane_crash(self, name):
        net = self._routed("a control-plane crash")
        t = self.clock()
        return self._log("cp_crash", name, t, **net.control_plane_crash(name))

    def control_plane_recover(self, name):
        net = self._routed("a control-plane recovery")
        t = self.clock()
        return self._log("cp_recover", name, t, **net.control_plane_recover(name))

    def daemon_restart(self, target):
        """``target``: ``SWITCH:DAEMON`` (``leaf1:bgpd``)."""
        net = self._routed("a daemon restart")
        switch, _, daemon = target.partition(":")
        t = self.clock()
        return self._log("daemon_restart", target, t, **net.daemon_restart(switch, daemon))

    def pfc_storm(self, target, on):
        """``target`` (fabric.lossless.storm_end) pauses its peer forever, or stops."""
        end, t = storm_end(target, self.s.topo), self.clock()
        self.s.pfc.storm(end, on)
        return self._log("pfc_storm" if on else "pfc_storm_stop", target, t, end=end)

    # ---- gray failure ----------------------------------------------------

    def loss_start(self, link, percent, side="a", keep=False, corrupt=False):
        """Drop ``percent``% of frames leaving the chosen end(s) of ``link`` (nftables).

        ``keep``: add to the links already lossy (a fabric file's ``loss:``
        on several links) instead of replacing them.  ``corrupt``: corrupt the
        RoCEv2 payload of that share instead of dropping (``corrupt_rule``).
        """
        if self._remote():
            raise ConfigError("loss", "gray loss (nftables) runs on one machine only: not "
                                      "with --servers")
        if not 0 < percent <= 100:
            raise ConfigError("fault", f"loss {percent}% is not in (0, 100]")
        if not nft.available():
            raise RunFailed("random loss needs nftables (nft) or netem; neither is here")
        ends = self.ends(link, side)
        if any(tag_of_name(ifname) is None for _, ifname in ends):
            raise ConfigError("fault", "loss is injected on switch ends only")
        with signals_masked():      # the change and its log line together
            t = self.clock()
            if not keep:
                self.loss_stop()
            rule = (corrupt_rule if corrupt else loss_rule)(percent)
            for netns, ifname in ends:
                self._losses[(netns or "", ifname)] = rule
            table = f"fl{self.s.state.tag}{self.nft_name}"
            self._nft_table = table
            # one table per namespace (a datapath instance has its own), each replaced
            # whole in one transaction, never half-written
            for netns in sorted({ns for ns, _ in self._losses}):
                lines = [f"table netdev {table}", f"delete table netdev {table}",
                         f"table netdev {table} {{"]
                for i, ((ns, ifname), rule) in enumerate(sorted(self._losses.items())):
                    if ns != netns:
                        continue
                    lines += [f"  chain c{i} {{",
                              f"    type filter hook egress device \"{ifname}\" priority 0;",
                              f"    {rule}",
                              "  }"]
                lines.append("}")
                nft.apply(netns, "\n".join(lines) + "\n", timeout=10)
            return self._log("corrupt_start" if corrupt else "loss_start", link, t,
                             percent=percent, side=side)

    def loss_stop(self):
        if self._nft_table is None:
            return None
        with signals_masked():      # the change and its log line together
            t = self.clock()
            table, self._nft_table = self._nft_table, None
            spaces = sorted({ns for ns, _ in self._losses})
            self._losses.clear()
            for netns in spaces:
                nft.delete_table(netns, table, timeout=10)
            return self._log("loss_stop", table, t)
