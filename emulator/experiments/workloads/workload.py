"""Who sends to whom in the default traffic mix, and the uplink loads it causes (pure).

Every host sends to the host in the same position on the next leaf (a
permutation, so every host sends and receives once and every flow crosses
the spine layer), with ``qps`` queue pairs per connection -- distinct UDP
source ports, so ECMP can spread them.  The uplink counters of every leaf,
read before and after, give the per-uplink load: the ECMP spread.
``experiments.workloads.mix`` sends the mix with the traffic engine.
"""

from emulator.fabric.addressing import home_leaf


def cross_leaf_pairs(topo):
    """[(src host, dst host)]: each host -> same position on the next leaf."""
    by_leaf = {}
    for h in topo["hosts"]:
        by_leaf.setdefault(home_leaf(h), []).append(h)
    leaves = sorted(by_leaf, key=lambda n: [s["name"] for s in topo["switches"]].index(n))
    pairs = []
    if len(leaves) == 1:
        hosts = by_leaf[leaves[0]]
        return [(h, hosts[(i + 1) % len(hosts)]) for i, h in enumerate(hosts) if len(hosts) > 1]
    for i, leaf in enumerate(leaves):
        nxt = by_leaf[leaves[(i + 1) % len(leaves)]]
        for k, h in enumerate(by_leaf[leaf]):
            pairs.append((h, nxt[k % len(nxt)]))
    return pairs


def uplink_loads(topo, before, after, seconds, kind="leaf"):
    """Per switch of ``kind``: each uplink's Mbit/s over the window, and max/mean."""
    tier = {"leaf": 1, "spine": 2, "superspine": 3}
    out = []
    for sw in topo["switches"]:
        if sw["kind"] != kind:
            continue
        loads = []
        for p in sw["ports"]:
            if tier.get(p["peer_kind"], 0) <= sw["tier"]:
                continue
            tx = after[p["intf"]][0] - before[p["intf"]][0]
            mbps = tx * 8 / seconds / 1e6
            loads.append({"port": p["port"], "peer": p["peer"], "tx_bytes": tx,
                          "mbps": round(mbps, 3),
                          "utilisation": round(tx * 8 / seconds / p["rate_bps"], 4)})
        if not loads:
            continue
        mean = sum(u["mbps"] for u in loads) / len(loads)
        out.append({"switch": sw["name"], kind: sw["name"], "loads": loads,
                    "max_over_mean": round(max(u["mbps"] for u in loads) / mean, 3)
                    if mean > 0 else None})
    return out


def rail_view(host, rail):
    """``host`` as seen on its port ``rail`` (0-based): that port's IP, MAC, switch.

    A flow on rail r of a multi-plane host sends and receives on ``eth<r>``
    only; the view keeps the host's name (its namespace) and its home leaf on
    that rail, and shares the port document with the host.
    """
    port = host["ports"][rail]
    return dict(host, ip=port["ip"], mac=port["mac"], ports=[port], rail=rail + 1,
                leaf=home_leaf(host) if rail == 0 else port["switch"])


def rail_pairs(topo, rails=None):
    """[(src view, dst view)]: ``cross_leaf_pairs`` on every rail (``rails``: numbers from 1)."""
    pairs = []
    for r in range(max(len(h["ports"]) for h in topo["hosts"])):
        if rails is None or r + 1 in rails:
            views = [rail_view(h, r) for h in topo["hosts"] if len(h["ports"]) > r]
            pairs += cross_leaf_pairs({"hosts": views, "switches": topo["switches"]})
    return pairs


def mix_pairs(topo, load=0.5):
    """[(src host, src port, dst host, dst port, share of the port rate, cross-plane)].

    Single-NIC hosts: ``cross_leaf_pairs``.  Hosts with one NIC per rail
    (multi-plane): rail-aligned pairs on every rail (NIC i -> NIC i of the
    host at the same position on the next rail-i leaf), plus one cross-plane
    connection per host: its GPU on rail 1 sends to the next host's GPU on
    rail 2.  The data crosses to rail 2 inside the source host (the NVLink /
    PXN hop) and leaves through the source's rail-2 NIC, so no switch ever
    carries a packet between planes.
    """
    rails = max(len(h["ports"]) for h in topo["hosts"])
    if rails == 1:
        return [(s, s["ports"][0], d, d["ports"][0], load, False)
                for s, d in cross_leaf_pairs(topo)]
    by_name = {h["name"]: h for h in topo["hosts"]}
    out = [(by_name[s["name"]], s["ports"][0], by_name[d["name"]], d["ports"][0], load / 2, False)
           for s, d in rail_pairs(topo)]
    hosts = [h for h in topo["hosts"] if len(h["ports"]) > 1]
    for k, src in enumerate(hosts):
        dst = hosts[(k + 1) % len(hosts)]
        if dst is not src:
            out.append((src, src["ports"][1], dst, dst["ports"][1], load / 2, True))
    return out
