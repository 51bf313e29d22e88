"""The default traffic mix of ``emulator run``: RoCEv2 flows across leaves.

Every host sends to the host in the same position on the next leaf (a
permutation, so every host sends and receives once and every flow crosses
the spine layer), with ``qps`` queue pairs per connection -- distinct UDP
source ports, so ECMP can spread them.  Senders and receivers are the
traffic package's (``python -m traffic send|recv``) run inside the hosts'
namespaces.  The uplink counters of every leaf, read before and after, give
the per-uplink load: the ECMP spread.
"""

import json
import os
import sys
import time

from emulator.addressing import home_leaf
from emulator.errors import RunFailed
from emulator.proc import finish
from emulator.units import format_rate


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


def default_mix(session, duration=5.0, qps=4, load=0.5, frame_len=1078):
    """Run the mix for ``duration`` s at ``load`` x host link rate; return results."""
    net, topo = session.net, session.topo
    pairs = mix_pairs(topo, load)
    if not pairs:
        return None
    work = os.path.join(session.dir, "traffic")
    os.makedirs(work, exist_ok=True)
    py = [sys.executable, "-m", "traffic"]
    receivers = {}
    for _, _, dst, dport, _, _ in pairs:
        key = f"{dst['name']}-{dport['port']}"
        if key in receivers:
            continue
        ready = os.path.join(work, f"{key}.ready")
        out = os.path.join(work, f"recv-{key}.json")
        argv = py + ["recv", "--intf", dport["port"], "--idle", "1.0",
                     "--deadline", str(duration + 15), "--no-timeline",
                     "--ready-file", ready, "--out", out]
        receivers[key] = (net.popen_in(dst["name"], argv, cwd=session_repo()), ready, out)
    deadline = time.monotonic() + 30
    while not all(os.path.exists(r[1]) for r in receivers.values()):
        for name, (p, _, _) in receivers.items():
            if p.poll() is not None:
                raise RunFailed(f"receiver in {name} exited {p.returncode} at start")
        if time.monotonic() > deadline:
            raise RunFailed("receivers did not open their sockets within 30s")
        time.sleep(0.02)
    senders = []
    before = net.intf_counters()
    t0 = time.monotonic()
    cross = set()
    for i, (src, sport, dst, dport, share, is_cross) in enumerate(pairs):
        rate = int(sport["rate_bps"] * share)
        out = os.path.join(work, f"send-{i}-{src['name']}.json")
        if is_cross:
            cross |= {f"{sport['ip']}#{i * qps + q}" for q in range(qps)}
        argv = py + ["send", "--intf", sport["port"], "--src-ip", sport["ip"],
                     "--dst-ip", dport["ip"], "--dst-mac", dport["mac"], "--qps", str(qps),
                     "--first-flow", str(i * qps), "--first-qpn", str(0x100 + i * qps),
                     "--rate", str(rate), "--duration", str(duration),
                     "--burst", "4", "--frame-len", str(frame_len), "--out", out]
        senders.append((src, dst, net.popen_in(src["name"], argv, cwd=session_repo()), out))
    for src, _, p, _ in senders:
        finish(p, duration + 30, f"sender in {src['name']}")
    seconds = time.monotonic() - t0
    for name, (p, _, _) in receivers.items():
        finish(p, 30, f"receiver in {name}")
    after = net.intf_counters()
    sent = {}
    for _, _, _, out in senders:
        with open(out) as f:
            sent.update(json.load(f)["per_flow"])
    received = {}
    for _, _, out in receivers.values():
        with open(out) as f:
            doc = json.load(f)
        for flow in doc["flows"]:
            received[flow["flow"]] = flow
    flows = []
    for key, count in sorted(sent.items()):
        got = received.get(key, {})
        n = got.get("received_packets", 0)
        flows.append({"flow": key, "sent_packets": count, "received_packets": n,
                      "dropped_packets": max(0, count - n),
                      "duplicated_packets": got.get("duplicated_packets", 0),
                      "reordered_packets": got.get("reordered_packets", 0),
                      "total_disruptions": got.get("total_disruptions", 0),
                      "longest_disruption_ms": got.get("longest_disruption_ms", 0)})
    host_rate = pairs[0][1]["rate_bps"]
    for f in flows:
        f["cross_plane"] = f["flow"] in cross
    per_conn = f"{format_rate(int(host_rate * pairs[0][4]))} each"
    return {
        "description": f"{len(pairs)} cross-leaf connections x {qps} QPs, {per_conn}, "
                       f"{duration:g}s, {frame_len}-byte RoCEv2 frames",
        "pairs": [[s["name"], d["name"]] for s, _, d, _, _, _ in pairs],
        "cross_plane": {
            "connections": sum(1 for p in pairs if p[5]),
            "flows": len(cross),
            "sent_packets": sum(f["sent_packets"] for f in flows if f["cross_plane"]),
            "received_packets": sum(f["received_packets"] for f in flows if f["cross_plane"]),
        } if any(p[5] for p in pairs) else None,
        # Each sender sends for exactly ``duration``; uplink rates are over that time
        # (the counters were read around all senders, including process start-up).
        "window_s": duration,
        "counter_window_s": round(seconds, 3),
        "sent_packets": sum(f["sent_packets"] for f in flows),
        "received_packets": sum(f["received_packets"] for f in flows),
        "dropped_packets": sum(f["dropped_packets"] for f in flows),
        "reordered_packets": sum(f["reordered_packets"] for f in flows),
        "total_disruptions": sum(f["total_disruptions"] for f in flows),
        "flows": flows,
        "uplinks": uplink_loads(topo, before, after, duration),
        "spine_uplinks": uplink_loads(topo, before, after, duration, kind="spine"),
    }


def session_repo():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
