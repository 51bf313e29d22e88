"""A switch's groups: one per destination and purpose, its id from the topology alone.

Pure, like controller.policy (no os-ken, no I/O).  A route or repair that
needs a group gets the group of its purpose toward its *destination switch*
D, the switch the host port hangs off: every host port of D is reached the
same way from a given switch (the routes are computed per destination
switch), so they share one group.  The purposes on a switch:

* route toward D: a select group over the equal-cost next hops, or a
  fast-failover group [primary, backups...] (``failover=fast-failover``);
* repair toward D of packets bounced in through fabric port q (select);
* folded repair of port q (select; ``policy.fold_repairs``).

An id is the purpose's slot among all the purposes the topology gives the
switch (for each destination switch: the route, then a repair per fabric
port; after them a fold per fabric port), so it depends on the topology
alone: the same in every liveness state and after a controller restart.  A
failure changes a group's buckets, never its id: the repair is an
OFPGC_MODIFY of the group in place, and the flows that point at it are left
alone.  Flows move only where a route changes form (one next hop <-> a
group, select <-> fast-failover), or appear and go with the repairs.  An id
never changes meaning either: every flow pointing at it goes toward the same
destination switch, so a MODIFY sends no other destination's packets through
the new buckets (``tests/unit/test_policy_transients.py``).  Select ids are
``1 + slot``, fast-failover ids ``FF_GROUP_BASE + 1 + slot``: a type never
changes under an id.

The price is group-table space: a leaf holds a route group per remote
destination switch (63 on a 64-leaf fabric) where one group per distinct
bucket set would be one.
"""

import math

from .messages import Bucket, Group, GroupMod, Output, Selection

FF_GROUP_BASE = 1 << 30      # select ids below, FF ids from here: a type never changes under an id
HASH_FIELDS = ("ipv4_src", "ipv4_dst", "udp_src", "udp_dst")
MAX_WEIGHT = 1000


def bucket_weights(sw):
    """weight(ports, port): select-bucket weight proportional to the link rate.

    Equal rates (or unknown ones) give weight 1 each; unequal links (a 40 and
    a 20 Mbit/s uplink) share flows 2:1, so neither is overloaded first.
    """
    rate = {p.port: p.rate_bps for p in sw.ports}

    def weight(ports, port):
        rates = [rate.get(p) for p in ports]
        if None in rates or len(set(rates)) == 1:
            return 1
        g = math.gcd(*rates)
        top = max(rates) // g
        w = rate[port] // g
        return w if top <= MAX_WEIGHT else max(1, round(w * MAX_WEIGHT / top))
    return weight


class Slots:
    """Every switch's group slots, from the topology: destination switches
    (those with host ports, by dpid) and each switch's fabric ports (by number)."""

    def __init__(self, topo):
        dests = sorted({hp.dpid for hp in topo.host_ports})
        self.dest = {d: i for i, d in enumerate(dests)}
        self.dest_of = {hp.ip: hp.dpid for hp in topo.host_ports}
        self.fabric = {sw.dpid: {p.port: i for i, p in
                                 enumerate(p for p in sw.ports if not p.to_host)}
                       for sw in topo.switches}

    def route(self, dpid, ip):
        return self.dest[self.dest_of[ip]] * (1 + len(self.fabric[dpid]))

    def repair(self, dpid, in_port, ip):
        return self.route(dpid, ip) + 1 + self.fabric[dpid][in_port]

    def fold(self, dpid, in_port):
        ports = self.fabric[dpid]
        return len(self.dest) * (1 + len(ports)) + ports[in_port]


class SwitchGroups:
    """The groups of one switch, collected while its flows are built.

    Each method returns the action toward ``ports``: the port itself when
    there is one, else the group of that purpose (created on first use).
    """

    def __init__(self, slots, sw, watch=True):
        self.slots, self.sw, self.watch = slots, sw, watch
        self.weight = bucket_weights(sw)
        self.groups = {}
        self._ports = {}         # id -> its buckets' ports
        self._buckets = {}       # ports -> select buckets

    def route(self, ip, ports, backups=()):
        """Toward host ``ip``: ``ports`` its next hops; ``backups`` (one next
        hop only): fast-failover [primary, backups...]."""
        slot = self.slots.route(self.sw.dpid, ip)
        if backups:
            return self._put(FF_GROUP_BASE + 1 + slot, ports + backups, self._ff)
        return self._select(slot, ports)

    def repair(self, in_port, ip, ports):
        """Toward host ``ip``, for packets bounced in through ``in_port``."""
        return self._select(self.slots.repair(self.sw.dpid, in_port, ip), ports)

    def fold(self, in_port, ports):
        """The folded repair flow of ``in_port``."""
        return self._select(self.slots.fold(self.sw.dpid, in_port), ports)

    def _select(self, slot, ports):
        if len(ports) == 1:
            return Output(ports[0])
        return self._put(1 + slot, ports, self._select_group)

    def _select_group(self, gid, ports):
        buckets = self._buckets.get(ports)
        if buckets is None:      # many destinations share a port set: built once
            buckets = self._buckets[ports] = tuple(
                Bucket((Output(p),), self.weight(ports, p), p if self.watch else None)
                for p in ports)
        return GroupMod(gid, "select", buckets, Selection(HASH_FIELDS, self.sw.hash_seed))

    @staticmethod
    def _ff(gid, ports):
        return GroupMod(gid, "ff", tuple(Bucket((Output(p),), 1, p) for p in ports))

    def _put(self, gid, ports, build):
        have = self._ports.setdefault(gid, ports)
        if have != ports:        # two flows of one purpose and destination disagree
            raise ValueError(f"{self.sw.name}: group {gid} wanted over ports {have} "
                             f"and over {ports}")
        if gid not in self.groups:
            self.groups[gid] = build(gid, ports)
        return Group(gid)

    def entries(self):
        return frozenset(self.groups.values())
