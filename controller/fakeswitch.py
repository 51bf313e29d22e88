"""A fake OpenFlow switch and fabric for unit tests (Faucet's FakeOFTable idea).

``FakeSwitch`` applies abstract messages (controller.messages) to a flow table
and a group table with OpenFlow semantics (strict modify/delete, deleting a
group deletes the flows that use it) and answers what a packet would do.
A packet is a dict of os-ken field names (``in_port``, ``eth_type``,
``ipv4_src``, ``udp_src``, ``arp_tpa`` ...); a flow matches when every match
field equals the packet's (a masked MAC field, (value, mask), under its mask). ``FakeFabric`` wires FakeSwitches per a Topology
and walks packets hop by hop, exploring every select-group bucket.
"""

from . import policy
from .messages import (
    ETH_TYPE_IPV4,
    OFPP_IN_PORT,
    CopyField,
    DecNwTtl,
    FlowMod,
    Group,
    GroupMod,
    Output,
    SetField,
)


def field_matches(value, want):
    """A packet's field against a match's: equal, or equal under a mask (a match
    value (value, mask), as os-ken writes a masked field; MAC addresses)."""
    if not isinstance(want, tuple):
        return value == want
    if value is None:
        return False
    v, m, got = (int(x.replace(":", ""), 16) for x in (*want, value))
    return got & m == v & m


class FakeSwitchError(AssertionError):
    """A message the real switch would reject."""


class FakeSwitch:
    def __init__(self, dpid, live_ports=None):
        self.dpid = dpid
        self.flows = {}       # (table, priority, match) -> FlowMod
        self.groups = {}      # group_id -> GroupMod
        self.live_ports = live_ports   # None = all ports live

    def apply(self, msgs):
        for msg in msgs:
            if isinstance(msg, FlowMod):
                self._flow_mod(msg)
            elif isinstance(msg, GroupMod):
                self._group_mod(msg)
            else:
                raise FakeSwitchError(f"unknown message {msg!r}")

    def _flow_mod(self, fm):
        for a in fm.actions:
            if isinstance(a, Group) and a.group_id not in self.groups:
                raise FakeSwitchError(f"flow {fm.match} uses missing group {a.group_id}")
        if fm.command == "add":
            self.flows[fm.key] = fm.as_command("add")
        elif fm.command == "modify":
            old = self.flows.get(fm.key)
            if old is not None:     # OpenFlow strict modify keeps the cookie
                self.flows[fm.key] = FlowMod(old.table, old.priority, old.match, fm.actions, old.cookie)
        elif fm.command == "delete":
            self.flows.pop(fm.key, None)
        else:
            raise FakeSwitchError(f"bad flow command {fm.command!r}")

    def _group_mod(self, gm):
        if gm.command == "add":
            if gm.group_id in self.groups:
                raise FakeSwitchError(f"group {gm.group_id} exists")
            self.groups[gm.group_id] = gm
        elif gm.command == "modify":
            if gm.group_id not in self.groups:
                raise FakeSwitchError(f"group {gm.group_id} does not exist")
            self.groups[gm.group_id] = gm.as_command("add")
        elif gm.command == "delete":
            self.groups.pop(gm.group_id, None)
            self.flows = {k: f for k, f in self.flows.items()
                          if Group(gm.group_id) not in f.actions}
        else:
            raise FakeSwitchError(f"bad group command {gm.command!r}")

    def state(self):
        """(flows, groups) as frozensets of add messages, comparable to SwitchState."""
        return frozenset(self.flows.values()), frozenset(self.groups.values())

    def lookup(self, pkt, table=0):
        """The highest-priority flow matching ``pkt`` (dict), or None."""
        best = None
        for f in self.flows.values():
            if f.table == table and all(field_matches(pkt.get(k), v) for k, v in f.match):
                if best is None or f.priority > best.priority:
                    best = f
        return best

    def _run(self, actions, pkt, results):
        pkt = dict(pkt)
        for a in actions:
            if isinstance(a, SetField):
                pkt[a.field] = a.value
            elif isinstance(a, CopyField):
                pkt[a.dst] = pkt.get(a.src)
            elif isinstance(a, DecNwTtl):
                pkt["ip_ttl"] = pkt.get("ip_ttl", 64) - 1
                if pkt["ip_ttl"] <= 0:
                    return                   # OVS drops it (no invalid-TTL packet-in)
            elif isinstance(a, Output):
                port = pkt["in_port"] if a.port == OFPP_IN_PORT else a.port
                results.append((port, dict(pkt)))
            elif isinstance(a, Group):
                self._run_group(self.groups[a.group_id], pkt, results)
            else:
                raise FakeSwitchError(f"unknown action {a!r}")

    def _run_group(self, group, pkt, results):
        if group.type in ("select", "ff"):
            buckets = self.live_buckets(group)
            if group.type == "ff":
                buckets = buckets[:1]
            for b in buckets:        # every bucket the hash could pick
                self._run(b.actions, pkt, results)
        else:
            for b in group.buckets:
                self._run(b.actions, pkt, results)

    def live_buckets(self, group):
        return [b for b in group.buckets
                if b.watch_port is None or self.live_ports is None
                or b.watch_port in self.live_ports]

    def forward(self, pkt):
        """[(out port, packet as sent)] for every way ``pkt`` may leave; [] = dropped."""
        flow = self.lookup(pkt)
        results = []
        if flow is not None:
            self._run(flow.actions, pkt, results)
        return results

    def is_output(self, pkt, port):
        return any(p == port for p, _ in self.forward(pkt))


class FakeFabric:
    """FakeSwitches for every switch of a Topology, walked hop by hop."""

    def __init__(self, topo, live=None):
        self.topo = topo
        self.live = topo.all_ports() if live is None else frozenset(live)
        self.switches = {s.dpid: FakeSwitch(s.dpid, self._live_of(s.dpid)) for s in topo.switches}

    def _live_of(self, dpid):
        return {port for d, port in self.live if d == dpid}

    def set_live(self, live):
        self.live = frozenset(live)
        for dpid, sw in self.switches.items():
            sw.live_ports = self._live_of(dpid)

    def apply(self, per_switch):
        for dpid, msgs in per_switch.items():
            self.switches[dpid].apply(msgs)

    def paths(self, src_hp, pkt, max_hops=16):
        """Every path of ``pkt`` sent by host port ``src_hp``.

        Returns a list of (hops, end) where hops is [(dpid, in_port, out_port)]
        and end is ('host', HostPort, packet) or ('drop', dpid, None).
        """
        hosts_at = {(hp.dpid, hp.switch_port): hp for hp in self.topo.host_ports}
        done = []
        todo = [(src_hp.dpid, src_hp.switch_port, dict(pkt), [])]
        while todo:
            dpid, in_port, p, hops = todo.pop()
            if len(hops) > max_hops:
                raise FakeSwitchError(f"loop: {hops}")
            p = dict(p, in_port=in_port)
            outs = self.switches[dpid].forward(p)
            if not outs:
                done.append((hops, ("drop", dpid, None)))
            for out_port, sent in outs:
                path = hops + [(dpid, in_port, out_port)]
                if (dpid, out_port) not in self.live:
                    done.append((path, ("drop", dpid, None)))   # sent into a dead link
                elif (dpid, out_port) in hosts_at:
                    done.append((path, ("host", hosts_at[(dpid, out_port)], sent)))
                else:
                    peer = self.topo.peer_of(dpid, out_port)
                    todo.append((peer[0], peer[1], sent, path))
        return done


def udp_packet(src, dst, sport=49152, dport=4791, ttl=64):
    """Header fields of a RoCEv2-like UDP packet from host port ``src`` to ``dst``."""
    return {"eth_type": ETH_TYPE_IPV4, "ip_proto": 17, "ipv4_src": src.ip,
            "ipv4_dst": dst.ip, "eth_src": src.mac, "eth_dst": dst.mac, "udp_src": sport,
            "udp_dst": dport, "ip_ttl": ttl}


def fabric_with_policy(topo, live, mode):
    """A FakeFabric holding the policy's full desired state for ``live`` and ``mode``."""
    fab = FakeFabric(topo, live)
    fab.apply({d: policy.install(st)
               for d, st in policy.desired_state(topo, live, mode).items()})
    return fab


def live_hops(topo, live, a, b):
    """Shortest hop count between switches ``a`` and ``b`` (dpids) over live links."""
    import networkx as nx
    g = nx.Graph()
    g.add_nodes_from(s.dpid for s in topo.switches)
    for lk in topo.links:
        if (lk.a_dpid, lk.a_port) in live and (lk.b_dpid, lk.b_port) in live:
            g.add_edge(lk.a_dpid, lk.b_dpid)
    return nx.shortest_path_length(g, a, b)
