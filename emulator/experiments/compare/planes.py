"""``emulator compare --planes``: HPN dual-plane vs the single-plane fabric.

Model.  Alibaba HPN splits the uplinks of each ToR pair into two planes: ToR
A of every pair uplinks only to the plane-1 spines, ToR B only to plane 2.
A host's bond picks the plane (its NIC hash); inside the plane one ECMP hash
at the ToR picks the spine, and the spine has exactly one way down to the
destination host (its plane's ToR).  In the single-plane fabric every ToR
uplinks to every spine and the spine hashes a second time, over the
destination's two ToRs.  When every fabric switch has the same hash seed (as
switches built from one ASIC do: ``Session(seed=N)``), that second hash is
correlated with the first: OVS ranks select buckets by ``hash(bucket id,
flow hash)``, so the flows a ToR sent to its bucket-0 spine all leave that
spine through its bucket 0 (the destination's ToR A), those of bucket 1
through ToR B.  Some spine->ToR downlinks carry double, others nothing, and
the queues of the double ones grow.

Method.  The same hosts and workload run on both fabrics
(``presets.build("dual-plane", ...)`` with ``planes=2`` and ``planes=1``;
by default ``oversubscription=1``, so each ToR has the same uplink capacity:
two links at full rate vs four at half rate) under two seedings:

* ``shared``: one seed for every fabric switch (``seed0 + repetition``);
* ``per-switch``: every switch its own seed, drawn per repetition (the same
  switch name gets the same seed in both fabrics).

The NIC switches (the hosts' bonds) keep their own seeds (the addressing
plan's, ``h<k>.nic``: k) in every run, so the NIC stage is the same in both
fabrics and every repetition; a shared seed equal to one of them would
correlate that bond with the fabric and is refused (the default shared seeds
are 101, 102, ...).  Each run is a fresh Session with ECMP (``Session(lb="ecmp")``),
deep egress queues (``--queue-ms 2000``, the lossless stand-in for PFC of
``compare``) and a many-QP collective (default AlltoAll, 8 QPs per
connection).  While it runs a thread reads every switch port's TBF shaper
(backlog, drops, bytes sent) in one netlink dump every ``--sample-ms``
(``shaping.QdiscReader``).  Per run:

* busbw and efficiency of the collective (largest size);
* per tier (NIC->ToR, ToR->spine, spine->ToR, ToR->NIC): bytes per link
  over the run, max/mean, Jain's index, idle links (< 2% of the tier mean);
* per tier: the egress backlog over the collective's busy window (samples
  whose fabric-wide send rate is above 10% of the peak): max in bytes and
  ms at the link rate, p95 and mean over all (link, sample) pairs, in ms.

The receivers count lost packets (PSN gaps, warm-up call included).  With
2000 ms queues the fabric model loses nothing unless a queue overflows (then
``qdisc drops`` says so); packets lost with no qdisc drop were lost by the
platform (a starved ovs-vswitchd or receiver on 2 shared cores) and make the
run *disturbed*, as does a fidelity verdict other than faithful: it is
repeated (``--retries``, default once) and, if still disturbed, kept and
marked.  OVS's own drop counters of the run's ports are
recorded beside it (``ovs_drops``).

The summary is the median over repetitions per (fabric, seeding), with
single/dual as the ratio of the two medians; drops, losses and #wrong are
summed over the repetitions.  Output: a table, and
``<results>/<time>-planes/planes.json`` and ``planes.png``.
"""

import os

from emulator.dataplane.observe import run_yaml
from emulator.dataplane.session import Session, make_results_dir, write_json
from emulator.errors import ConfigError
from emulator.experiments.compare.planes_stats import (
    FABRICS,
    PRESET,
    SEEDINGS,
    TIERS,
    analyse,
    build_fabrics,
    draw_seeds,
    fabric_params,
    nic_seeds,
    reseed,
    shaped_ports,
    summarize,
    table,
    worst_series,
)
from emulator.experiments.measure.queues import QueueSampler, ovs_drops
from emulator.experiments.spec.build import command_doc
from emulator.experiments.spec.options import compare_defaults
from emulator.experiments.workloads import collective
from emulator.experiments.workloads.collective import parse_sizes
from emulator.fabric import presets
from emulator.report.files import pyplot
from lab.modes import LB, Entropy


def disturbed(run):
    """Packets lost outside the shaped queues: the platform (a starved
    ovs-vswitchd or receiver on 2 shared cores), not the fabric, lost them;
    or the fidelity verdict says the machine set the pace."""
    return (run["lost"] > 0 and run["drops"] == 0) or run["fidelity"] != "faithful"


def run_measured(spec, fabric, label, seeding, seed, args, retries=1, progress=print):
    """``run_one``, repeated up to ``retries`` times while the run is ``disturbed``."""
    for attempt in range(retries + 1):
        r = run_one(spec, fabric, label, seeding, seed, args, progress=progress)
        r["attempt"] = attempt + 1
        if not disturbed(r):
            break
        why = (f"{r['lost']} packets lost outside the switch queues"
               if r["lost"] > 0 and r["drops"] == 0 else r["fidelity"])
        progress(f"... {label} {seeding} seed {seed}: {why} (platform, not fabric)"
                 + ("; repeating" if attempt < retries else "; keeping it, marked disturbed"))
    r["disturbed"] = disturbed(r)
    return r


def run_one(spec, fabric, label, seeding, seed, args, progress=print):
    """One Session of ``fabric`` (ECMP) running the collective; its measurements."""
    with Session(spec.replace(fabric=fabric, lb=LB.ECMP,
                              hash_seed=seed if seeding == "shared" else None)) as s:
        ports = shaped_ports(s.topo)
        sampler = QueueSampler(ports, args.sample_ms / 1000.0, s.net.intf_netns())
        sampler.start()
        try:
            rep = collective.run_collective(s, spec.workload, args.size_list,
                                            qps=args.qps, rank_extra={"entropy": Entropy.QP})
        finally:
            sampler.stop()
        row = rep["rows"][-1]
        out = {"fabric": label, "seeding": seeding, "seed": seed, "dir": s.dir,
               "busbw_Mbps": row["busbw_Mbps"], "efficiency": row["efficiency"],
               "time_s": row["time_s"], "wrong": sum(r["wrong"] for r in rep["rows"]),
               "samples": len(sampler.times),
               "sampler_read_ms_per_sample": round(
                   1000 * sampler.read_s / max(1, len(sampler.times)), 3),
               "table": rep["table"], "fidelity": rep["fidelity"]["verdict"],
               "fidelity_reasons": rep["fidelity"]["reasons"],
               "hash_seeds": {sw["name"]: sw["hash_seed"] for sw in s.topo["switches"]}}
        out.update(analyse(ports, sampler.times, sampler.backlog, sampler.sent,
                           sampler.drops))
        # packets the receivers counted lost (PSN gaps), warm-up call included
        out["lost"] = collective.rank_totals(os.path.join(s.dir, "collective"), "dropped_packets")
        out["ovs_drops"] = ovs_drops([p["intf"] for sw in s.topo["switches"]
                                      for p in sw["ports"]], s.net)
        out["series"] = worst_series(ports, sampler.times, sampler.backlog)
    out["controller_problems"] = s.results.get("controller", {}).get("problems", [])
    lk, q = out["links"], out["queues"]
    progress(f"... {label:12s} {seeding:10s} seed {seed}: busbw {out['busbw_Mbps']:.2f} Mb/s "
             f"(eff {out['efficiency']:.3f}), spine->ToR max/mean "
             f"{lk['spine_tor']['max_over_mean']} idle {lk['spine_tor']['idle']}/"
             f"{lk['spine_tor']['links']}, queue max ms ToR->spine "
             f"{q['tor_spine']['max_ms']} spine->ToR {q['spine_tor']['max_ms']} ToR->NIC "
             f"{q['tor_nic']['max_ms']}, lost {out['lost']}, #wrong {out['wrong']}, "
             f"{out['fidelity']}")
    return out


def plan_runs(fabrics, seedings, reps, seed0):
    """[(label, Fabric, seeding, shared seed)] in run order: both fabrics back to
    back for every (repetition, seeding), so machine load hits them alike."""
    plan = []
    switches = sorted({n.name for f in fabrics.values() for n in f.switches})
    nics = {seed: name for f in fabrics.values() for name, seed in nic_seeds(f).items()}
    for rep in range(reps):
        if "shared" in seedings and seed0 + rep in nics:
            raise ConfigError("--seed", f"shared seed {seed0 + rep} is the bond hash seed of "
                              f"{nics[seed0 + rep]}: the bond would hash like the switches; "
                              f"use a seed above {max(nics)}")
        for seeding in seedings:
            for label in FABRICS:
                fabric = fabrics[label]
                if seeding == "per-switch":
                    fabric = reseed(fabric, draw_seeds(switches, f"switch-{seed0}-{rep}"))
                plan.append((label, fabric, seeding, seed0 + rep))
    return plan


def plot(runs, path):
    """Worst backlog per tier over time (first repetition of each fabric x seeding),
    and the spine->ToR bytes per link of the first shared-seed pair."""
    plt = pyplot()
    firsts = {}
    for r in runs:
        firsts.setdefault((r["seeding"], r["fabric"]), r)
    seedings = [s for s in SEEDINGS if any(k[0] == s for k in firsts)]
    fig, axes = plt.subplots(len(seedings) + 1, 2, figsize=(11, 2.6 * (len(seedings) + 1)),
                             squeeze=False)
    for row, seeding in enumerate(seedings):
        for col, fab in enumerate(FABRICS):
            ax = axes[row, col]
            r = firsts.get((seeding, fab))
            if r is None:
                ax.axis("off")
                continue
            for key, lab, _ in TIERS:
                ax.plot(r["series"]["t"], r["series"][key], lw=0.9, label=lab)
            ax.set_title(f"{fab}, {seeding} seed: busbw {r['busbw_Mbps']:.2f} Mb/s",
                         fontsize=9)
            ax.set_ylabel("worst backlog, ms")
            ax.set_xlabel("s since the sampler started", fontsize=8)
            ax.legend(fontsize=7, loc="upper right")
    ax_row = axes[len(seedings)]
    for col, fab in enumerate(FABRICS):
        ax = ax_row[col]
        r = firsts.get((seedings[0], fab)) if seedings else None
        if r is None:
            ax.axis("off")
            continue
        links = sorted((k, v["bytes"]) for k, v in r["per_link"].items()
                       if v["tier"] == "spine_tor")
        mean = sum(b for _, b in links) / len(links) if links else 1
        ax.bar(range(len(links)), [b / mean if mean else 0 for _, b in links])
        ax.set_xticks(range(len(links)))
        ax.set_xticklabels([k.replace("spine", "s").replace("leaf", "l") for k, _ in links],
                           rotation=90, fontsize=6)
        ax.set_title(f"{fab}, {seedings[0]} seed: spine->ToR bytes / mean", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(spec, args, out=print):
    """``emulator compare --planes`` (``compare planes``): returns the exit status."""
    if getattr(args, "fabric", None):
        raise ConfigError("--planes", "builds the dual-plane preset and its single-plane "
                          "counterpart; give -P parameters, not a fabric file")
    if (getattr(args, "preset", None) or PRESET) != PRESET:
        raise ConfigError("--planes", f"compares the {PRESET} preset with planes=2 and "
                          f"planes=1, not {args.preset!r}")
    seedings = [s.strip() for s in args.seedings.split(",") if s.strip()]
    bad = [s for s in seedings if s not in SEEDINGS]
    if bad or not seedings:
        raise ConfigError("--seedings", f"{bad[0]!r}: one of {', '.join(SEEDINGS)}" if bad
                          else "none given")
    if args.reps < 1:
        raise ConfigError("--reps", "at least 1")
    if not 1 <= args.sample_ms <= 1000:
        raise ConfigError("--sample-ms", "between 1 and 1000")
    if getattr(args, "retries", 0) < 0:
        raise ConfigError("--retries", "0 or more")
    given = presets.parse_assignments(args.param)
    fabrics = build_fabrics(given)
    args.size_list = parse_sizes(args.sizes)
    plan = plan_runs(fabrics, seedings, args.reps, spec.hash_seed)
    base = make_results_dir(spec.results, "planes")
    run_yaml.write(base, spec, command=command_doc("compare planes", args))
    spec = spec.replace(results=base)
    out(f"# {spec.workload} {args.sizes}, {args.qps} QPs per connection, ECMP, "
        f"queues {spec.queue_ms:g} ms; {fabrics['dual-plane'].name} vs "
        f"{fabrics['single-plane'].name}; parameters "
        + " ".join(f"{k}={v}" for k, v in sorted(fabric_params(given).items())))
    runs = []
    for label, fabric, seeding, seed in plan:
        runs.append(run_measured(spec, fabric, label, seeding, seed, args, args.retries,
                                 progress=out))
    summary = summarize(runs)
    text = table(summary)
    write_json(os.path.join(base, "planes.json"),
               {"fabrics": {k: f.name for k, f in fabrics.items()},
                "params": fabric_params(given), "workload": spec.workload,
                "sizes": args.size_list, "qps": args.qps, "queue_ms": spec.queue_ms,
                "sample_ms": args.sample_ms, "seedings": seedings, "reps": args.reps,
                "summary": summary, "table": text, "runs": runs})
    plot(runs, os.path.join(base, "planes.png"))
    out(f"# medians over repetitions; results in {base}")
    out(text)
    full = [r for r in runs if r["drops"]]
    if full:
        out(f"# {len(full)} run(s) overflowed a {spec.queue_ms:g} ms switch queue "
            f"({', '.join(sorted({r['fabric'] + ' ' + r['seeding'] for r in full}))}): the "
            "lossless stand-in was too shallow there; a larger --queue-ms keeps it lossless")
    again = sum(r["attempt"] - 1 for r in runs)
    marked = sum(r["disturbed"] for r in runs)
    if again or marked:
        out(f"# {again} run(s) repeated after losing packets outside the switch queues or "
            f"an emulator-bound verdict; {marked} kept although disturbed")
    problems = [p for r in runs for p in r["controller_problems"]]
    if problems:
        out("controller reported problems:\n  " + "\n  ".join(problems[:10]))
    return 1 if problems or any(r["wrong"] for r in runs) else 0


def prepare(args):
    """What this comparison implies before its spec is built (spec.options): the
    dual-plane preset unless another was named (refused in ``main``)."""
    args.planes = True
    compare_defaults(args)
    if not (args.fabric or args.preset):
        args.preset = PRESET
