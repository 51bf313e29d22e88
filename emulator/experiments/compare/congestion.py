"""Congestion control compared on one workload: ``emulator compare --cc none,dcqcn``.

Model.  For each congestion-control mode (and repetition) a fresh Session
is built with ECN marking on every switch port (``--ecn``, dataplane.lossless.ecn)
and the collective runs over the RC transport with that mode at the
sending NICs (traffic.roce.dcqcn).  A sampler reads every switch port's egress
queue (TBF backlog, drops, bytes sent) every ``--sample-ms`` during the
collective.  Per run (``analyse``, pure):

- the *bottleneck*: the switch port whose queue was longest on average;
- its queue while it was busy (from its first to its last byte sent):
  max, p99 and mean, in bytes and in units of Kmax; and the p99 *after the
  first loop* (from when the queue, having passed Kmin, first falls back to
  Kmin): DCQCN's senders all start at line rate and the first loop's peak
  can dominate a short run's p99 (docs/transport.md);
- its utilisation: bytes it sent over its link rate x that busy time;
- fairness: Jain's index over the senders' throughputs (bytes over the
  time each sender's own call took);
- with two kinds of sender (a mode ``A+B``, e.g. ``dcqcn+nscc``: the senders
  take A and B in turn, each on the transport its congestion control rides,
  RoCE RC or UET, into one receiver that answers both): each kind's share of
  what the senders achieved, against its share of the senders;
- completion time, retransmissions, timeouts, CNPs and ECN marks, and
  ``died``: runs in which a QP ran out of retries (the job aborted).

``--queue-ms`` sets the buffers: deep (the default 2000 ms, a lossless
stand-in for PFC: congestion shows as queueing) or shallow (lossy: the
transport's go-back-N repairs the drops, at a price the table shows).
"""

import os

from emulator.dataplane.lossless import ecn as ecn_mod
from emulator.dataplane.lossless.ecn import default_ecn
from emulator.dataplane.observe import run_yaml
from emulator.dataplane.session import Session, make_results_dir, write_json
from emulator.errors import ConfigError
from emulator.experiments.measure.queues import QueueSampler
from emulator.experiments.measure.stats import jain, median, percentile
from emulator.experiments.spec import ccparams
from emulator.experiments.spec import uet as uet_spec
from emulator.experiments.spec.build import command_doc
from emulator.experiments.spec.options import compare_defaults
from emulator.experiments.workloads import collective
from emulator.experiments.workloads.collective import parse_sizes
from emulator.report.files import pyplot
from lab.modes import CC, LB, Transport

CC_MODES = CC.names()
def cell(v, spec):
    """``v`` formatted by ``spec`` for a table, a right-aligned '-' when missing."""
    return "-".rjust(int(spec.split(".")[0].rstrip("df"))) if v is None else format(v, spec)


def after_first_loop(queue, kmin):
    """``queue`` from when it, having exceeded ``kmin``, first fell back to it;
    all of it if it never exceeded ``kmin``; [] if the first loop lasted
    (nearly) all along: it fell back only in the last tenth, as a queue
    without congestion control does when the senders finish."""
    over = next((k for k, b in enumerate(queue) if b > kmin), None)
    if over is None:
        return list(queue)
    back = next((k for k in range(over, len(queue)) if queue[k] <= kmin), None)
    if back is None or back >= 0.9 * (len(queue) - 1):
        return []
    return list(queue[back:])


def analyse(times, ports, backlog, sent, drops, kmin=0):
    """The bottleneck port and its queue/utilisation (see the module doc).

    ``ports``: [{"name", "rate_bps"}]; ``backlog``/``sent``/``drops``: one
    list per port, one value per sample time in ``times`` (s); ``kmin``: the
    ECN threshold that ends the first loop.
    """
    if len(times) < 2:
        return None
    means = [sum(b) / len(b) for b in backlog]
    i = max(range(len(ports)), key=lambda k: means[k])
    s = sent[i]
    # busy: sampling intervals in which the port sent at >= 10 % of its rate (the
    # barrier's hellos that trickle through before and after do not count)
    rate = ports[i]["rate_bps"]
    moving = [k for k in range(1, len(s)) if times[k] > times[k - 1] and
              (s[k] - s[k - 1]) * 8 / (times[k] - times[k - 1]) >= 0.1 * rate]
    if not moving:
        return None
    first, last = moving[0] - 1, moving[-1]
    busy_s = times[last] - times[first]
    window = backlog[i][first:last + 1]
    return {"port": ports[i]["name"], "busy_s": round(busy_s, 4),
            "queue_max_bytes": max(window), "queue_p99_bytes": percentile(window, 99),
            "queue_mean_bytes": round(sum(window) / len(window)),
            "queue_p99_late_bytes": percentile(after_first_loop(window, kmin), 99),
            "utilisation": round((s[last] - s[first]) * 8 / (ports[i]["rate_bps"] * busy_s), 4)
            if busy_s > 0 else None,
            "drops": drops[i][last] - drops[i][first],
            "samples": len(window)}


def sender_throughputs(ranks, collective):
    """{rank: bytes/s of its timed calls} of the senders (incast: every rank but the root)."""
    out = {}
    for r in ranks:
        if collective == "incast" and r["rank"] == 0:
            continue
        t = sum(x["time_s"] for x in r["results"])
        b = sum(x["bytes_sent"] - x.get("retransmitted_bytes", 0) for x in r["results"])
        out[r["rank"]] = b / t if t > 0 else None
    return out


def parse_modes(text):
    """``--cc none,dcqcn,dcqcn+nscc``: [(label, (CC, ...))]; a mode is the senders'
    congestion control, or two joined by ``+`` that the senders take in turn."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        parts = item.split("+")
        if any(x not in CC_MODES for x in parts) or len(parts) > 2 \
                or len(set(parts)) < len(parts):
            raise ConfigError("--cc", f"{item!r}: one of {', '.join(CC_MODES)}, or two of them "
                                      "joined by + (dcqcn+nscc: the senders take them in turn)")
        if len(parts) > 1 and CC.RCCC in parts:
            raise ConfigError("--cc", f"{item!r}: rccc needs its receiver to grant credit, "
                                      "and a mix's receiver is the first part's NIC: use "
                                      "rccc alone, or nscc in a mix")
        out.append((item, tuple(CC(x) for x in parts)))
    if not out:
        raise ConfigError("--cc", "no mode given")
    return out


def sender_kind(mode, rank, collective):
    """The congestion control of ``rank`` under ``mode`` (a tuple of CC): the senders
    take the mode's parts in turn (an incast's root, which sends no data, the first)."""
    k = rank - 1 if collective == "incast" else rank
    return mode[max(k, 0) % len(mode)]


def sender_keys(cc, spec, params):
    """A rank's config keys for congestion control ``cc``, on the transport it rides
    (NSCC, RCCC: UET; the others: RoCE RC), with ``spec``'s UET keys whatever it
    sends with: every NIC receives UET too, as the run sets it (delivery, timers)."""
    t = cc.transport or Transport.RC
    return dict({"transport": t, "cc": cc, "cc_params": params.get(cc) or {}},
                **uet_spec.rank_keys(spec))


def split_params(items, ccs):
    """``--cc-param`` items ({CC: its items}) given to every part of ``ccs`` that knows
    the name; an item no part knows is an error naming it."""
    ccs = [c for c in ccs if c != CC.NONE]
    out = {c: [x for x in items if x.partition("=")[0].strip() in ccparams.names(c)]
           for c in ccs}
    for x in items:
        if not any(x in mine for mine in out.values()):
            raise ConfigError("--cc-param", f"{x!r}: no congestion control of --cc has it "
                                            f"({', '.join(map(str, ccs)) or 'none'})")
    return out


def shares(mode, throughputs, collective):
    """Per part of a mixed ``mode``: its senders, their median throughput (Mbit/s) and
    their part of what all senders achieved ({} for a mode of one part)."""
    if len(mode) < 2:
        return {}
    total = sum(v for v in throughputs.values() if v)
    out = {}
    for cc in mode:
        mine = [v for r, v in throughputs.items() if sender_kind(mode, r, collective) == cc]
        got = [v for v in mine if v is not None]
        out[str(cc)] = {"senders": len(mine),
                        "median_Mbps": round(median(got) * 8 / 1e6, 3) if got else None,
                        "share": round(sum(got) / total, 4) if total else None,
                        "fair_share": round(len(mine) / len(throughputs), 4)
                        if throughputs else None}
    return out


def run_one(spec, label, mode, rep, sizes, ecn, args, progress=print, cc_params=None):
    """One Session with ``mode`` (a tuple of CC, ``label`` its name) at the senders
    (``cc_params``: {CC: its --cc-param values}) and ``ecn`` (an Ecn) at every switch
    port; returns its measurements."""
    params = cc_params or {}
    cc = next((c for c in mode if c == CC.DCQCN), mode[0])    # the fabric's CNP band
    uet = all(c.transport == Transport.UET for c in mode)
    spec = spec.replace(lb=LB.ECMP, cc=cc, ecn=ecn.spec(), ecn_at=ecn.at,
                        transport=Transport.UET if uet else Transport.RC,
                        # another draw each repetition: ECMP's hash and the QPs' ports
                        hash_seed=None if spec.hash_seed is None
                        else (spec.hash_seed + rep) % 2**32,
                        job_seed=None if spec.job_seed is None
                        else (spec.job_seed + rep) % 2**32)
    keys = {c: dict(sender_keys(c, spec, params), qpn_seed=spec.job_seed) for c in mode}
    with Session(spec) as s:
        ports = [{"intf": p["intf"], "rate_bps": p["rate_bps"],
                  "name": f"{sw['name']}->{p['peer']}"}
                 for sw in s.topo["switches"] for p in sw["ports"]]
        sampler = QueueSampler(ports, args.sample_ms / 1e3, s.net.intf_netns())
        sampler.start()
        try:
            report = collective.run_collective(
                s, spec.workload, sizes, hosts=list(spec.hosts) if spec.hosts else None, qps=1,
                warmup=0, rank_extra=keys[mode[0]],
                rank_keys=lambda r: keys[sender_kind(mode, r, spec.workload)])
        finally:
            sampler.stop()
        ranks = collective.rank_results(os.path.join(s.dir, "collective"))
        t0 = sampler.times[0] if sampler.times else 0
        times = [t - t0 for t in sampler.times]
        bott = analyse(times, ports, sampler.backlog, sampler.sent, sampler.drops, ecn.kmin)
        series = None
        if bott:
            k = [p["name"] for p in ports].index(bott["port"])
            series = {"t": [round(t, 4) for t in times], "backlog": sampler.backlog[k]}
        row = report["rows"][0]
        tr = report.get("transport", {})
        rates = sender_throughputs(ranks, spec.workload)
        out = {"cc": label, "rep": rep, "seed": spec.hash_seed, "job_seed": spec.job_seed,
               "dir": s.dir, "time_s": max(r["time_s"]
                                                                 for r in report["rows"]),
               "busbw_Mbps": row["busbw_Mbps"], "efficiency": row["efficiency"],
               "wrong": sum(r["wrong"] for r in report["rows"]),
               "failed_qps": report.get("failed_qps", []),
               "bottleneck": bott, "series": series,
               "jain": jain(rates.values()), "shares": shares(mode, rates, spec.workload),
               "retransmitted": tr.get("retransmitted_packets"),
               "timeouts": tr.get("timeouts"), "naks": tr.get("naks_sent"),
               "cnps": tr.get("cnps_sent"), "ce_received": tr.get("ce_received"),
               "fidelity": report["fidelity"]["verdict"],
               "fidelity_notes": report["fidelity"]["reasons"] + report["fidelity"]["warnings"],
               "cpu": report["fidelity"]["cpu"]}
    out["marks"] = s.results.get("ecn", {}).get("marked_total")
    steal = out["cpu"].get("machine_steal")
    progress(f"... cc {label} rep {rep + 1} (seed {spec.hash_seed}, job {spec.job_seed}): "
             f"{out['time_s']:.2f} s, jain {cell(out['jain'], '4.2f')}, queue p99 "
             f"{(bott or {}).get('queue_p99_bytes')} B, {out['fidelity']}"
             + (f" (hypervisor steal {steal:.0%})" if steal else ""))
    return out


def summarize(runs, kmax):
    """One row per cc mode: medians over its repetitions."""
    rows = []
    for cc in dict.fromkeys(r["cc"] for r in runs):
        rs = [r for r in runs if r["cc"] == cc]

        def med(get):
            vals = sorted(v for v in (get(r) for r in rs) if v is not None)
            return vals[len(vals) // 2] if vals else None
        b = lambda key: (lambda r: (r["bottleneck"] or {}).get(key))  # noqa: E731
        rows.append({"cc": cc, "reps": len(rs), "time_s": med(lambda r: r["time_s"]),
                     "queue_max": med(b("queue_max_bytes")),
                     "queue_p99": med(b("queue_p99_bytes")),
                     "queue_mean": med(b("queue_mean_bytes")),
                     "queue_p99_over_kmax": (med(b("queue_p99_bytes")) or 0) / kmax,
                     "queue_p99_late": med(b("queue_p99_late_bytes")),
                     "late_reps": sum(b("queue_p99_late_bytes")(r) is not None for r in rs),
                     "utilisation": med(b("utilisation")), "jain": med(lambda r: r["jain"]),
                     "drops": med(b("drops")), "retransmitted": med(lambda r: r["retransmitted"]),
                     "timeouts": med(lambda r: r["timeouts"]), "cnps": med(lambda r: r["cnps"]),
                     "marks": med(lambda r: r["marks"]),
                     "wrong": sum(r["wrong"] for r in rs),
                     "died": sum(bool(r.get("failed_qps")) for r in rs),
                     "faithful": sum(r["fidelity"] == "faithful" for r in rs),
                     "shares": {part: {k: med(lambda r: r["shares"][part][k])
                                       for k in ("senders", "median_Mbps", "share",
                                                 "fair_share")}
                                for part in (rs[0].get("shares") or {})}})
    return rows


def table(rows):
    w = max([11] + [len(r["cc"]) for r in rows])
    head = (f"{'cc':{w}s} {'time_s':>7s} {'q_max':>8s} {'q_p99':>8s} {'q_mean':>8s} "
            f"{'p99/Kmax':>8s} {'p99late':>8s} {'util':>5s} {'jain':>5s} {'drops':>6s} {'retx':>6s} "
            f"{'RTOs':>5s} {'CNPs':>6s} {'marks':>6s} {'#wrong':>6s} {'died':>4s} faithful")
    lines = [head]
    f = cell
    for r in rows:
        lines.append(f"{r['cc']:{w}s} {f(r['time_s'], '7.2f')} {f(r['queue_max'], '8d')} "
                     f"{f(r['queue_p99'], '8d')} {f(r['queue_mean'], '8d')} "
                     f"{f(r['queue_p99_over_kmax'], '8.2f')} {f(r['queue_p99_late'], '8d')} "
                     f"{f(r['utilisation'], '5.2f')} "
                     f"{f(r['jain'], '5.2f')} {f(r['drops'], '6d')} "
                     f"{f(r['retransmitted'], '6d')} {f(r['timeouts'], '5d')} "
                     f"{f(r['cnps'], '6d')} {f(r['marks'], '6d')} {r['wrong']:6d} "
                     f"{r['died']:4d} {r['faithful']}/{r['reps']}")
    g = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for r in rows:
        parts = r.get("shares") or {}
        if parts:
            lines.append(f"  {r['cc']}: " + "; ".join(
                f"{part} senders ({x['senders']}) got {g(x['share'])} of the senders' "
                f"throughput (their fair share {g(x['fair_share'])}), median "
                f"{g(x['median_Mbps'])} Mbit/s each" for part, x in parts.items()))
    for r in rows:
        if 0 < r.get("late_reps", r["reps"]) < r["reps"]:
            lines.append(f"  {r['cc']} p99late: median of the {r['late_reps']} of {r['reps']} "
                         "repetitions whose queue fell back to Kmin before their last tenth")
    return "\n".join(lines)


def plot(runs, path, kmax):
    """The bottleneck queue over time, one line per run, one panel per cc mode."""
    plt = pyplot()
    modes = list(dict.fromkeys(r["cc"] for r in runs))
    fig, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4), squeeze=False,
                             sharey=True)
    for ax, cc in zip(axes[0], modes):
        for r in runs:
            if r["cc"] == cc and r["series"]:
                ax.plot(r["series"]["t"], [b / 1e3 for b in r["series"]["backlog"]],
                        lw=1, label=f"rep {r['rep'] + 1}")
        ax.axhline(kmax / 1e3, ls="--", c="grey", lw=1, label="Kmax")
        ax.set_title(f"cc {cc}: bottleneck egress queue")
        ax.set_xlabel("s")
        ax.set_ylabel("kB")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(spec, args, out=print):
    """``emulator compare --cc ...`` (``compare cc``): returns the exit status."""
    fabric = spec.fabric
    modes = parse_modes(args.cc)
    if spec.workload not in ("incast", "alltoall"):
        raise ConfigError("--workload", "--cc compares incast or alltoall")
    ecn = (ecn_mod.parse(spec.ecn, at=spec.ecn_at) if spec.ecn
           else default_ecn(fabric, spec.queue_ms, spec.ecn_at))
    if ecn is None:
        raise ConfigError("--ecn", "--cc needs ECN marking (K or Kmin:Kmax:Pmax)")
    if args.reps < 1:
        raise ConfigError("--reps", "at least 1")
    sizes = parse_sizes(args.sizes or "1M")
    ccs = list(dict.fromkeys(c for _, mode in modes for c in mode))
    params = {cc: ccparams.parse(items, cc)
              for cc, items in split_params(list(spec.cc_params), ccs).items()}
    base = make_results_dir(spec.results, "cc")
    run_yaml.write(base, spec, command=command_doc("compare cc", args))
    spec = spec.replace(results=base, cc_params=())
    runs = [run_one(spec, label, mode, rep, sizes, ecn, args, progress=out, cc_params=params)
            for rep in range(args.reps) for label, mode in modes]
    rows = summarize(runs, ecn.kmax)
    text = table(rows)
    write_json(os.path.join(base, "cc.json"),
               {"fabric": fabric.name, "workload": spec.workload, "sizes": sizes,
                "queue_ms": spec.queue_ms, "ecn": ecn.text(), "rows": rows, "runs": runs})
    plot(runs, os.path.join(base, "cc.png"), ecn.kmax)
    out(f"# {spec.workload} {args.sizes or '1M'} on {fabric.name}, ECN {ecn.text()}, "
        f"queues {spec.queue_ms:g} ms; results in {base}")
    out(text)
    return exit_status(rows, spec, out)


def exit_status(rows, args, out):
    """1 when a row lost chunks (#wrong), 3 with ``--strict`` when a repetition was not
    faithful, else 0 (rows with ``wrong``, ``faithful`` and ``reps``)."""
    if any(r["wrong"] for r in rows):
        return 1
    if args.strict and any(r["faithful"] < r["reps"] for r in rows):
        out("--strict: some runs were emulator-bound; exit status 3")
        return 3
    return 0


def prepare(args):
    """What this comparison implies before its spec is built (spec.options): an incast."""
    compare_defaults(args, workload="incast")
