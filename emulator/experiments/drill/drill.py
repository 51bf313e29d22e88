"""Failover drills (``python -m emulator drill``): faults under probe traffic, measured.

Model.  For each failover mode (``--failover none,controller,fast-failover``)
one fabric is built (``Session(failover=mode)``: the controller is told the
mode on its command line) and reused for every repeat.  A repeat:

  1. starts one traffic engine (``experiments.drill.drill_traffic``) that sends
     paced RoCEv2 probes (``--pps`` per flow, small frames) from each host to
     the host at the same position on the next leaf (a bonded host's first
     ToR), on every rail of multi-NIC hosts (``--rails``), ``--qps`` flows
     (UDP source ports) per pair, so ECMP puts some on the faulty link and
     some elsewhere, and receives them all;
  2. waits until every probe flow has arrived (the engine says so);
  3. runs the fault schedule (``--fault`` pairs or ``--scenario`` file) at
     its times, each event stamped with CLOCK_MONOTONIC, the receivers' clock;
  4. after the traffic, waits for the controller to have converged on the
     restore before the next repeat.

Per flow (SONiC data-plane checker names): lost packets, ``loss_window_ms``
(lost sequences in the gaps between the first fault and the first restore,
divided by the flow's pps), ``recovery_ms`` (first fault -> first packet
after the last lossy gap), ``longest_gap_ms`` (arrival gap, OVS stall included),
duplicates, reordering.  Whether a flow crosses the fault is read from
``ofproto/trace`` before the first repeat, switch by switch from the source
host's (a bonded host's NIC switch included): its path names the port it
leaves every node by, and it crosses a link fault when it leaves a node by
either end of that link, a crash when it passes the switch.  The controller's
convergence is first fault -> the last ``CONVERGED`` port-down push acknowledged
by barriers (controller.log).  Over the repeats: median / p95 / max of the
crossing flows' loss windows, and the lost packets of the others (must be 0).
Each repeat carries its fidelity verdict (drops counted outside the links'
queues, senders behind schedule): a repeat the machine could not carry is
reported emulator-bound, never as the failover's loss.
"""

import argparse
import json
import os
import time

from emulator.dataplane.faults import Injector
from emulator.dataplane.links import bfd
from emulator.dataplane.links.detect import parse_detect
from emulator.dataplane.observe import run_yaml
from emulator.dataplane.ovs import datapath
from emulator.errors import ConfigError, RunFailed
from emulator.experiments import calibrate, ui
from emulator.experiments.bgp import drill as bgp_drill
from emulator.experiments.drill import adaptive as drill_adaptive
from emulator.experiments.drill import agent as drill_agent
from emulator.experiments.drill import traffic as drill_traffic
from emulator.experiments.drill.probes import (
    PROBE_SETS,
    parse_rails,
    path_pairs,
    planned_flows,
    probe_pairs,
    probe_rate,
)
from emulator.experiments.drill.stats import (
    control_table,
    flow_result,
    summarise,
    summary_line,
    table,
)
from emulator.experiments.measure import budget, fidelity
from emulator.experiments.measure.convergence import (
    controller_convergence,
    ports_down,
    wait_for,
    wait_restored,
)
from emulator.experiments.measure.paths import crosses, fault_ports, flow_paths, unexpected_downs
from emulator.experiments.repeat import Mode, each_mode
from emulator.experiments.spec import scenario
from emulator.experiments.spec.build import check as check_spec
from emulator.experiments.spec.build import command_doc
from emulator.experiments.spec.fabric import add_fabric_args
from emulator.experiments.spec.options import (
    LB_MODES,
    add_adaptive_args,
    add_capture_arg,
    add_control_args,
    add_switch_agent_arg,
    add_training_args,
    add_transport_args,
    parse_controls,
    parse_holddown,
    parse_seed,
)
from emulator.experiments.spec.scenario import default_fault
from emulator.fabric import addressing, layout, switch_agent
from emulator.fabric.units import parse_duration
from emulator.report.summary import pfc_text
from lab.modes import LB, Failover
from traffic.roce.frames import ROCE_MTUS

MODES = Failover.names()


def drill_workload(text):
    """``--workload``: a collective, ``simai:FILE`` or several jobs (``jobs:FILE``)."""
    if text in ("allreduce", "allgather", "reducescatter", "alltoall") or \
            text.startswith(("simai:", "jobs:")):
        return text
    raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from allreduce, "
                                     "allgather, reducescatter, alltoall, simai:FILE, "
                                     "jobs:FILE)")


def add_arguments(p):
    """Options of the ``drill`` subcommand."""
    add_fabric_args(p)
    p.add_argument("--fault", action="append", default=[], metavar="SPEC",
                   help="leaf1-spine1 (cut both ends), leaf1-spine1:cut:a, "
                        "leaf1-spine1:flap:5:200ms, leaf1-spine1:loss:5, spine1:crash, "
                        "controller:kill; each is injected then restored (default: cut "
                        "the first uplink of the first leaf)")
    p.add_argument("--scenario", metavar="FILE", help="timed fault schedule (YAML, faults:)")
    p.add_argument("--repeat", type=int, default=5, help="repeats per mode (default 5)")
    p.add_argument("--failover", default=Failover.default(), metavar="MODE[,MODE...]",
                   help="none, controller, fast-failover, or a comma list to compare "
                        "(OpenFlow; BGP repairs with its own withdrawals)")
    add_control_args(p, several=True, bfd=False)
    p.add_argument("--detect", default="1ms", metavar="DELAY|os",
                   help="modeled loss-of-signal detection: the switches at a cut link's ends "
                        "are told this long after the cut (default 1ms, typical of hardware); "
                        "'os' leaves it to Open vSwitch's own carrier polling (13-85 ms here)")
    p.add_argument("--bfd", default=None, metavar="MS|INTERVALxMULT",
                   help="OpenFlow: run BFD on every inter-switch link at this interval (2-1000 "
                        "ms; Open vSwitch's multiplier is 3): detects gray failures (--fault "
                        "LINK:loss:P) and feeds port liveness to fast-failover and the "
                        "controller; default off.  --control bgp: every eBGP session's BFD "
                        "(default 300x3, FRR's defaults)")
    p.add_argument("--bfd-holddown", default=None, metavar="BASE:MAX|0",
                   help="with --bfd: a port whose BFD session failed stays down for BASE s "
                        "after it comes back, doubling per flap up to MAX s (default with "
                        "--bfd 3:30; 0: off, every flap reroutes); docs/failover.md")
    p.add_argument("--probes", choices=PROBE_SETS, default="paths",
                   help="paths (default): one host per leaf probes the next leaf, one flow "
                        "per equal-cost path (UDP source ports chosen by ofproto/trace), so "
                        "every uplink and downlink carries one probe flow; hosts: every host "
                        "probes the next leaf, --qps flows each, hashed as they come")
    p.add_argument("--resolution", default="1ms", metavar="MS",
                   help="time resolution of a loss window: the probe rate per flow is one "
                        "packet per MS (default 1ms = 1000 pps), lowered, and said so, if "
                        "the probes would take more than half of this machine's calibrated "
                        "budget")
    p.add_argument("--pps", type=float, default=None,
                   help="packets/s per probe flow, as given even above the budget "
                        "(default: from --resolution)")
    p.add_argument("--qps", type=int, default=None,
                   help="probe flows per host pair (--probes hosts; default 4) or at most "
                        "this many paths per pair (--probes paths; default all)")
    p.add_argument("--frame-len", type=int, default=128)
    p.add_argument("--at", type=float, default=None,
                   help="s from flowing to the fault (default 0.5; under a collective: "
                        "from its first call, default the middle of the calls)")
    p.add_argument("--hold", type=float, default=1.0, help="s from fault to restore")
    p.add_argument("--post", type=float, default=0.7, help="s of traffic after the last event")
    p.add_argument("--gap-ms", type=float, default=1.0, help="a disruption is a gap > this")
    p.add_argument("--rails", default="all", metavar="all|N[,N...]",
                   help="probe on these rails (host ports, from 1) of multi-NIC hosts; "
                        "default all")
    p.add_argument("--datapath", choices=("auto", "kernel", "user"), default="auto")
    p.add_argument("--lb", default=LB.default(), metavar="MODE[,MODE...]",
                   help="load balancing (default ecmp): the controller's, or the switches' "
                        "data plane (dlb, packet); a comma list adds a row per further mode "
                        f"(with the last --failover mode); one of {', '.join(LB_MODES)}")
    add_adaptive_args(p)
    p.add_argument("--hash-seed", type=parse_seed, default=None, metavar="per-switch|N",
                   help="ECMP hash seed: per-switch (default) or one N for every switch")
    p.add_argument("--queue-ms", type=float, default=30.0,
                   help="egress queue of every link, in ms at the link rate (default 30)")
    p.add_argument("--mtu", type=int, choices=ROCE_MTUS, default=4096,
                   help="RoCE path MTU the interfaces carry (default 4096; probes are "
                        "--frame-len bytes)")
    p.add_argument("--results", default="results", metavar="DIR")
    g = p.add_argument_group("under a collective (instead of probes): would the job survive?")
    g.add_argument("--workload", default=None, type=drill_workload,
                   metavar="{allreduce,allgather,reducescatter,alltoall,simai:FILE}",
                   help="run this collective (or training job, simai:FILE) while the faults "
                        "happen: the disturbed iteration against the others, "
                        "retransmissions, QPs out of retries "
                        "(experiments/drill/workload.py)")
    g.add_argument("--sizes", default=None, help="bytes per call (default 1M)")
    g.add_argument("--iterations", type=int, default=None,
                   help="calls per repeat (default 10), or a training job's iterations "
                        "(default 3)")
    add_training_args(g, iterations=False)
    add_transport_args(g)
    add_capture_arg(p)
    p.add_argument("--strict", action="store_true",
                   help="exit 3 when a repeat is emulator-bound (the machine, not the "
                        "fabric, limited the probes)")
    add_switch_agent_arg(p)
    drill_agent.add_arguments(p)


def parse_modes(text):
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if not modes or bad:
        raise ConfigError("--failover", f"{text!r}: use {', '.join(MODES)} (comma list)")
    return modes


def schedule_from(args, topo=None, out=print):
    """The fault schedule; with neither --fault nor --scenario, the first leaf uplink."""
    if args.fault and args.scenario:
        raise ConfigError("drill", "give --fault SPEC (repeatable) or --scenario FILE, not both")
    if args.scenario:
        return scenario.load_scenario(args.scenario)
    faults = args.fault
    if not faults:
        if topo is None:
            raise ConfigError("drill", "give --fault SPEC (repeatable) or --scenario FILE")
        faults = [default_fault(topo)]
        out(f"... no --fault given: cutting {faults[0]}, the first uplink of the first leaf")
    events, at = [], 0.5 if args.at is None else args.at
    for spec in faults:
        evs = scenario.fault_spec(spec, at_s=at, hold_s=args.hold)
        events += evs
        at = evs[-1].at_s + args.hold
    return sorted(events, key=lambda e: e.at_s)


# ---- probes -------------------------------------------------------------------

BFD_HOLDDOWN = "3:30"       # the controller's hold-down when the drill runs BFD


def holddown_for(args):
    """The controller's ``--bfd-holddown``: the user's, else BFD_HOLDDOWN with --bfd.
    Without BFD nothing is damped: a fast cut can look like a BFD failure to the
    controller ("carrier up, not live"), so damping is tied to running BFD."""
    given = getattr(args, "bfd_holddown", None)
    if given is not None:
        return given
    return BFD_HOLDDOWN if getattr(args, "bfd", None) else None


def restore_event(events):
    """The first restoring event of a repeat's injected ``events``: (t_ns, kind) or (None, None)."""
    for e in events:
        if e["kind"] in ("link_up", "switch_recover", "loss_stop", "controller_restart",
                         "cp_recover"):
            return e["t_ns"], e["kind"]
    return None, None


RESTORES = ("restore", "recover", "loss_stop")


class ProbeDrill(Mode):
    """The drill under probes on one failover mode's fabric: the schedule injected in
    every repeat, each probe flow's loss window and gaps, the controller's convergence."""

    def __init__(self, s, mode, args, events, base, out, predicted=None):
        super().__init__(s, mode)
        self.args, self.events, self.base, self.predicted = args, events, base, predicted
        self.say = lambda m: out(f"... [{mode}] {m}")
        self.page = ui.attached.of(args, s, f"drill, failover={mode}").__enter__()
        self.late = self.inj = self.watch = None
        self.routed = s.spec.control.routed     # BGP's routers repair, no controller

    def start(self):
        s, args, events = self.s, self.args, self.events
        scenario.check_targets(events, s.topo, s.fabric.flow_control)
        if self.routed:
            bgp_drill.settle(s)                     # converged before the first repeat
        elif args.bfd:
            self.interval = bfd.parse_interval(args.bfd)
            self.late = bfd.LateSends(s.topo, s.net)    # what OVS logs of late BFD sends
            self.late.mark()
            bfd.enable(s.topo, self.interval, progress=self.say, net=s.net)
            # sessions starting look like BFD downs: wait out their hold-down
            try:
                wait_for(lambda: s.spec.failover == Failover.NONE
                         or not ports_down(s.controller.converged()),
                         30, "the controller to route over every port after BFD came up")
            except RunFailed as e:
                raise RunFailed(bfd.unsettled(str(e), self.interval, self.late.read())) \
                    from None
        rails = parse_rails(args.rails)
        if args.probes == "paths":
            self.pairs, self.paths = path_pairs(s, planned_flows(s.topo, "paths", args.qps,
                                                                 rails))
        else:
            self.pairs = probe_pairs(s.topo, args.qps or 4, rails)
            self.paths = flow_paths(s, self.pairs)
        if not self.pairs:
            raise ConfigError("drill", "the fabric needs hosts on two leaves")
        self.say(f"{sum(len(q) for *_, q in self.pairs)} probe flows over {len(self.pairs)} "
                 f"host pairs ({args.probes}) at {args.pps:g} pps each")
        self.crossing = self.page.show_flows(
            self.paths, {k: crosses(p, events, s.topo) for k, p in self.paths.items()})
        self.watch = s.adaptive and drill_adaptive.Watch(s, self.pairs, self.paths)
        self.inj = Injector(s, detect=parse_detect(args.detect))
        self.expected = fault_ports(events, s.topo)

    def repeat(self, r):
        s, args, events, late = self.s, self.args, self.events, self.late
        n0 = len(self.inj.events)
        t_start = time.monotonic()
        if late:
            late.mark()
        updates0 = bgp_drill.updates(s) if self.routed else None
        sent, recv, timelines, dur, fid = drill_traffic.repeat(
            s, self.inj, self.pairs, events, args, os.path.join(s.dir, f"repeat{r}"),
            before=self.watch and self.watch.snapshot)
        late_bfd = late.read() if late else None
        fid = fidelity.spurious_downs(fid, unexpected_downs(
            s.controller.converged() if s.controller else [], t_start, self.expected,
            s.topo), late_bfd)
        if late_bfd is not None:
            fid = dict(fid, bfd_late_sends=late_bfd)
        evs = self.inj.events[n0:]
        if self.watch:
            self.paths, self.crossing = self.watch.paths(events)
        t_fault = evs[0]["t_ns"]
        t_rest, _ = restore_event(evs)
        calm_from = t_fault - int(0.9 * events[0].at_s * 1e9)   # after "flowing"
        flows = {k: dict(flow_result(recv.get(k), n, t_fault, t_rest, args.pps, dur,
                                     calm_from),
                         crosses=self.crossing.get(k), path=self.paths.get(k))
                 for k, n in sorted(sent.items())}
        for f in flows.values():
            f["local"], f["exposed"] = bgp_drill.classify(f["path"], events, s.topo)
        routed = {}
        if self.routed:
            routed["bgp"] = bgp_drill.verdict(s, evs, t_fault, t_rest, updates0)
            conv = bgp_drill.as_controller(routed["bgp"])
        else:
            with open(s.controller.log_path, errors="replace") as f:
                conv = controller_convergence(f.read(), t_fault, t_rest)
        verdict = {"repeat": r, "events": evs, "flows": flows, "controller": conv, **routed,
                   "fidelity": fid,
                   "switch_agent": drill_agent.for_repeat(s, conv, t_fault, self.predicted),
                   **({"adaptive": self.watch.reaction(evs)} if self.watch else {})}
        self.page.repeats.append(verdict)
        if r == 0 and self.page.keep(timelines):      # kept for report.html too
            drill_traffic.plot(timelines, t_fault, t_rest, self.crossing,
                 os.path.join(self.base, f"throughput-{file_part(self.mode)}.png"),
                 self.mode)
        return verdict

    def settle(self, verdict):
        if self.routed:                # sessions back, every FIB as it was
            bgp_drill.settle(self.s)
            return
        t_rest, rest_kind = restore_event(verdict["events"])
        try:
            wait_restored(self.s, self.s.spec.failover, t_rest, kind=rest_kind)
        except RunFailed as e:     # ports still down: BFD's hold-down kept doubling
            if not (self.late and ports_down(self.s.controller.converged())):
                raise
            raise RunFailed(bfd.unsettled(str(e), self.interval, self.late.read(),
                                          "after the restore")) from None

    def line(self, verdict):
        return summary_line(verdict)

    def finish(self, repeats):
        s = self.s
        problems = s.results.get("controller", {}).get("problems", [])
        return {"mode": self.mode, "results_dir": s.dir,
                "timings": s.results.get("timings", {}),
                "captures": s.results.get("captures"), "lossless": s.results.get("lossless"),
                "repeats": repeats, "summary": dict(summarise(repeats), **(
                    {"adaptive": drill_adaptive.split(repeats, self.events, s.topo)}
                    if self.watch else {})),
                "controller_problems": problems,
                **drill_agent.mode_entries(repeats, self.predicted)}

    def close(self):
        try:
            if self.inj is not None:
                self.inj.close()
        finally:
            self.page.__exit__(None, None, None)


def prepare(args):
    """What a drill implies before its spec is built: BFD's hold-down (``holddown_for``)."""
    args.bfd_holddown = holddown_for(args)


def file_part(label):
    """A row's label as a file name's part (``openflow/controller``: ``openflow-controller``)."""
    return str(label).replace("/", "-")


def mode_plan(spec, args):
    """[(label, RunSpec changes)]: the rows of the drill's table.  Under OpenFlow one per
    ``--failover`` mode with the first ``--lb``, then one per further ``--lb`` (data-plane
    DLB) with the last failover mode; under BGP one (``bgp+bfd``: its own repair)."""
    controls = [c or spec.control for c in parse_controls(args.control)]
    lbs = parse_lbs(args.lb)
    failovers = parse_modes(args.failover)
    rows = []
    for c in controls:
        if c.routed:
            rows.append((f"{c}+bfd", {"control": c, "lb": LB.ECMP}))
            continue
        tag = f"{c}/" if len(controls) > 1 else ""
        for f in failovers:
            rows.append((f"{tag}{f}" + (f"+{lbs[0]}" if lbs[0] != LB.ECMP else ""),
                         {"control": c, "failover": f, "lb": lbs[0]}))
        for lb in lbs[1:]:
            rows.append((f"{tag}{failovers[-1]}+{lb}",
                         {"control": c, "failover": failovers[-1], "lb": lb}))
    return rows


def parse_lbs(text):
    """``--lb ecmp,dlb`` -> [LB]."""
    try:
        out = [LB.parse(x.strip(), "--lb") for x in str(text).split(",") if x.strip()]
    except ValueError as e:
        raise ConfigError("--lb", str(e)) from None
    if not out:
        raise ConfigError("--lb", f"{text!r}: a load-balancing mode or a comma list")
    return out


def predictions(spec, args, events, openflow, topo, agent, base, out):
    """{failover mode: the switch agents' predicted convergence} of the OpenFlow rows
    with the first OpenFlow row's load balancing (``drill_agent.predictions``)."""
    if not openflow:
        return {}
    first = openflow[0]
    of_spec = spec.replace(control=first["control"], lb=first["lb"])
    modes = list(dict.fromkeys(c["failover"] for c in openflow if c["lb"] == first["lb"]))
    dp_type = datapath.detect(spec.datapath)[0]
    return drill_agent.predictions(of_spec, args, events, modes, topo, agent, dp_type, base,
                                   out, ProbeDrill)


def main(spec, args, out=print):
    """``emulator drill``: returns the exit status."""
    fabric = spec.fabric
    plan = mode_plan(spec, args)
    parse_detect(args.detect)
    agent = switch_agent.for_run(spec.switch_agent, fabric, spec.controller)
    for _, changes in plan:       # each row's own checks (BGP's refusals), before any build
        check_spec(spec.replace(**changes))
    openflow = [c for _, c in plan if not c["control"].routed]
    if args.bfd and openflow:
        bfd.parse_interval(args.bfd)
        if fabric.cluster is not None:
            raise ConfigError("--bfd", "BFD sessions run on one machine only: not with "
                                       "--servers")
    if spec.bfd_holddown is not None:
        parse_holddown(spec.bfd_holddown)
    topo = addressing.plan(fabric)
    events = schedule_from(args, topo, out)
    scenario.check_targets(events, topo, fabric.flow_control)
    if args.repeat < 1:
        raise ConfigError("--repeat", "at least 1")
    if args.qps is not None and args.qps < 1:
        raise ConfigError("--qps", "at least 1")
    try:
        resolution = parse_duration(str(args.resolution)) * 1e3
    except ValueError:
        resolution = 0
    if not resolution > 0:
        raise ConfigError("--resolution", f"{args.resolution!r}: a time such as 1ms or 2ms")
    rails = parse_rails(args.rails)
    planned = planned_flows(topo, args.probes, args.qps, rails)
    if openflow:               # the smaller budget when OpenFlow's fabric is among them
        dp_type = datapath.detect(spec.datapath)[0]
        used, _ = layout.resolve(fabric, os.cpu_count() or 1, dp_type, os.environ)
        known = calibrate.cached_budget(dp_type, args.frame_len, layout=used)
    else:
        known = calibrate.cached_budget(calibrate.ROUTED, args.frame_len,
                                        control=plan[0][1]["control"])
    args.pps, note = probe_rate(topo, planned, args.frame_len, resolution, known, args.pps)
    if note:
        out(f"... {note}")
    for c in dict.fromkeys(c["control"] for _, c in plan):
        calibrate.say_load([(args.pps * n * args.frame_len * 8, args.frame_len,
                             budget.path_hops(topo, s, d)) for s, d, n in planned],
                           args.frame_len, spec.datapath, out, spec.replace(control=c).fabric)
    base = os.path.abspath(os.path.join(spec.results, time.strftime("drill-%Y%m%d-%H%M%S")))
    os.makedirs(base, exist_ok=False)
    run_yaml.write(base, spec, command=command_doc("drill", args))
    changes = dict(plan)
    predicted = predictions(spec, args, events, openflow, topo, agent, base, out)

    def make(s, m):
        c = changes[m]
        p = (None if c["control"].routed or c["lb"] != openflow[0]["lb"]
             else predicted.get(c["failover"]))
        return ProbeDrill(s, m, args, events, base, out, p)
    results = each_mode(spec.replace(results=base), lambda m: changes[m], list(changes),
                        args.repeat, make, out)
    doc = {"events": [vars(e) for e in events], "args": command_doc("drill", args)["options"],
           "modes": results, "switch_agent": drill_agent.doc_entry(agent)}
    with open(os.path.join(base, "drill.json"), "w") as f:
        json.dump(doc, f, indent=1)
    out(table(results))
    if len(plan) > 1 or plan[0][1]["control"].routed:
        out(control_table(results))
    for line in drill_adaptive.lines(results):
        out(line)
    drill_agent.print_text(agent, results, out)
    for r in results:
        if r.get("lossless"):
            out(f"[{r['mode']}] " + pfc_text(r["lossless"]))
        for name, n in sorted((r.get("captures") or {}).items()):
            out(f"capture [{r['mode']}]: {os.path.join(r['results_dir'], name)} ({n} packets)")
    out(f"results: {base}/drill.json, plots throughput-<mode>.png")
    bad = [r["mode"] for r in results if r["controller_problems"]]
    if bad:
        out(f"controller problems in {', '.join(bad)}")
        return 1
    if spec.strict and any(r["summary"]["emulator_bound_repeats"]
                                              for r in results):
        out("--strict: some repeats were emulator-bound; exit status 3")
        return 3
    return 0
