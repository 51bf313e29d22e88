"""The drill's probe traffic, sent and received by the traffic engine.

One engine process sends every probe flow (``pairs``: a host to the host
at its position on the next leaf, one flow per QPN of the pair at ``pps`` each,
small frames) and receives them with per-flow 1 ms timelines.  It says
``flowing`` once every flow has arrived; the fault schedule then runs on the
clock from that moment.  Around it, a ``Watch`` reads the drop counters and
CPU, so each repeat carries its fidelity verdict: the drops on the faulted
links are the fault's, anything lost elsewhere outside a link's queue is the
emulator's.
"""

import os
import time

from emulator.experiments.measure.watch import Watch
from emulator.experiments.spec import scenario
from emulator.experiments.workloads.mix import EngineProcess, child_env, lost_frames, netns_of
from emulator.fabric.routing.addresses import next_hop_mac
from emulator.report.files import pyplot


def faulted_links(events, topo):
    """Link names ('a->b', both directions) that the schedule's events take down."""
    names = set()
    links = [(l["a"].split(":")[0], l["b"].split(":")[0]) for l in topo["links"]]
    for ev in events:
        if ev.action in ("cut", "flap", "loss"):
            a, _, b = ev.target.replace("-", ":").partition(":")
            names |= {f"{a}->{b}", f"{b}->{a}"}
        elif ev.action in ("crash", "cp_crash"):
            for a, b in links:
                if ev.target in (a, b):
                    names |= {f"{a}->{b}", f"{b}->{a}"}
    return names


def probe_plan(net, pairs, args, duration):
    streams, receivers, seen = [], [], set()
    for src, dst, first, qpns in pairs:
        sp, dp = src["ports"][0], dst["ports"][0]
        streams.append({"name": f"{src['name']}:{sp['port']}",
                        "netns": netns_of(net, src["name"]), "intf": sp["port"],
                        "src_mac": sp["mac"], "src_ip": sp["ip"],
                        "dst_mac": next_hop_mac(sp, dp),
                        "dst_ip": dst["ip"], "rate_pps": args.pps * len(qpns),
                        "qps": len(qpns), "first_flow": first, "qpns": list(qpns)})
        key = (dst["name"], dp["port"])
        if key not in seen:
            seen.add(key)
            receivers.append({"name": f"{dst['name']}:{dp['port']}",
                              "netns": netns_of(net, dst["name"]), "intf": dp["port"]})
    # wake at least twice per probe interval, so arrivals are not bunched by the tick
    return {"duration": duration, "frame_len": args.frame_len, "idle": 1.0,
            "tick_ms": min(2.0, 500.0 / args.pps),
            "gap_ms": args.gap_ms, "timeline_ms": 1.0,
            "expect_flows": sum(len(qpns) for *_, qpns in pairs),
            "streams": streams, "receivers": receivers}


SNAPSHOT_BEFORE_S = 0.02     # ``before`` runs this long before the first event


def repeat(s, inj, pairs, events, args, work, before=None):
    """One repeat of the schedule under probe traffic; ``before()`` (if given)
    runs shortly before the first event (a look at the fabric as the fault finds it).

    Returns (sent {flow: n}, received {flow: summary with t0_ns},
    timelines {flow: (t0_ns, bins)}, probe seconds, fidelity verdict).
    """
    os.makedirs(work, exist_ok=True)
    total = max(e.at_s for e in events) + args.post + sum(
        e.params.get("count", 0) * e.params.get("period", 0) for e in events)
    duration = total + 2.0
    plan = probe_plan(s.net, pairs, args, duration)
    if hasattr(s.net, "engines"):       # one engine per server (``ClusterNet``)
        eng = s.net.engines(plan, "probes")
    else:
        eng = EngineProcess(plan, work, env=child_env(s), name="probes")
    eng.start()
    watch = Watch(s)
    try:
        watch.start()
        eng.go()
        eng.wait_line("flowing", 20)
        t0 = time.monotonic()
        if before is not None:
            delay = t0 + events[0].at_s - SNAPSHOT_BEFORE_S - time.monotonic()
            if delay > 0:
                time.sleep(delay)       # the schedule's own times
            before()
        for ev in events:
            delay = t0 + ev.at_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)       # the schedule's own times, not a wait for state
            scenario.execute(inj, ev)
        res = eng.result(timeout=duration + 60)
        watch.stop()
    finally:
        eng.kill()
    sent, recv, timelines = {}, {}, {}
    for st in res["streams"]:
        sent.update(st["per_flow"])
    for r in res["receivers"]:
        for fl in r["flows"]:
            recv[fl["flow"]] = dict(fl, t0_ns=r["t0_ns"])
            timelines[fl["flow"]] = (r["t0_ns"], r.get("timelines", {}).get(fl["flow"], []))
    e = dict(res["engine"], cpu_share=round(res["engine"]["cpu_s"] / max(res["window_s"], 1e-9),
                                            3))
    fid = watch.verdict(e["sent_packets"], lost=lost_frames(res), engine=e,
                        faulted=faulted_links(events, s.topo))
    return sent, recv, timelines, duration, fid


def plot(timelines, t_fault, t_restore, crossing, path, mode, bin_ms=5):
    """Throughput per flow around the fault (Agg PNG)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 5))
    for key, (t0, tl) in sorted(timelines.items()):
        xs, ys = [], []
        for i in range(0, len(tl), bin_ms):
            xs.append((t0 + i * 1e6 - t_fault) / 1e6)
            ys.append(sum(tl[i:i + bin_ms]) * 8 / (bin_ms / 1e3) / 1e6)
        ax.plot(xs, ys, lw=0.8, ls="-" if crossing.get(key) else ":",
                label=f"{key}{' (crosses)' if crossing.get(key) else ''}")
    ax.axvline(0, color="red", lw=1)
    if t_restore is not None:
        ax.axvline((t_restore - t_fault) / 1e6, color="green", lw=1)
    ax.set_xlabel("ms since fault (red); restore in green")
    ax.set_ylabel(f"Mbit/s ({bin_ms} ms bins)")
    ax.set_title(f"probe throughput per flow, failover={mode}")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
