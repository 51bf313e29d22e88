"""No transient misrouting while ``policy.diff`` moves a switch between states.

``diff`` sends group changes before the flows that use them.  If a group id
changed meaning (its buckets became another destination's), every flow still
pointing at it would, until its own FlowMod arrived, forward by the new
buckets: another destination's next hops.  Group ids were once numbered by
the sorted port tuples of a switch, so one failure could shift them (non-
stacked dual-ToR active/standby, cut h1-leaf1: spine2's FF group for h3/h4
became h1's, and a drill saw h2 -> h4 flows lose 8 packets each).  An id now
names a destination switch and a purpose (``controller.groups``): a failure
modifies the group in place, and every flow pointing at it before still
points at it after.  The tests list such windows (a flow's transient output
is neither its old nor its new output) and flows that leave a modified group
over every single link cut and its restore.
"""

import pytest

from controller import policy, topology
from controller.fakeswitch import FakeSwitch, udp_packet
from controller.messages import Group, Output
from emulator.dataplane.faults import parse_link
from emulator.fabric import addressing, presets


def first_ports(group):
    """Ports a group sends to while all are live (FF: its first bucket)."""
    buckets = group.buckets[:1] if group.type == "ff" else group.buckets
    return {b.actions[0].port for b in buckets}


def outputs(state, key):
    groups = {g.group_id: g for g in state.groups}
    flow = next((f for f in state.flows if f.key == key), None)
    out = set()
    for a in flow.actions if flow else ():
        if isinstance(a, Output):
            out.add(a.port)
        elif isinstance(a, Group):
            out |= first_ports(groups[a.group_id])
    return out


def misrouting_windows(topo, old_live, new_live, mode="fast-failover"):
    """[(switch, group id, flow match, old output, transient output)] of ``diff(old, new)``."""
    old = policy.desired_state(topo, old_live, mode)
    new = policy.desired_state(topo, new_live, mode)
    out = []
    for dpid in old:
        before = {g.group_id: g for g in old[dpid].groups}
        after = {g.group_id: g for g in new[dpid].groups}
        modified = {gid for gid in before if gid in after and before[gid] != after[gid]}
        for f in old[dpid].flows:
            gids = {a.group_id for a in f.actions if isinstance(a, Group)} & modified
            for gid in gids:
                if any(isinstance(a, Group) and a.group_id == gid
                       for g in new[dpid].flows if g.key == f.key for a in g.actions):
                    continue                   # the flow keeps the group: a wanted change
                allowed = outputs(old[dpid], f.key) | outputs(new[dpid], f.key)
                if not first_ports(after[gid]) <= allowed:
                    out.append((topo.by_dpid[dpid].name, gid, dict(f.key[2]),
                                sorted(outputs(old[dpid], f.key)), sorted(first_ports(after[gid]))))
    return out


def test_no_flow_forwards_by_another_routes_group_during_a_diff():
    doc = addressing.plan(presets.build("dual-tor", {"mode": "active-standby"}))
    topo = topology.from_dict(doc)
    dpid = {s["name"]: s["dpid"] for s in doc["switches"]}
    live = frozenset((s.dpid, p.port) for s in topo.switches for p in s.ports)
    (sw, port), other = parse_link("h1-leaf1", doc)
    dead = {(dpid[sw], port["port"]), (dpid[other], port["peer_port"])}
    windows = misrouting_windows(topo, live, live - dead)
    # spine2 sends h3's and h4's traffic toward leaf2 until the flow mods arrive
    assert windows == []


def leavers(topo, old_live, new_live, mode="fast-failover"):
    """[(switch, group id, flow match)]: a flow that pointed at a group ``diff``
    modifies and that points elsewhere afterwards."""
    old = policy.desired_state(topo, old_live, mode)
    new = policy.desired_state(topo, new_live, mode)
    out = []
    for dpid in old:
        after = {g.group_id: g for g in new[dpid].groups}
        modified = {g.group_id for g in old[dpid].groups
                    if g.group_id in after and after[g.group_id] != g}
        now = {f.key: f.actions for f in new[dpid].flows}
        for f in old[dpid].flows:
            for a in f.actions:
                if isinstance(a, Group) and a.group_id in modified and f.key in now \
                        and now[f.key] != f.actions:
                    out.append((topo.by_dpid[dpid].name, a.group_id, dict(f.key[2])))
    return out


def test_the_window_finder_sees_nothing_where_no_group_changes_meaning():
    doc = addressing.plan(presets.build("dual-plane", {}))
    topo = topology.from_dict(doc)
    dpid = {s["name"]: s["dpid"] for s in doc["switches"]}
    live = frozenset((s.dpid, p.port) for s in topo.switches for p in s.ports)
    (sw, port), other = parse_link("h1-leaf1", doc)
    dead = {(dpid[sw], port["port"]), (dpid[other], port["peer_port"])}
    assert misrouting_windows(topo, live, live - dead) == []
    assert misrouting_windows(topo, live - dead, live) == []


@pytest.mark.parametrize("name,params", [("leaf-spine", {}), ("three-tier", {}),
                                         ("dual-tor", {"mode": "active-standby"}),
                                         ("dual-link", {"mode": "active-standby"})])
def test_no_group_changes_meaning_on_any_single_cut(name, params):
    topo = topology.from_dict(addressing.plan(presets.build(name, params)))
    live = topo.all_ports()
    modified = 0
    for lk in topo.links:
        cut = live - {(lk.a_dpid, lk.a_port), (lk.b_dpid, lk.b_port)}
        for old, new in ((live, cut), (cut, live)):
            for mode in ("controller", "fast-failover"):
                assert misrouting_windows(topo, old, new, mode) == [], (name, lk, mode)
                assert leavers(topo, old, new, mode) == [], (name, lk, mode)
                modified += sum(m.command == "modify" and type(m).__name__ == "GroupMod"
                                for msgs in policy.changes(topo, old, new, mode).values()
                                for m in msgs)
    # the finders saw groups modified in place (dual-link: a cut only changes
    # routes' form, fast-failover [active, standby] <-> the standby port)
    assert modified or name == "dual-link"


def stepwise_misroutes(topo, old_live, new_live, mode, names):
    """[(switch, message index, in_port, dst)]: a packet that, with ``diff``'s
    messages applied one at a time (liveness already ``new_live``), leaves by a
    port neither the old nor the new state sends it to."""
    old = policy.desired_state(topo, old_live, mode)
    new = policy.desired_state(topo, new_live, mode)
    src, out = topo.host_ports[0], []
    for name in names:
        dpid = topo.by_name[name].dpid
        live = {p for d, p in new_live if d == dpid}
        ends = [FakeSwitch(dpid, live) for _ in range(3)]
        for sw, st in zip(ends, (old, new, old)):
            sw.apply(policy.install(st[dpid]))
        before, after, now = ends
        pkts = [dict(udp_packet(src, dst), in_port=p.port)
                for p in topo.by_name[name].ports for dst in topo.host_ports]
        ok = [{q for q, _ in before.forward(pk)} | {q for q, _ in after.forward(pk)}
              for pk in pkts]
        for n, msg in enumerate(policy.diff(old[dpid], new[dpid])):
            now.apply([msg])
            out += [(name, n, pk["in_port"], pk["ipv4_dst"]) for pk, allowed in zip(pkts, ok)
                    if not {q for q, _ in now.forward(pk)} <= allowed]
    return out


def test_folded_repairs_change_without_a_window():
    """A cut on a fabric whose repairs fold: leaf1's folded flows lose an
    uplink, every other leaf's fold gains leaf1's hosts as exceptions or
    unfolds (fewer flows saved).  Applied one message at a time, no packet
    leaves by a port that neither state uses."""
    fabric = presets.build("leaf-spine", {"spines": "3", "leaves": "12", "hosts_per_leaf": "2"})
    topo = topology.from_dict(addressing.plan(fabric, "ab12"))
    live = topo.all_ports()
    p = next(p for p in topo.by_name["leaf1"].ports if p.peer == "spine1")
    cut = live - {(p.dpid, p.port), topo.peer_of(p.dpid, p.port)}
    for old, new in ((live, cut), (cut, live)):
        assert stepwise_misroutes(topo, old, new, "fast-failover", ["leaf1", "leaf2"]) == []
