"""What the page draws: nodes by tier and links by their project names.

Model.  A *node* is a host, a NIC switch of a bonded host, or a switch; its
row is its tier (hosts at the bottom, as ``show --picture`` draws them).  A
*link* carries the name faults take (``leaf1-spine1``, ``h1-leaf1``,
``leaf1-spine1#2`` for the second parallel link; ``dataplane.faults``), its
two drawn ends ``a`` and ``b`` (the first node of the name first), and per
direction the interface whose egress queue carries it: ``ab`` is the queue
of ``a``'s end (a switch port's veth, or ``h1:eth0`` for a host's port), as
``dataplane.observe.counters.QueueCounters`` keys them.  ``watch`` lists the
switch ends whose operational state says whether the link is up: setting
either end of a veth down takes the carrier of the other, so the switch ends
see every cut, the modelled loss-of-signal port-mod included.
"""

from emulator.dataplane.faults import fault_links, nic_of
from emulator.report.files import layout


def view_model(topo):
    """{run, fabric, nodes: [{name, kind, x, y}], links: [{name, a, b, rate_bps, ab, ba,
    a_port, b_port (``leaf1:eth3``, as PFC names ports), watch: [[switch, intf]]}]}."""
    pos = layout(topo)
    nodes = [{"name": h["name"], "kind": "host"} for h in topo["hosts"]] + \
        [{"name": s["name"], "kind": s["kind"]} for s in topo["switches"]]
    for n in nodes:
        n["x"], n["y"] = pos[n["name"]]
    switches = {s["name"]: s for s in topo["switches"]}
    links = []
    for name, ((sw, p), other) in fault_links(topo):
        links.append(_link(name, sw, p, other, switches))
    nic_host = {v: k for k, v in nic_of(topo).items()}
    for nic, host in nic_host.items():          # bond0 <-> NIC: inside the host, drawn
        for p in switches[nic]["ports"]:
            if p["peer_kind"] == "host":
                links.append(_link(f"{host}-{nic}", nic, p, host, switches))
    return {"run": topo["run"], "fabric": topo["fabric"], "nodes": nodes, "links": links}


def _link(name, sw, p, other, switches):
    """One link entry: ``a`` is the switch whose port it is (the host of a host link,
    the NIC switch for a bonded host's uplink), as the name reads."""
    here = p["intf"]
    if p["peer_kind"] == "host":
        there = f"{other}:{p['peer_port']}"
        return {"name": name, "a": other, "b": sw, "rate_bps": p.get("rate_bps"),
                "ab": there, "ba": here, "a_port": there, "b_port": f"{sw}:{p['name']}",
                "watch": [[sw, here]]}
    peer = next(q for q in switches[other]["ports"] if q["port"] == p["peer_port"])
    return {"name": name, "a": sw, "b": other, "rate_bps": p.get("rate_bps"),
            "ab": here, "ba": peer["intf"], "a_port": f"{sw}:{p['name']}",
            "b_port": f"{other}:{peer['name']}", "watch": [[sw, here], [other, peer["intf"]]]}
