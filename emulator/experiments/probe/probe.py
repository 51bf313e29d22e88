"""Black-box probing (``python -m emulator probe``): find a silently lossy link and
isolate it, with no failure signal from the network.

Model.  One fabric is built (BFD off, no carrier change: the fault is
silent).  Probe paths are chosen and checked against the installed groups
(``prober``: every host to one host on every other leaf, one UDP source
port per distinct ECMP path, ``ofproto/trace`` hop by hop), and the coverage
of the fabric's directed links is reported.  Per repeat, one traffic engine
sends ``--pps`` RoCEv2 probes on every path and prints per-path counts every
``--every`` s; this process judges them as they come (``prober.Prober``):

1. ``--baseline`` s of calm: the emulator's own loss rate becomes the
   floor; anything named now is a false suspect;
2. the fault: ``--fault LINK:loss:P`` drops P % of the frames leaving the
   first-named end (nftables egress, as the drill's gray loss), or
   ``LINK:corrupt:P`` flips a payload byte in P % of the RoCEv2 frames
   (delivered with a bad ICRC, dropped by the receiving NIC);
3. once ``--confirm`` windows in a row name the same suspects, they are
   *detected*; unless ``--no-isolate``, both switch ends of every suspect
   link are set administratively down (an OpenFlow port-mod on the bridge's
   management socket, as an operator's shutdown); the controller treats a
   config-down port as dead and routes around it: *isolated* when its
   ``CONVERGED`` push is acknowledged;
4. ``--post`` s of probes after it: the probes still lost (should be 0);
5. the fault stops and the link comes back (port-mod up), the controller
   converges, the engine stops; the fidelity verdict of the repeat.

Times count from the fault's nftables transaction (CLOCK_MONOTONIC, the
engine's clock).  Over the repeats: how many were found within ``--limit``
s, time to detect and to isolate (median, max), the suspects that were not
the faulty link (false suspects), all in ``probe.json``.
"""

import json
import os
import time

from emulator.dataplane.faults import Injector, link_nodes, nic_of, parse_link
from emulator.dataplane.links.detect import Detector
from emulator.dataplane.observe import run_yaml
from emulator.dataplane.session import Session
from emulator.errors import ConfigError, RunFailed
from emulator.experiments.bgp.isolate import RoutedIsolator
from emulator.experiments.measure.convergence import wait_for, wait_restored
from emulator.experiments.measure.paths import choose, ecmp_width, link_ends, trace_path
from emulator.experiments.measure.stats import percentile
from emulator.experiments.measure.watch import Watch
from emulator.experiments.probe import prober as pr
from emulator.experiments.spec.build import command_doc
from emulator.experiments.spec.fabric import add_fabric_args
from emulator.experiments.spec.options import add_control_args
from emulator.experiments.spec.scenario import default_fault
from emulator.experiments.workloads.mix import EngineProcess, child_env, lost_frames, netns_of
from emulator.fabric import addressing
from emulator.fabric.routing.addresses import next_hop_mac
from lab.modes import Failover
from traffic.roce.frames import udp_sport

QPN_BASE = 0x4000           # probe QPNs: 32 candidates per host pair from here
CANDIDATES = 32


def add_arguments(p):
    """``emulator probe``'s options."""
    add_fabric_args(p)
    p.add_argument("--fault", default=None, metavar="LINK:loss|corrupt:P",
                   help="the silent fault: P %% of the frames leaving the first-named end "
                        "dropped (loss) or corrupted (corrupt); default: the first leaf "
                        "uplink, loss 5")
    p.add_argument("--repeat", type=int, default=5, help="repeats (default 5)")
    p.add_argument("--pps", type=float, default=100, help="probes/s on every path (default 100)")
    p.add_argument("--window", type=float, default=5.0, help="s of probes judged together")
    p.add_argument("--every", type=float, default=0.5, help="s between judgements")
    p.add_argument("--confirm", type=int, default=2,
                   help="judgements in a row naming the same suspects (default 2)")
    p.add_argument("--min-loss", type=float, default=1.0, metavar="PERCENT",
                   help="the smallest loss to find: links whose probes show significantly "
                        "less are cleared (default 1)")
    p.add_argument("--baseline", type=float, default=3.0, help="s of calm before the fault")
    p.add_argument("--limit", type=float, default=15.0, help="s to find the fault")
    p.add_argument("--post", type=float, default=2.0, help="s of probes after isolation")
    p.add_argument("--no-isolate", dest="isolate", action="store_false",
                   help="report the suspects, leave the links up")
    p.add_argument("--failover", choices=Failover.names(), default=Failover.default())
    add_control_args(p)
    p.add_argument("--frame-len", type=int, default=128)
    p.add_argument("--queue-ms", type=float, default=30.0)
    p.add_argument("--datapath", choices=("auto", "kernel", "user"), default="auto")
    p.add_argument("--results", default="results", metavar="DIR")


def parse_fault(text, topo):
    """``LINK:loss:P`` / ``LINK:corrupt:P`` -> (link, kind, percent); default the first
    leaf uplink, loss 5 %."""
    if text is None:
        return default_fault(topo), "loss", 5.0
    link, _, rest = text.replace(":loss:", "|loss|").replace(":corrupt:", "|corrupt|") \
        .partition("|")
    kind, _, pct = rest.partition("|")
    try:
        percent = float(pct)
    except ValueError:
        percent = None
    if kind not in ("loss", "corrupt") or percent is None or not 0 < percent <= 100:
        raise ConfigError("--fault", f"{text!r}: use LINK:loss:P or LINK:corrupt:P, "
                                     "P in (0, 100], e.g. leaf1-spine1:loss:5")
    parse_link(link, topo, where="--fault")
    first, second = link_nodes(link)
    if first in {h["name"] for h in topo["hosts"]}:
        raise ConfigError("--fault", f"{text!r}: the fault acts where frames leave a switch; "
                                     f"name the switch first (e.g. "
                                     f"{second}-{first}:{kind}:{percent:g})")
    return link, kind, percent


def fault_hop(link, topo):
    """The hop (``node:port``) of the directed link a fault on ``link`` hits: the
    first-named node's end."""
    first = link_nodes(link)[0]
    first = nic_of(topo).get(first, first)
    return next(f"{node}:{port}" for node, port in link_ends(link, topo) if node == first)


def select_paths(topo, net=None):
    """{flow key: (src view, dst view, qpn, path)}: one probe per distinct path of
    every ``prober.probe_pairs`` pair, checked against the installed groups."""
    chosen, flow = {}, 0
    for i, (src, dst) in enumerate(pr.probe_pairs(topo)):
        hp, dp = src["ports"][0], dst["ports"][0]
        width = max(ecmp_width(topo, hp["switch"], dp["switch"]), 1)
        traced = {}
        for c in range(CANDIDATES):
            qpn = QPN_BASE + i * CANDIDATES + c
            traced[qpn] = trace_path(topo, src["name"], hp, dp, udp_sport(qpn, qpn), net)
            if len(choose(traced)) >= width:
                break
        for qpn, path in choose(traced).items():
            chosen[f"{hp['ip']}#{flow}"] = (src, dst, qpn, path)
            flow += 1
    return chosen


def engine_plan(net, chosen, args, duration):
    streams, receivers, seen = [], [], set()
    for i, (key, (src, dst, qpn, _)) in enumerate(chosen.items()):
        sp, dp = src["ports"][0], dst["ports"][0]
        streams.append({"name": f"{src['name']}:{sp['port']}>{dst['name']}",
                        "netns": netns_of(net, src["name"]), "intf": sp["port"],
                        "src_mac": sp["mac"], "src_ip": sp["ip"],
                        "dst_mac": next_hop_mac(sp, dp),
                        "dst_ip": dp["ip"], "rate_pps": args.pps, "qps": 1,
                        "first_flow": int(key.split("#")[1]), "first_qpn": qpn,
                        "phase": i / len(chosen)})       # spread over the interval
        if (dst["name"], dp["port"]) not in seen:
            seen.add((dst["name"], dp["port"]))
            receivers.append({"name": f"{dst['name']}:{dp['port']}",
                              "netns": netns_of(net, dst["name"]), "intf": dp["port"]})
    return {"duration": duration, "frame_len": args.frame_len, "idle": 0.5,
            "tick_ms": min(2.0, 500.0 / args.pps), "gap_ms": 10.0,
            "expect_flows": len(chosen), "progress_ms": args.every * 1e3,
            "streams": streams, "receivers": receivers}


def _converged_after(s, t_ns):
    """The first CONVERGED port-down push after ``t_ns``, or None."""
    t0 = t_ns / 1e9
    for ev in s.controller.converged():
        if ev.get("event") == "port" and not ev.get("up") and ev["t_event"] >= t0:
            return ev
    return None


class Watcher:
    """Feeds the engine's progress lines to a ``Prober`` until a condition holds."""

    def __init__(self, eng, prober):
        self.eng, self.prober = eng, prober
        self.t_ns = None

    def until(self, deadline_ns, stop=lambda named: False):
        """Feed lines until ``stop(confirmed suspects)`` or the engine's clock passes
        ``deadline_ns``; returns the confirmed suspects of the last line."""
        named = []
        while self.t_ns is None or self.t_ns < deadline_ns:
            line = self.eng.next_line(5.0, "its progress")
            if line is None:
                raise RunFailed("the traffic engine printed no progress for 5 s")
            if not line.startswith("progress "):
                continue
            doc = json.loads(line[len("progress "):])
            self.t_ns = doc["t_ns"]
            named = self.prober.feed(doc)
            if stop(named):
                break
        return named


def repeat(s, inj, isolator, chosen, fault, args, work, hop_names):
    """One repeat (see the module doc); returns its result document."""
    link, kind, percent = fault
    true_hop = fault_hop(link, s.topo)
    paths = {k: v[3] for k, v in chosen.items()}
    duration = args.baseline + args.limit + args.post + 30
    os.makedirs(work, exist_ok=True)
    eng = EngineProcess(engine_plan(s.net, chosen, args, duration), work,
                        env=child_env(s), name="probes")
    prober = pr.Prober(paths, window_s=args.window, confirm=args.confirm,
                       min_loss=args.min_loss / 100)
    eng.start()
    watch = Watch(s)
    rep = {"fault": f"{link}:{kind}:{percent:g}", "true_link": hop_names[true_hop]}
    isolated_ports = []
    try:
        watch.start()
        eng.go()
        eng.wait_line("flowing", 20)
        w = Watcher(eng, prober)
        false_early = set()
        w.until(time.monotonic_ns() + int(args.baseline * 1e9),
                lambda named: false_early.update(named))
        rep["floor"] = round(prober.set_floor(time.monotonic_ns()
                                              - int(args.baseline * 1e9)), 5)
        ev = inj.loss_start(link, percent, side="a", corrupt=kind == "corrupt")
        t_fault = ev["t_done_ns"]
        prober.streak.clear()
        first_named = []

        def found(named):
            if not first_named and true_hop in {h for x in prober.last["suspects"]
                                                for h in [x["hop"]] + x["alike"]}:
                first_named.append(w.t_ns)
            return bool(named)
        named = w.until(t_fault + int(args.limit * 1e9), found)
        alike = {h for x in prober.last["suspects"] if x["hop"] == true_hop
                 or true_hop in x["alike"] for h in [x["hop"]] + x["alike"]} - {true_hop}
        rep.update({"detected": bool(named), "suspects": [hop_names[h] for h in named],
                    "alike": sorted(hop_names[h] for h in alike),
                    "false_suspects": sorted(hop_names[h] for h in (set(named) | false_early)
                                             if h != true_hop and h not in alike),
                    "unexplained_paths": prober.last["unexplained"],
                    "window_suspects": prober.last["suspects"]})
        if named:
            rep["detect_s"] = round((w.t_ns - t_fault) / 1e9, 3)
        if first_named:
            rep["first_named_s"] = round((first_named[0] - t_fault) / 1e9, 3)
        if named and args.isolate:
            isolated_ports = sorted({p for h in named
                                     for p in inj.switch_ports(pr.link_of_hop(h, s.topo))})
            note = isolator.notify(isolated_ports, True)
            rep["isolate_acked_ms"] = round((note["t_acked_ns"] - note["t_notify_ns"]) / 1e6, 3)
            if s.controller is not None:
                wait_for(lambda: _converged_after(s, note["t_notify_ns"]), 10,
                         "the controller to route around the isolated link")
                conv = _converged_after(s, note["t_notify_ns"])
                t_conv = int(conv["t_done"] * 1e9)
            else:
                t_conv = note["t_acked_ns"]
            rep["isolated_s"] = round((t_conv - t_fault) / 1e9, 3)
            w.until(t_conv + int(args.post * 1e9))
            after = prober.counts(since_ns=t_conv)
            rep["probes_after"] = sum(n for n, _ in after.values())
            rep["lost_after"] = sum(k for _, k in after.values())
        eng.stop()
        res = eng.result(timeout=60)
        watch.stop()
        a, b = rep["true_link"].split("->")
        e = dict(res["engine"], cpu_share=round(res["engine"]["cpu_s"]
                                                / max(res["window_s"], 1e-9), 3))
        rep["fidelity"] = watch.verdict(e["sent_packets"], lost=lost_frames(res), engine=e,
                                        faulted={f"{a}->{b}", f"{b}->{a}"})
    finally:
        eng.kill()
        inj.loss_stop()
        if isolated_ports:
            t_up = time.monotonic_ns()
            isolator.notify(isolated_ports, False)
            wait_restored(s, args.failover, t_up)
    return rep


def summarise(reps, limit):
    found = [r for r in reps if r.get("detected") and not r["false_suspects"]
             and r["true_link"] in r["suspects"]]
    det = sorted(r["detect_s"] for r in found)
    iso = sorted(r["isolated_s"] for r in found if "isolated_s" in r)
    return {"repeats": len(reps), "localized": len(found), "limit_s": limit,
            "detect_s": {"median": percentile(det, 50) if det else None,
                         "max": max(det, default=None)},
            "isolated_s": {"median": percentile(iso, 50) if iso else None,
                           "max": max(iso, default=None)},
            "false_suspects": sum(len(r["false_suspects"]) for r in reps),
            "lost_after_isolation": sum(r.get("lost_after", 0) for r in reps),
            "emulator_bound": sum(r["fidelity"]["verdict"] != "faithful" for r in reps)}


def table(reps, summ):
    rows = ["repeat  floor   found  detect_s  first_s  isolated_s  lost_after  suspects"
            "                 fidelity"]
    for i, r in enumerate(reps):
        rows.append(f"{i + 1:<7} {r['floor'] * 100:5.2f}%  {'yes' if r['detected'] else 'no':<5}  "
                    f"{r.get('detect_s', '-')!s:<8}  {r.get('first_named_s', '-')!s:<7}  "
                    f"{r.get('isolated_s', '-')!s:<10}  {r.get('lost_after', '-')!s:<10}  "
                    f"{', '.join(r['suspects']) or '-':<24} {r['fidelity']['verdict']}")
    iso = summ["isolated_s"]
    isolated = (f"isolated median {iso['median']} s (max {iso['max']})"
                if iso["median"] is not None else "not isolated")
    rows.append(f"localized {summ['localized']}/{summ['repeats']} within {summ['limit_s']:g} s: "
                f"detect median {summ['detect_s']['median']} s (max {summ['detect_s']['max']}), "
                f"{isolated}; false suspects {summ['false_suspects']}; probes lost after "
                f"isolation {summ['lost_after_isolation']}; emulator-bound repeats "
                f"{summ['emulator_bound']}")
    return "\n".join(rows)


def main(spec, args, out=print):
    """``emulator probe``: returns the exit status."""
    topo = addressing.plan(spec.fabric)
    fault = parse_fault(args.fault, topo)
    for name in ("repeat", "pps", "window", "every", "confirm", "limit"):
        if getattr(args, name) <= 0:
            raise ConfigError(f"--{name}", "must be positive")
    if not 0 < args.min_loss < 100:
        raise ConfigError("--min-loss", "a percentage in (0, 100)")
    if not pr.probe_pairs(topo):
        raise ConfigError("probe", "the fabric needs hosts on two leaves")
    if args.isolate and spec.failover == Failover.NONE and not spec.control.routed:
        raise ConfigError("--failover", "none never routes around a link set down, so the "
                                        "prober could not isolate it: use controller or "
                                        "fast-failover, or --no-isolate")
    base = os.path.abspath(os.path.join(spec.results, time.strftime("probe-%Y%m%d-%H%M%S")))
    os.makedirs(base, exist_ok=False)
    command = command_doc("probe", args)
    run_yaml.write(base, spec, command=command)
    reps = []
    with Session(spec.replace(results=base), progress=lambda m: out(f"... {m}")) as s:
        t0 = time.monotonic()
        chosen = select_paths(s.topo, s.net)
        paths = {k: v[3] for k, v in chosen.items()}
        names = pr.directed_links(s.topo)
        covered, total, missing = pr.coverage(paths, s.topo)
        cover = {"paths": len(paths), "pairs": len(pr.probe_pairs(s.topo)),
                 "covered": covered, "links": total, "uncovered": missing,
                 "trace_s": round(time.monotonic() - t0, 2)}
        how = "the routers' kernels" if s.spec.control.routed else "ofproto/trace"
        out(f"... {len(paths)} probe paths over {cover['pairs']} host pairs, checked with "
            f"{how} in {cover['trace_s']} s; {covered}/{total} directed links "
            f"covered{': missing ' + ', '.join(missing) if missing else ''}")
        inj = Injector(s, nft_name="probe")
        isolator = RoutedIsolator(s) if s.spec.control.routed else Detector(s, 0.0)
        try:
            for r in range(args.repeat):
                reps.append(repeat(s, inj, isolator, chosen, fault, args,
                                   os.path.join(s.dir, f"repeat{r}"), names))
                rp = reps[-1]
                out(f"... repeat {r + 1}/{args.repeat}: suspects "
                    f"{', '.join(rp['suspects']) or 'none'}, detect {rp.get('detect_s')} s, "
                    f"isolated {rp.get('isolated_s')} s, {rp['fidelity']['verdict']}")
        finally:
            isolator.close()
            inj.close()
    summ = summarise(reps, args.limit)
    with open(os.path.join(base, "probe.json"), "w") as f:
        json.dump({"fault": reps[0]["fault"] if reps else None, "coverage": cover,
                   "paths": paths, "summary": summ, "repeats": reps,
                   "args": command["options"]}, f, indent=1)
    out(table(reps, summ))
    out(f"results: {base}/probe.json")
    return 0
