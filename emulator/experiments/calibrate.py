"""``emulator calibrate``: how much traffic this machine can emulate faithfully.

A small fabric (2 leaves, 1 spine, 2 hosts per leaf) is built with links far
faster than anything the machine can forward (10 Gbit/s, so no link limits a
trial), and one stream of RoCEv2 frames of the run's size is sent at a rate
found by doubling and bisection (``budget.search``): 1 switch hop (two hosts
on one leaf) and 3 hops (across the spine). A trial passes when nothing was
lost, the fidelity verdict is faithful and p99 latency stayed within a few
ms (nothing can queue on 10 Gbit/s links: latency is the emulator's). The
tail is judged on purpose: on a 2-core VM, judging p90 instead (the p99 of 3
hops was 3-9 ms at 100-400 Mbit/s, Open vSwitch a third busy) found 3 hops
at 28-48 kpps where the p99's medians were 7-10, yet the default fabric's
own mix at 80 % of that was emulator-bound, its senders behind schedule (so,
that day, was the mix at under 80 % of the p99's budget: docs/fidelity.md);
the p99 errs low, the side a budget should err on. A trial that failed while
the hypervisor stole CPU time from this virtual machine (a shared host's
neighbours) is run again: its latency was theirs.

One search still decides on single trials, and on a shared machine one busy
spell decides a trial.  So each path is searched ``searches`` times, the two
paths taking turns (a busy spell of the host falls on both), and the median
is cached with every search's figure beside it.

The result is cached per machine (``budget.machine_key``: host, CPU, cores,
kernel, OVS version, datapath, frame size) in ``CACHE``; ``run``, ``drill``
and ``compare`` read it before they start and warn when the load they will
offer does not fit.

``--control bgp`` measures the routed fabric's data plane the same way (the
same fabric, trials, criteria and search): the kernel forwarding between the
routers' namespaces, with the same shapers.  It is cached apart (key: FRR's
version and the datapath ``routed``), and a BGP run is held against it.
"""

import dataclasses
import json
import os
import time

from emulator.dataplane.observe.counters import busy_share, machine_cpu
from emulator.dataplane.ovs import datapath
from emulator.dataplane.ovs import datapath as dp
from emulator.dataplane.routed import frr
from emulator.dataplane.session import Session
from emulator.dataplane.system import proc
from emulator.experiments.measure import budget
from emulator.experiments.measure.fidelity import STEAL_WARN
from emulator.experiments.workloads.mix import measure, netns_of
from emulator.fabric import layout as layouts
from emulator.fabric import presets
from emulator.fabric.routing.addresses import next_hop_mac
from emulator.fabric.runspec import RunSpec
from lab.modes import Control
from traffic.roce.frames import frame_len_for_mtu

CACHE = "/var/cache/fabric-lab/calibration.json"
TRIAL_S = 2.0
SEARCHES = 3
LATENCY_LIMIT_MS = 5.0      # of the LATENCY_QUANTILE of a trial's one-way latency
LATENCY_QUANTILE = "p99"


def calibration_fabric():
    return presets.build("leaf-spine", {"spines": 1, "leaves": 2, "hosts_per_leaf": 2,
                                        "host_rate": "10Gbps", "uplink_rate": "10Gbps"})


def ovs_version():
    first = proc.run(["ovs-vswitchd", "--version"], timeout=10).splitlines()[0]
    return first.split()[-1]


def load_cache(path=CACHE):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def layout_key(layout):
    """The cache key's suffix of a datapath layout (none for shared: the keys of
    calibrations made before layouts existed stay valid)."""
    return "" if layout in (None, "shared") else f"|layout={layout}"


ROUTED = "routed"            # the datapath of a BGP run's key: the kernel's forwarding


def base_key(datapath, frame_len, control=Control.OPENFLOW):
    """The cache key of a calibration (without its layout): Open vSwitch's version and
    datapath, or under BGP FRR's version and ``routed``."""
    if Control(control).routed:
        return budget.machine_key(f"frr-{frr.version()}", ROUTED, frame_len)
    return budget.machine_key(ovs_version(), datapath, frame_len)


def cached_budget(datapath, frame_len, path=CACHE, layout="shared", control=Control.OPENFLOW):
    """The calibration of this machine and datapath ``layout`` for ``frame_len``, or
    for another frame size (a budget in packets carries over roughly: per-packet
    costs dominate), or None.  Another layout's budget never stands in: one
    instance and several differ by a factor (docs/datapath-instances.md); nor does
    another control plane's (``control``: the routed fabric forwards in the kernel)."""
    if Control(control).routed:
        layout = "shared"
    try:
        base = base_key(datapath, frame_len, control)
    except Exception:          # no OVS: no budget (the run itself will say why)
        return None
    suffix = layout_key(layout)
    cache = load_cache(path)
    if base + suffix in cache:
        return cache[base + suffix]
    machine = base.rsplit("|", 1)[0] + "|"
    others = [doc for k, doc in cache.items() if k.startswith(machine)
              and k.endswith(suffix) and (suffix or "|layout=" not in k)]
    return max(others, key=lambda d: d["frame_len"]) if others else None


def save(doc, path=CACHE):
    data = load_cache(path)
    data[doc["key"]] = doc
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def _trial(session, src, dst, rate, frame_len, log):
    sport, dport = src["ports"][0], dst["ports"][0]
    plan = {"duration": TRIAL_S, "frame_len": frame_len, "idle": 0.3,
            "streams": [{"name": src["name"], "netns": netns_of(session.net, src["name"]),
                         "intf": sport["port"], "src_mac": sport["mac"],
                         "src_ip": sport["ip"], "dst_mac": next_hop_mac(sport, dport),
                         "dst_ip": dport["ip"], "rate_bps": rate, "qps": 4}],
            "receivers": [{"name": dst["name"], "netns": netns_of(session.net, dst["name"]),
                           "intf": dport["port"]}]}
    res, doc = measure(session, plan, name=f"calibrate-{int(rate)}")
    sent = res["engine"]["sent_packets"]
    received = res["engine"]["received_packets"]
    ok = budget.trial_ok(sent, received, doc, LATENCY_LIMIT_MS, LATENCY_QUANTILE)
    lat = doc.get("latency_ms") or {}
    steal = doc["cpu"].get("machine_steal") or 0.0
    verdict = "ok" if ok else ("not faithful" if steal < STEAL_WARN
                               else "not faithful, hypervisor steal: again")
    log(f"{rate / 1e6:8.1f} Mbit/s  {sent / TRIAL_S / 1e3:6.1f} kpps  lost {sent - received:6d}"
        f"  p50/p90/p99 {lat.get('p50')}/{lat.get('p90')}/{lat.get('p99')} ms"
        f"  emulation drops {doc['emulation_drops']['total']}"
        f"  ovs-vswitchd {doc['cpu']['ovs_vswitchd']}  machine {doc['cpu'].get('machine')}"
        f"  steal {steal:.0%}  -> {verdict}")
    return ok, steal


def wait_quiet(out, busy_max=0.3, window_s=0.5, limit_s=10.0, sample=None,
               sleep=time.sleep):
    """Wait (at most ``limit_s``) until the machine was under ``busy_max`` busy for
    a ``window_s`` window: a calibration that starts while the previous run's
    teardown still occupies the CPU measures that, not the machine. Returns
    whether it got quiet."""
    sample = sample or machine_cpu
    waited = 0.0
    before = sample()
    while True:
        sleep(window_s)
        waited += window_s
        after = sample()
        share = busy_share(before, after)
        if share <= busy_max:
            return True
        if waited >= limit_s:
            out(f"... the machine stayed {share:.0%} busy for {limit_s:g} s: "
                f"calibrating anyway (the budget will be low)")
            return False
        before = after


def calibrate(mtu=4096, results="results", datapath="auto", out=print,
              max_bps=20e9, cache=CACHE, layout=None, searches=SEARCHES,
              control=Control.OPENFLOW):
    """Measure and cache this machine's budget for a datapath ``layout`` (None: the
    one a run would choose) or, under ``control`` bgp, for the routed fabric; the
    median of ``searches`` searches per path; returns the budget document."""
    if searches < 1:
        raise ValueError(f"searches={searches}: at least one search per path")
    frame_len = frame_len_for_mtu(mtu)
    fabric = calibration_fabric()
    if layout is not None:
        fabric = dataclasses.replace(fabric, layout=layout)
    spec = RunSpec(fabric, fabric_source={"calibration": True}, datapath=datapath, mtu=mtu,
                   results=results, control=control)
    with Session(spec, progress=lambda m: out(f"... {m}")) as s:
        used = s.results.get("layout", {}).get("layout", "shared")
        hosts = {h["name"]: h for h in s.topo["hosts"]}
        same = (hosts["h1"], hosts["h2"])           # both on leaf1: 1 switch hop
        across = (hosts["h1"], hosts["h3"])         # leaf1 -> spine1 -> leaf2: 3 hops
        found, steals = {"1 hop": [], "3 hops": []}, []
        wait_quiet(out)
        for n in range(searches):
            for label, (src, dst) in (("1 hop", same), ("3 hops", across)):
                out(f"... {label}, search {n + 1} of {searches}: {src['name']} -> "
                    f"{dst['name']}, {frame_len}-byte frames")
                def trial(rate, src=src, dst=dst):
                    ok, steal = _trial(s, src, dst, rate, frame_len,
                                       lambda m: out(f"    {m}"))
                    if not ok and steal >= STEAL_WARN:
                        steals.append(steal)
                    return ok, steal
                best, _ = budget.search(budget.unless_stolen(trial, STEAL_WARN),
                                        start_bps=100e6, max_bps=max_bps)
                found[label].append(best / (frame_len * 8))
        dp = s.results["datapath"]["type"]
    doc = budget.budget_doc(frame_len, budget.median(found["1 hop"]),
                            budget.median(found["3 hops"]),
                            base_key(dp, frame_len, control) + layout_key(used))
    doc["control"] = str(control)
    doc["searches"] = {"one_hop_pps": [round(x) for x in found["1 hop"]],
                       "three_hop_pps": [round(x) for x in found["3 hops"]]}
    doc["layout"] = used
    doc["measured_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
    doc["datapath"] = dp
    doc["trials_failed_under_steal"] = len(steals)
    save(doc, cache)
    out(f"this machine: {doc['one_hop_pps'] / 1e3:.1f} kpps through 1 hop, "
        f"{doc['three_hop_pps'] / 1e3:.1f} kpps through 3 hops of {frame_len}-byte frames"
        + (f" (the median of {searches} searches each)" if searches > 1 else ""))
    out(f"budget: {doc['hop_pps'] / 1e3:.1f}k switch-hop packets/s; leaf-spine-leaf traffic "
        f"stays faithful up to {doc['faithful_bps_3hop'] / 1e9:.2f} Gbit/s in all "
        f"(runs warn above {budget.SAFETY:.0%} of it); cached in {cache}")
    for label, rates in found.items():
        note = budget.spread_note(f"{label} ({frame_len}-byte frames per s)", rates)
        if searches > 1 and note:
            out(f"note: {note}")
    if steals:
        out(f"note: {len(steals)} trial(s) failed while the hypervisor took "
            f"{min(steals):.0%}-{max(steals):.0%} of this machine's CPU time (steal), and "
            "were run again: the host's neighbours were busy, so the budget may be low; "
            "calibrate again when the host is quieter")
    return doc


def known(mtu=4096, datapath="auto", layout=None, cache=CACHE, control=Control.OPENFLOW):
    """The budget runs would read for what ``calibrate`` with these arguments
    measures (``cached_budget``), or None: ``calibrate --if-missing`` (setup.sh)
    measures only a machine that has none."""
    if Control(control).routed:
        return cached_budget(ROUTED, frame_len_for_mtu(mtu), path=cache, control=control)
    dp_type, _ = dp.detect(datapath)
    used, _ = layouts.resolve(calibration_fabric(), os.cpu_count() or 1, dp_type, os.environ,
                              asked=layout)
    return cached_budget(dp_type, frame_len_for_mtu(mtu), path=cache, layout=used)


def say_load(streams, frame_len, datapath_request, out, fabric=None):
    """Print the share of this machine's cached budget, for the datapath layout
    ``fabric`` will run in, ``streams`` will use, or a warning."""
    control = fabric.control if fabric is not None else Control.OPENFLOW
    if Control(control).routed:        # the routers' kernels forward: their own budget
        fits, message = budget.check(streams, cached_budget(ROUTED, frame_len,
                                                            control=control))
        message = f"routed fabric (--control bgp): {message}"
        if not fits or "not known" in message:
            message += " (`emulator calibrate --control bgp` measures the routed budget)"
        out(f"... load: {message}" if fits else f"warning: {message}")
        return
    dp_type, _ = datapath.detect(datapath_request)
    layout = "shared"
    if fabric is not None:
        layout, _ = layouts.resolve(fabric, os.cpu_count() or 1, dp_type, os.environ)
    fits, message = budget.check(streams, cached_budget(dp_type, frame_len, layout=layout))
    if layout != "shared":
        message = f"layout {layout}: {message}"
    out(f"... load: {message}" if fits else f"warning: {message}")
