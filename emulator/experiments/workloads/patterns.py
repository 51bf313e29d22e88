"""A network's traffic patterns on a dragonfly: ``adversarial`` and ``permutation``.

Model.  Every host writes ``size`` bytes to one other host at once, paced
at its link rate over RoCE RC (one ``traffic job`` engine process runs every
host's NIC: a send and a receive per host): the hosts *inject at their link
rate* and the network accepts what it can.

* ``adversarial``: host k of group i -> host k of group i+1 (every flow of
  a group on the one global link to the next group under minimal routing);
* ``permutation``: a random permutation of the hosts drawn from ``seed``
  (no host to itself).

Measured, per host: the accepted throughput of the flow it sends, as a
fraction of its injection rate = size / (its transfer's network time, from
its start to the last byte acknowledged) / link rate; ``throughput_fraction`` is the mean over hosts
(``min_fraction`` the lowest).  Per switch-to-switch link direction: the
utilisation over the run (bytes sent / (time x rate)), summarised for the
local and the global links.  Beside it the fluid ceilings of the pattern
(emulator.fabric.analysis.fluid) for each routing mode.
"""

import json
import os
import re
import time

from emulator.errors import ConfigError, RunFailed
from emulator.experiments.measure.watch import Watch
from emulator.experiments.training.launch import job_fidelity, run_engine
from emulator.fabric.analysis import fluid
from lab.modes import LB, Entropy, Routing

PATTERNS = ("adversarial", "permutation")


def pairs_for(fabric, pattern, seed=1):
    """[(src host, dst host)] of ``pattern`` on ``fabric``; ConfigError if it has no groups."""
    if pattern not in PATTERNS:
        raise ConfigError("--workload", f"unknown pattern {pattern!r} (one of {PATTERNS})")
    if not all(n.pod is not None for n in fabric.switches) or len(
            {n.pod for n in fabric.switches}) < 2:
        raise ConfigError("--workload", f"{pattern} needs a fabric of groups: run it on "
                                        "-p dragonfly or -p dragonfly-plus")
    if pattern == "adversarial":
        return fluid.adversarial(fabric)
    return fluid.permutation(fabric, seed)


def check_routing(fabric, routing):
    """``--routing`` other than minimal needs a fabric of groups (exit 2 otherwise)."""
    if routing != Routing.MINIMAL and not (all(n.pod is not None for n in fabric.switches)
                                     and len({n.pod for n in fabric.switches}) > 1):
        raise ConfigError("--routing", f"{routing} routing is a dragonfly's: run it on "
                                       "-p dragonfly or -p dragonfly-plus")


def entropy(lb, routing):
    """The NICs' entropy mode: the ``--lb`` one (lab.modes.LB.entropy), but per
    flowlet under Valiant routing with ECMP (each flowlet draws its own group)."""
    lb, routing = LB(lb), Routing(routing)
    return str(Entropy.FLOWLET if routing != Routing.MINIMAL and lb == LB.ECMP
               else lb.entropy)


def job_document(session, pairs, size, extra=None):
    """The ``traffic.jobs.config`` document: one rank per host, each sending ``size``
    bytes to its destination and receiving from its source (send first: eager)."""
    hosts = session.topo["hosts"]
    index = {h["name"]: i for i, h in enumerate(hosts)}
    src_of = {d: s for s, d in pairs}
    endpoints = [{"netns": f"/proc/{session.net.hosts[h['name']].pid}/ns/net",
                  "intf": h["ports"][0]["port"], "ip": h["ports"][0]["ip"],
                  "mac": h["ports"][0]["mac"], "name": h["name"],
                  "rate_bps": h["ports"][0]["rate_bps"]} for h in hosts]
    programs = [[] for _ in hosts]
    for s, d in pairs:
        programs[index[s]].append({"op": "send", "id": f"{s}>{d}", "peer": index[d],
                                   "bytes": size})
    for d, s in src_of.items():
        programs[index[d]].append({"op": "recv", "id": f"{s}>{d}", "peer": index[s],
                                   "bytes": size})
    doc = {"endpoints": endpoints, "ranks": list(range(len(hosts))), "programs": programs,
           "mtu": getattr(session, "mtu", 4096)}
    doc.update({k: v for k, v in (extra or {}).items() if v is not None})
    return doc


def fractions(pairs, result, link_bps):
    """[{host, dst, fraction}]: each flow's accepted rate over the injection rate, from
    its transfer's network time in the job result (None: it never completed)."""
    by_id = {c["id"]: c for c in result["collectives"]}
    out = []
    for s, d in pairs:
        c = by_id.get(f"{s}>{d}", {})
        t = c.get("network_s")
        frac = None if not t or c.get("wrong") else round(
            min(1.0, c["bytes"] * 8 / t / link_bps), 4)
        out.append({"host": s, "dst": d, "fraction": frac,
                    "time_s": None if t is None else round(t, 4)})
    return out


def utilisation(topo, before, after, seconds):
    """{"local": {...}, "global": {...}}: mean and max utilisation of the switch-to-switch
    link directions, a link being global when its ends' pods differ."""
    pod = {sw["name"]: sw.get("pod") for sw in topo["switches"]}
    got = {"local": [], "global": []}
    for sw in topo["switches"]:
        for p in sw["ports"]:
            if p["peer"] not in pod or not before.get(p["intf"]) or not after.get(p["intf"]):
                continue
            tx = after[p["intf"]][0] - before[p["intf"]][0]
            kind = "global" if pod[p["peer"]] != pod[sw["name"]] else "local"
            got[kind].append(tx * 8 / seconds / p["rate_bps"])
    return {k: {"links": len(v), "mean": round(sum(v) / len(v), 4) if v else None,
                "max": round(max(v), 4) if v else None} for k, v in got.items()}


VALIANT_GROUPS = (1 << 28, 1 << 30)     # controller.dragonfly's select groups' ids
STAMP = "set_field:02:df:00:"           # a bucket stamping an intermediate group


def bucket_bytes(groups_text, stats_text):
    """(stamped, all) bytes sent through the Valiant groups of one switch, from
    ``ovs-ofctl dump-groups`` (which buckets stamp) and ``dump-group-stats``."""
    stamped = set()
    for line in groups_text.splitlines():
        m = re.search(r"group_id=(\d+)", line)
        if not m or not VALIANT_GROUPS[0] <= int(m.group(1)) < VALIANT_GROUPS[1]:
            continue
        for part in line.split("bucket=bucket_id:")[1:]:
            if STAMP in part:
                stamped.add((int(m.group(1)), int(part.split(",", 1)[0])))
    mine = every = 0
    for line in stats_text.splitlines():
        m = re.search(r"group_id=(\d+)", line)
        if not m or not VALIANT_GROUPS[0] <= int(m.group(1)) < VALIANT_GROUPS[1]:
            continue
        for b, nbytes in re.findall(r"bucket(\d+):packet_count=\d+,byte_count=(\d+)", line):
            every += int(nbytes)
            mine += int(nbytes) * ((int(m.group(1)), int(b)) in stamped)
    return mine, every


def nonminimal_share(session):
    """Share of the bytes hosts sent that went through an intermediate group (None
    where no switch has Valiant groups: minimal routing sends nothing so)."""
    mine = every = 0
    for sw in session.topo["switches"]:
        try:
            ovs = session.net.ovs(sw["name"])
            a, b = bucket_bytes(ovs.ofctl("dump-groups", sw["bridge"], timeout=10),
                                ovs.ofctl("dump-group-stats", sw["bridge"], timeout=10))
        except RunFailed:
            continue
        mine, every = mine + a, every + b
    return round(mine / every, 4) if every else None





def ugal_share(session):
    """Share of the bytes hosts sent that the routers' UGAL sent through an
    intermediate group (its decisions' counters, dataplane.adaptive.ugal)."""
    stage = getattr(session, "adaptive", None)
    return stage.summary()["nonminimal_share"] if stage is not None else None


def summary(per_host):
    done = [p["fraction"] or 0.0 for p in per_host]
    return (round(sum(done) / len(done), 4) if done else 0.0,
            round(min(done), 4) if done else 0.0)


def run_pattern(session, pattern, size, seed=1, extra=None, progress=print):
    """Run ``pattern`` on the session's fabric (one job-engine process for every host);
    return its report (results.json ``pattern``)."""
    topo, net = session.topo, session.net
    pairs = pairs_for(session.fabric, pattern, seed)
    link = min(h["ports"][0]["rate_bps"] for h in topo["hosts"])
    out_dir = os.path.join(session.dir, "pattern")
    os.makedirs(out_dir, exist_ok=True)
    cfg_path, res_path = (os.path.join(out_dir, f"job.{x}.json") for x in ("config", "result"))
    with open(cfg_path, "w") as f:
        json.dump(job_document(session, pairs, size, extra), f)
    ceilings = fluid.ceilings(session.fabric, pairs)
    low = max(0.05, ceilings["minimal"]["saturation"] / 2)
    timeout = 120 + 4 * size * 8 / link / low
    progress(f"{pattern}: {len(pairs)} hosts each write {size} bytes to one host at "
             f"{link / 1e6:g} Mbit/s (one job engine)")
    before = net.intf_counters()
    watch = Watch(session).start()
    t0 = time.monotonic()
    rc = run_engine(cfg_path, res_path, out_dir, timeout, f"{pattern} job")
    watch.stop()
    t1 = time.monotonic()
    after = net.intf_counters()
    routing = session.routing
    share = ugal_share(session) if Routing(routing).adaptive else \
        nonminimal_share(session) if routing != Routing.MINIMAL else 0.0
    if rc not in (0, 1) or not os.path.exists(res_path):
        raise RunFailed(f"the {pattern} job failed (exit {rc}); log: "
                        f"{out_dir}/job.log")
    with open(res_path) as f:
        result = json.load(f)
    per_host = fractions(pairs, result, link)
    mean, lowest = summary(per_host)
    seconds = max((p["time_s"] or 0 for p in per_host), default=0) or (t1 - t0)
    return {"pattern": pattern, "seed": seed if pattern == "permutation" else None,
            "size": size, "link_bps": link, "hosts": len(pairs),
            "throughput_fraction": mean, "min_fraction": lowest, "per_host": per_host,
            "utilisation": utilisation(topo, before, after, seconds),
            "nonminimal_share": share,
            "ceilings": ceilings, "wrong": result["job"]["wrong"],
            "failed_qps": result["job"]["failed_qps"],
            "time_s": round(seconds, 3), "engine": result["engine"],
            "fidelity": job_fidelity(watch, result, (t0, t1))}


def lines(rep, routing=None):
    """Text lines of a pattern report."""
    c = rep["ceilings"]
    mode = routing or Routing.MINIMAL
    ceiling = c.get(mode, c["optimum"])
    u = rep["utilisation"]
    return [f"{rep['pattern']}" + (f" (seed {rep['seed']})" if rep["seed"] is not None else "")
            + f": {rep['hosts']} hosts x {rep['size']} bytes at {rep['link_bps'] / 1e6:g} "
              f"Mbit/s, {rep['time_s']:.2f} s",
            f"  accepted throughput / injection: mean {rep['throughput_fraction']:.3f}, "
            f"lowest {rep['min_fraction']:.3f}; fluid ceiling ({mode}) mean "
            f"{ceiling['mean']:.3f}, saturation {ceiling['saturation']:.3f}; optimum "
            f"(minimal + Valiant) {c['optimum']['mean']:.3f} / {c['optimum']['saturation']:.3f}",
            f"  link utilisation: local mean {u['local']['mean']} max {u['local']['max']}; "
            f"global mean {u['global']['mean']} max {u['global']['max']}; sent "
            f"non-minimally: {rep.get('nonminimal_share')}",
            f"  fidelity: {rep['fidelity']['verdict']}"]
