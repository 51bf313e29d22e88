"""The default traffic mix, sent by one traffic-engine process, with its fidelity.

The pairs are ``workload.mix_pairs``' (each host to the host at the same
position on the next leaf, ``qps`` QPs per connection at ``load`` x the host
link rate).  One ``python -m traffic engine`` process opens a socket in
every host's namespace, builds every frame, and says ready; only then are
the counters read and the engine told to go, so the window holds exactly the
traffic.  Afterwards the counters are read again: the difference, with the
engine's own report, gives the fidelity verdict (``fidelity``).  On several
servers, each server runs one engine on its hosts' part of the plan, and the
results are merged (``dataplane.cluster.cluster_net``).
"""

import os

from emulator.dataplane.engine_proc import EngineProcess  # noqa: F401 (re-exported)
from emulator.dataplane.links.impair import fault_names
from emulator.dataplane.observe import counters
from emulator.experiments.measure import fidelity
from emulator.experiments.workloads import workload
from emulator.fabric.routing.addresses import next_hop_mac
from emulator.fabric.units import format_rate
from traffic.roce.frames import frame_len_for_mtu


def netns_of(net, host):
    if hasattr(net, "netns_of"):       # on several servers: the host's server fills it in
        return net.netns_of(host)
    return f"/proc/{net.hosts[host].pid}/ns/net"


def plan_for(net, pairs, duration, qps, frame_len, idle=0.5):
    """The engine plan of ``pairs`` (``workload.mix_pairs`` tuples)."""
    streams, receivers, seen = [], [], set()
    for i, (src, sport, dst, dport, share, _) in enumerate(pairs):
        streams.append({
            "name": f"{src['name']}:{sport['port']}", "netns": netns_of(net, src["name"]),
            "intf": sport["port"], "src_mac": sport["mac"], "src_ip": sport["ip"],
            "dst_mac": next_hop_mac(sport, dport), "dst_ip": dport["ip"],
            "rate_bps": int(sport["rate_bps"] * share), "qps": qps,
            "first_flow": i * qps, "first_qpn": 0x100 + i * qps})
        key = (dst["name"], dport["port"])
        if key not in seen:
            seen.add(key)
            receivers.append({"name": f"{dst['name']}:{dport['port']}",
                              "netns": netns_of(net, dst["name"]), "intf": dport["port"]})
    # A disruption is a gap well beyond a flow's own packet spacing (a 5 Mbit/s QP
    # of 4 KiB frames sends every 6.7 ms): 3 intervals, at least 10 ms.
    slowest = min(s["rate_bps"] / s["qps"] for s in streams)
    gap_ms = max(10.0, 3 * frame_len * 8 / slowest * 1e3)
    return {"duration": duration, "frame_len": frame_len, "idle": idle, "gap_ms": gap_ms,
            "streams": streams, "receivers": receivers}


def measure(session, plan, name="engine"):
    """Run ``plan`` on the session's fabric; returns (engine result, fidelity doc)."""
    net, topo = session.net, session.topo
    work = os.path.join(session.dir, "traffic")
    os.makedirs(work, exist_ok=True)
    if hasattr(net, "engines"):        # one engine per server (``ClusterNet``)
        eng = net.engines(plan, name)
    else:
        eng = EngineProcess(plan, work, env=child_env(session), name=name)
    eng.start()
    windows = counters.CpuWindows()
    try:
        before = counters.snapshot(net)
        windows.start()
        eng.go()
        res = eng.result()
        after = counters.snapshot(net)
    finally:
        cpu_windows = windows.stop()
        eng.kill()
    delta = dict(counters.delta(before, after, topo, active_s=res["window_s"]),
                 cpu_windows=cpu_windows)
    e = dict(res["engine"], cpu_share=round(res["engine"]["cpu_s"] / max(res["window_s"], 1e-9),
                                            3))
    lost = lost_frames(res)
    doc = fidelity.verdict(e["sent_packets"], delta, engine=e, latency=res["latency_ms"],
                           lost=lost,
                           bound_ms=fidelity.queue_bound_ms(topo, session.queue_ms),
                           frame_len=plan["frame_len"], faulted=fault_names(topo))
    return res, doc


def lost_frames(res):
    """Frames the engine sent that no receiver got (exact: per flow, sent - unique received)."""
    unique = {}
    for r in res["receivers"]:
        for f in r["flows"]:
            unique[f["flow"]] = f["received_packets"] - f["duplicated_packets"]
    return sum(max(n - unique.get(k, 0), 0) for s in res["streams"]
               for k, n in s["per_flow"].items())


def child_env(session):
    """The environment of processes the run starts (carries the run tag)."""
    env_of = getattr(session, "child_env", None)
    return env_of() if env_of else None


def default_mix(session, duration=5.0, qps=4, load=0.5, mtu=4096):
    """Run the mix for ``duration`` s at ``load`` x host link rate; return results."""
    net, topo = session.net, session.topo
    pairs = workload.mix_pairs(topo, load)
    if not pairs:
        return None
    frame_len = frame_len_for_mtu(mtu)
    plan = plan_for(net, pairs, duration, qps, frame_len)
    before = net.intf_counters()
    res, doc = measure(session, plan)
    after = net.intf_counters()
    sent = {}
    for s in res["streams"]:
        sent.update(s["per_flow"])
    received = {}
    for r in res["receivers"]:
        for f in r["flows"]:
            received[f["flow"]] = f
    cross = set()
    for i, p in enumerate(pairs):
        if p[5]:
            cross |= {f"{p[1]['ip']}#{i * qps + q}" for q in range(qps)}
    flows = []
    for key, count in sorted(sent.items()):
        got = received.get(key, {})
        n = got.get("received_packets", 0)
        unique = n - got.get("duplicated_packets", 0)
        flows.append({"flow": key, "sent_packets": count, "received_packets": n,
                      "dropped_packets": max(0, count - unique),
                      "duplicated_packets": got.get("duplicated_packets", 0),
                      "reordered_packets": got.get("reordered_packets", 0),
                      "total_disruptions": got.get("total_disruptions", 0),
                      "longest_disruption_ms": got.get("longest_disruption_ms", 0),
                      "latency_us": got.get("latency_us"),
                      "cross_plane": key in cross})
    per_conn = f"{format_rate(int(pairs[0][1]['rate_bps'] * pairs[0][4]))} each"
    offered = sum(s["rate_bps"] for s in plan["streams"])
    return {
        "description": f"{len(pairs)} cross-leaf connections x {qps} QPs, {per_conn}, "
                       f"{duration:g}s, {frame_len}-byte RoCEv2 frames (RoCE MTU {mtu})",
        "pairs": [[s["name"], d["name"]] for s, _, d, _, _, _ in pairs],
        "mtu": mtu, "frame_len": frame_len, "offered_bps": offered,
        "cross_plane": {
            "connections": sum(1 for p in pairs if p[5]),
            "flows": len(cross),
            "sent_packets": sum(f["sent_packets"] for f in flows if f["cross_plane"]),
            "received_packets": sum(f["received_packets"] for f in flows if f["cross_plane"]),
        } if cross else None,
        "window_s": duration,
        "counter_window_s": round(res["window_s"], 3),
        "sent_packets": sum(f["sent_packets"] for f in flows),
        "received_packets": sum(f["received_packets"] for f in flows),
        "dropped_packets": sum(f["dropped_packets"] for f in flows),
        "reordered_packets": sum(f["reordered_packets"] for f in flows),
        "total_disruptions": sum(f["total_disruptions"] for f in flows),
        "latency_ms": res["latency_ms"],
        "disruption_gap_ms": round(plan["gap_ms"], 3),
        "engine": res["engine"],
        "flows": flows,
        "uplinks": workload.uplink_loads(topo, before, after, duration),
        "spine_uplinks": workload.uplink_loads(topo, before, after, duration, kind="spine"),
        "fidelity": doc,
    }
