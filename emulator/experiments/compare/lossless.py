"""Lossless against lossy on one workload: ``emulator compare --lossless on,off``.

Model.  For each flow-control setting (``on``: PFC, ``off``: none), each
congestion control of ``--cc`` (default none) and each repetition, a fresh
Session runs the collective (default an incast: the first host is the root)
over the RC transport, with shallow switch buffers (``--queue-ms``, default
30 ms, where a lossy fabric drops).  Beside it a *victim*: one RoCE stream
at half the link rate from the last host to the second, a host on the
root's leaf that no collective traffic goes to.  It shares the links into
the root's leaf but not the congested port; with PFC alone those links are
paused and the victim is blocked behind the incast's frames (head-of-line
blocking), with DCQCN the senders slow down before the pauses spread.

Per run: the collective's time and busbw, frames the links dropped
(network drops, ingress drops included), retransmissions and timeouts, the
pauses (frames, longest pause), the bottleneck queue's p99 (the TBF
backlog every ``--sample-ms``), and the victim's throughput while the
collective ran (its bytes received between the collective's first start
and last end, over that time), each with its fidelity verdict.
"""

import dataclasses
import os
import time

from emulator.dataplane.faults import Injector
from emulator.dataplane.lossless.ecn import default_ecn
from emulator.dataplane.lossless.pfc_run import misroute
from emulator.dataplane.observe import run_yaml
from emulator.dataplane.session import Session, make_results_dir, write_json
from emulator.errors import ConfigError
from emulator.experiments.compare.congestion import analyse, exit_status
from emulator.experiments.compare.congestion import cell as f
from emulator.experiments.measure.queues import QueueSampler
from emulator.experiments.measure.stats import median
from emulator.experiments.spec.build import command_doc
from emulator.experiments.spec.options import compare_defaults
from emulator.experiments.workloads import collective
from emulator.experiments.workloads.collective import parse_sizes
from emulator.experiments.workloads.mix import EngineProcess, child_env, netns_of
from emulator.fabric import addressing, lossless
from emulator.fabric.routing.addresses import next_hop_mac
from lab.modes import CC, LB, FlowControl, Transport
from traffic.roce.frames import frame_len_for_mtu

SETTINGS = {"on": FlowControl.PFC, "off": FlowControl.NONE,
            **{str(m): m for m in FlowControl}}        # --lossless words
NAMES = {FlowControl.PFC: "lossless", FlowControl.NONE: "lossy", FlowControl.CREDIT: "credit"}


def add_arguments(p):
    """compare's options of this comparison."""
    p.add_argument("--lossless", default=None, metavar="on,off",
                   help="instead of modes: the lossless fabric (PFC) against the lossy one on "
                        "an incast (or allreduce), a victim stream beside it; with --cc, the "
                        "senders' congestion control too (experiments/compare/lossless_cmp.py)")
    p.add_argument("--flow-control", dest="lossless", default=None, metavar="none,pfc,credit",
                   help="as --lossless, naming the modes: none (lossy), pfc, credit "
                        "(InfiniBand-style link-level credits)")
    p.add_argument("--victim", default=None, metavar="SRC:DST",
                   help="--lossless: the victim stream's hosts (default: the last host to "
                        "the second, on the incast root's leaf)")


def parse_settings(text):
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        if item not in SETTINGS:
            raise ConfigError("--lossless", f"{item!r}: a comma list of on, off (or of none, "
                                            "pfc, credit)")
        out.append(SETTINGS[item])
    if not out:
        raise ConfigError("--lossless", "give on, off or on,off")
    return list(dict.fromkeys(out))


def roles(topo, workload, victim=None, senders=8):
    """(collective hosts, (victim src, victim dst)): the root first, then up to
    ``senders`` hosts that are neither end of the victim (incast); every host
    but the victim's ends (other collectives)."""
    names = [h["name"] for h in topo["hosts"]]
    if len(names) < 4:
        raise ConfigError("--lossless", "the fabric needs at least 4 hosts (a root, a sender "
                                        "and the victim's two ends)")
    if victim:
        src, _, dst = victim.partition(":")
        for n in (src, dst):
            if n not in names:
                raise ConfigError("--victim", f"unknown host {n!r}")
        if src == dst or names[0] in (src, dst):
            raise ConfigError("--victim", f"SRC:DST, two hosts other than the root {names[0]}")
    else:
        src, dst = names[-1], names[1]
    rest = [n for n in names if n not in (src, dst)]
    hosts = rest[:senders + 1] if workload == "incast" else rest
    return hosts, (src, dst)


def streams_plan(net, topo, pairs, duration, frame_len, share=0.5, timeline_ms=10.0):
    """An engine plan: one RoCE stream per (source, destination) of ``pairs`` at
    ``share`` of its source's link rate, in frames of ``frame_len``."""
    hosts = {h["name"]: h for h in topo["hosts"]}
    streams, receivers = [], {}
    for i, (src, dst) in enumerate(pairs):
        sp, d = hosts[src]["ports"][0], hosts[dst]
        dp = d["ports"][0]
        streams.append({"name": f"{src}:{sp['port']}", "netns": netns_of(net, src),
                        "intf": sp["port"], "src_mac": sp["mac"], "src_ip": sp["ip"],
                        "dst_mac": next_hop_mac(sp, dp), "dst_ip": dp["ip"],
                        "rate_pps": sp["rate_bps"] * share / (frame_len * 8), "qps": 1,
                        "first_flow": i, "qpns": [0x7F0001 + i]})
        receivers[dst] = {"name": f"{dst}:{dp['port']}", "netns": netns_of(net, dst),
                          "intf": dp["port"]}
    return {"duration": duration, "frame_len": frame_len, "idle": 1.0, "tick_ms": 2.0,
            "gap_ms": 5.0, "timeline_ms": timeline_ms, "expect_flows": len(pairs),
            "progress_ms": 500, "streams": streams, "receivers": list(receivers.values())}


def drive_deadlock(s, workdir, hold_s, until=lambda: False):
    """On Session ``s`` (a lossless leaf-spine): the four streams of
    fabric.lossless.deadlock_plan at line rate, its route change for at most
    ``hold_s`` (or until ``until()``), then the routes taken back and 1.5 s
    more.  Returns (the injector's clock at the change, the engine's result)."""
    _, pairs = lossless.deadlock_plan(s.topo)
    eng = EngineProcess(streams_plan(s.net, s.topo, pairs, 60, 4170, share=1.0,
                                     timeline_ms=100.0), workdir, env=child_env(s),
                        name="deadlock")
    inj = Injector(s)
    try:
        eng.start()
        eng.go()
        eng.wait_line("flowing", 20)
        time.sleep(0.5)
        t_on = inj.clock()
        misroute(inj, True)
        deadline = time.monotonic() + hold_s
        while time.monotonic() < deadline and not until():
            time.sleep(0.05)
        misroute(inj, False)
        time.sleep(1.5)
        eng.stop()
        return t_on, eng.result(timeout=60)
    finally:
        eng.kill()
        inj.close()


def window_mbps(receiver, t0_ns, t1_ns):
    """Mbit/s the receiver's (one) flow got between two CLOCK_MONOTONIC times, from
    its timeline (bytes per bin)."""
    if not receiver["flows"]:
        return 0.0
    bins = next(iter(receiver.get("timelines", {}).values()), [])
    bin_ns = receiver["bin_ms"] * 1e6
    a = max(0, int((t0_ns - receiver["t0_ns"]) / bin_ns))
    b = max(a + 1, int((t1_ns - receiver["t0_ns"]) / bin_ns))
    return round(sum(bins[a:b]) * 8 / ((b - a) * bin_ns / 1e9) / 1e6, 3)


def run_one(spec, fc, cc, rep, sizes, args, out):
    """One Session with link-level flow control ``fc`` and ``cc`` at the senders."""
    fabric = spec.fabric
    fab = dataclasses.replace(fabric, flow_control=fc)
    ecn = default_ecn(fabric, spec.queue_ms) if cc == CC.DCQCN else None
    frame_len = frame_len_for_mtu(spec.mtu)
    with Session(spec.replace(fabric=fab, lb=LB.ECMP, cc=cc, ecn=ecn and ecn.spec(),
                              ecn_at=ecn.at if ecn else spec.ecn_at)) as s:
        hosts, (vsrc, vdst) = roles(s.topo, spec.workload, args.victim)
        ports = [{"intf": p["intf"], "rate_bps": p["rate_bps"],
                  "name": f"{sw['name']}->{p['peer']}"}
                 for sw in s.topo["switches"] for p in sw["ports"]]
        sampler = QueueSampler(ports, args.sample_ms / 1e3, s.net.intf_netns())
        work = os.path.join(s.dir, "victim")
        os.makedirs(work)
        eng = EngineProcess(streams_plan(s.net, s.topo, [(vsrc, vdst)], 600, frame_len), work,
                            env=child_env(s), name="victim")
        eng.start()
        try:
            eng.go()
            eng.wait_line("flowing", 20)
            sampler.start()
            try:
                report = collective.run_collective(
                    s, spec.workload, sizes, hosts=hosts, qps=1, warmup=0,
                    rank_extra={"transport": Transport.RC, "cc": cc})
            finally:
                sampler.stop()
            eng.stop()
            res = eng.result(timeout=60)
        finally:
            eng.kill()
        ranks = collective.rank_results(os.path.join(s.dir, "collective"))
    t0 = min(r["results"][0]["t_start_ns"] for r in ranks)
    t1 = max(x["t_start_ns"] + x["time_s"] * 1e9 for r in ranks for x in r["results"])
    victim = window_mbps(res["receivers"][0], t0, t1)
    times = [t - sampler.times[0] for t in sampler.times] if sampler.times else []
    bott = analyse(times, ports, sampler.backlog, sampler.sent, sampler.drops) or {}
    row, tr = report["rows"][0], report.get("transport", {})
    pfc = s.results.get("lossless") or {}
    fid = report["fidelity"]
    r = {"flow_control": fc, "cc": cc, "rep": rep, "dir": s.dir,
         "time_s": max(x["time_s"] for x in report["rows"]), "busbw_Mbps": row["busbw_Mbps"],
         "wrong": sum(x["wrong"] for x in report["rows"]),
         "died": bool(report.get("failed_qps")),
         "drops": fid.get("network_drops", {}).get("total", 0),
         "retransmitted": tr.get("retransmitted_packets"), "timeouts": tr.get("timeouts"),
         "pause_frames": pfc.get("pause_frames", 0), "paused_s_max": pfc.get("paused_s_max", 0.0),
         "ingress_drops": pfc.get("ingress_drops", 0),
         "reaction_median_frames": (pfc.get("reaction_frames") or {}).get("median"),
         "reaction_p95_frames": (pfc.get("reaction_frames") or {}).get("p95"),
         "reaction_max_frames": (pfc.get("reaction_frames") or {}).get("max"),
         "queue_p99": bott.get("queue_p99_bytes"), "bottleneck": bott.get("port"),
         "victim_Mbps": victim, "victim": f"{vsrc}->{vdst}",
         "fidelity": fid["verdict"], "fidelity_notes": fid["reasons"] + fid["warnings"]}
    out(f"... {NAMES[fc]} cc {cc} rep {rep + 1}: "
        f"{r['time_s']:.2f} s, drops {r['drops']}, retx {r['retransmitted']}, "
        f"pause frames {r['pause_frames']}, victim {victim} Mbit/s, {r['fidelity']}")
    return r


def summarize(runs):
    rows = []
    for key in dict.fromkeys((r["flow_control"], r["cc"]) for r in runs):
        rs = [r for r in runs if (r["flow_control"], r["cc"]) == key]

        def med(k):
            return median(r[k] for r in rs)
        rows.append({"flow_control": key[0], "cc": key[1], "reps": len(rs),
                     **{k: med(k) for k in ("time_s", "busbw_Mbps", "drops", "retransmitted",
                                            "timeouts", "pause_frames", "paused_s_max",
                                            "queue_p99", "victim_Mbps", "ingress_drops")},
                     "wrong": sum(r["wrong"] for r in rs),
                     "died": sum(r["died"] for r in rs),
                     "faithful": sum(r["fidelity"] == "faithful" for r in rs)})
    return rows


def table(rows):
    head = (f"{'fabric':9s} {'cc':6s} {'time_s':>7s} {'busbw':>7s} {'drops':>6s} {'retx':>6s} "
            f"{'RTOs':>5s} {'PFC frames':>10s} {'paused_s':>8s} {'q_p99':>8s} "
            f"{'victim':>7s} {'#wrong':>6s} {'died':>4s} faithful")
    lines = [head]
    for r in rows:
        lines.append(f"{NAMES[r['flow_control']]:9s} "
                     f"{r['cc']:6s} {f(r['time_s'], '7.2f')} {f(r['busbw_Mbps'], '7.2f')} "
                     f"{f(r['drops'], '6d')} {f(r['retransmitted'], '6d')} "
                     f"{f(r['timeouts'], '5d')} {f(r['pause_frames'], '10d')} "
                     f"{f(r['paused_s_max'], '8.3f')} {f(r['queue_p99'], '8d')} "
                     f"{f(r['victim_Mbps'], '7.2f')} {r['wrong']:6d} {r['died']:4d} "
                     f"{r['faithful']}/{r['reps']}")
    lines.append("busbw and victim in Mbit/s (victim: its throughput while the collective ran, "
                 "sent at half the link rate); paused_s: the most-paused port's paused time in "
                 "all; q_p99: the bottleneck egress queue, bytes; died: "
                 "runs in which a QP ran out of retries (the job aborted, its data #wrong)")
    return "\n".join(lines)


def main(spec, args, out=print):
    """``emulator compare --lossless on,off`` (``compare lossless``): the exit status."""
    fabric = spec.fabric
    settings = parse_settings(args.lossless)
    ccs = [c.strip() for c in (args.cc or CC.NONE).split(",") if c.strip()]
    bad = [c for c in ccs if c not in (CC.NONE, CC.DCQCN)]
    if bad:
        raise ConfigError("--cc", f"{bad[0]!r}: with --lossless, none or dcqcn")
    if spec.workload not in ("incast", "allreduce"):
        raise ConfigError("--workload", "--lossless compares incast or allreduce")
    if args.reps < 1:
        raise ConfigError("--reps", "at least 1")
    roles(addressing.plan(fabric), spec.workload, args.victim)     # bad roles: before any run
    if any(lk.pfc_storm for lk in fabric.links):
        raise ConfigError("--lossless", "the fabric file storms (pfc_storm): a comparison "
                                        "with a lossy fabric cannot have it; take it out")
    sizes = parse_sizes(args.sizes or "1M")
    base = make_results_dir(spec.results, "lossless")
    run_yaml.write(base, spec, command=command_doc("compare lossless", args))
    spec = spec.replace(results=base)
    runs = [run_one(spec, fc, cc, rep, sizes, args, out)
            for rep in range(args.reps) for fc in settings for cc in ccs]
    rows = summarize(runs)
    write_json(os.path.join(base, "lossless.json"),
               {"fabric": fabric.name, "workload": spec.workload, "sizes": sizes,
                "queue_ms": spec.queue_ms, "rows": rows, "runs": runs})
    out(f"# {spec.workload} {args.sizes or '1M'} on {fabric.name}, queues "
        f"{spec.queue_ms:g} ms; results in {base}")
    out(table(rows))
    if any(r["wrong"] and not r["died"] for r in runs):
        return 1                     # wrong data the transport did not give up on
    return exit_status([dict(r, wrong=0) for r in rows], spec, out)


def prepare(args):
    """What this comparison implies before its spec is built (spec.options): an incast."""
    compare_defaults(args, workload="incast")
