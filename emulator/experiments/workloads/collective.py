"""Collectives on the fabric: one ``python -m traffic rank`` per host, nccl-tests report.

``run_collective`` writes one rank config per participating host into
``<results>/collective/``, starts every rank in its host's namespace, waits
for all of them (with a deadline derived from the sizes and the link rate),
and combines the rank results into the nccl-tests table
(``size count type redop root time algbw busbw #wrong``) with busbw / link
rate as the fabric's efficiency.

Sizes use nccl-tests' notation: ``1M:64M`` is 1M, 2M, ... 64M (x2 steps),
``1M:64M:4`` steps by x4, ``1M,8M`` is a list; K/M/G are powers of 1024.
"""

import json
import os
import sys
import time

from emulator.dataplane.links.impair import fault_names
from emulator.dataplane.session import REPO
from emulator.dataplane.system.proc import STDOUT, TimedOut
from emulator.errors import ConfigError, RunFailed
from emulator.experiments.measure.watch import Watch
from emulator.fabric.addressing import home_leaf
from traffic.ranks.collectives import BUSBW_FACTOR
from traffic.ranks.report import combine, table
from traffic.roce.transport import RcParams

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "incast")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size(text, where):
    t = text.strip().upper().removesuffix("B")
    unit = t[-1] if t and t[-1] in "KMG" else ""
    try:
        value = int(float(t[:-1] if unit else t) * _UNITS[unit])
    except ValueError:
        raise ConfigError(where, f"{text!r} is not a size like 64K, 1M or 1048576")
    if value <= 0:
        raise ConfigError(where, f"{text!r} must be positive")
    return value


def parse_sizes(text, where="--sizes"):
    """'1M:64M' -> [1M, 2M, ..., 64M]; '1M:64M:4'; '1M,8M'."""
    if "," in text:
        return [_size(s, where) for s in text.split(",")]
    parts = text.split(":")
    if len(parts) == 1:
        return [_size(parts[0], where)]
    if len(parts) not in (2, 3):
        raise ConfigError(where, f"{text!r} is not MIN:MAX[:FACTOR] or a comma list")
    lo, hi = _size(parts[0], where), _size(parts[1], where)
    factor = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else 2
    if hi < lo or factor < 2:
        raise ConfigError(where, f"{text!r}: need MIN <= MAX and FACTOR >= 2")
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= factor
    return sizes


def rank_configs(topo, collective, sizes, hosts=None, qps=1, ring="naive",
                 rate_bps=None, out_dir=".", step_timeout_s=None, warmup=1, mtu=4096):
    """The rank config dicts (one per host), in rank order."""
    chosen = [h for h in topo["hosts"] if hosts is None or h["name"] in hosts]
    if hosts is not None:
        unknown = sorted(set(hosts) - {h["name"] for h in topo["hosts"]})
        if unknown:
            raise ConfigError("--hosts", f"unknown host {unknown[0]!r}")
    if len(chosen) < 2:
        raise ConfigError("--hosts", "a collective needs at least 2 hosts")
    ranks = [{"name": h["name"], "ip": h["ip"], "mac": h["mac"], "intf": h["ports"][0]["port"],
              "leaf": home_leaf(h)} for h in chosen]
    link = rate_bps or min(h["ports"][0]["rate_bps"] for h in chosen)
    return [{"rank": i, "ranks": ranks, "collective": collective, "sizes": sizes,
             "rate_bps": link, "qps": qps, "ring": ring, "warmup": warmup, "mtu": mtu,
             "step_timeout_s": step_timeout_s,
             "output": os.path.join(out_dir, f"rank{i}.json")} for i in range(len(ranks))]


def default_timeout_exp(queue_ms):
    """The RC retransmission timer's exponent for queues of ``queue_ms``.

    The timer must outlast the deepest queueing a packet and its ACK can meet
    (four full queues): deep "lossless" queues need a long one, as
    NCCL_IB_TIMEOUT is set far above a PFC fabric's delays.
    """
    return RcParams.exp_for(4 * queue_ms / 1e3)


def expected_seconds(collective, n, sizes, rate_bps):
    factor = BUSBW_FACTOR[collective](n)
    return sum(s * factor * 8 / rate_bps for s in sizes)


def run_collective(session, collective="allreduce", sizes=(1 << 20,), hosts=None, qps=1,
                   ring="naive", rate_bps=None, warmup=1, progress=None, rank_extra=None,
                   faulted=(), rank_keys=None):
    """Run the collective on ``session``'s fabric; return the report dict.

    ``rank_extra``: more rank config keys for every rank (e.g. the NIC's
    ``entropy`` mode for load-balancing comparisons, emulator/experiments/compare/compare.py);
    ``rank_keys``: a function of the rank index giving keys of that rank's own on top
    (senders of two transports sharing a fabric, emulator/experiments/compare/congestion.py);
    ``faulted``: link names ('a->b') that faults take down meanwhile (a drill).
    """
    if collective not in COLLECTIVES:
        raise ConfigError("--workload", f"unknown collective {collective!r}")
    out_dir = os.path.join(session.dir, "collective")
    os.makedirs(out_dir, exist_ok=True)
    configs = rank_configs(session.topo, collective, list(sizes), hosts, qps, ring,
                           rate_bps, out_dir, warmup=warmup,
                           mtu=getattr(session, "mtu", 4096))
    timeout_exp = default_timeout_exp(getattr(session, "queue_ms", 30.0))
    for cfg in configs:
        cfg["timeout_exp"] = timeout_exp
        cfg.update({k: v for k, v in (rank_extra or {}).items() if v is not None})
        if rank_keys is not None:
            cfg.update(rank_keys(cfg["rank"]))
    n = len(configs)
    ideal = expected_seconds(collective, n, list(sizes) + list(sizes[:warmup]),
                             configs[0]["rate_bps"])
    timeout = 60 + 4 * ideal
    if progress:
        progress(f"{collective} over {n} ranks, sizes {sizes[0]}..{sizes[-1]} bytes, "
                 f"ideal {ideal:.1f}s at {configs[0]['rate_bps'] / 1e6:g} Mbit/s")
    watch = Watch(session).start()
    if hasattr(session.net, "run_ranks"):
        ranks = _remote_ranks(session, configs, timeout, out_dir)
    else:
        ranks = _local_ranks(session, configs, timeout, out_dir)
    watch.stop()
    report = combine(sorted(ranks, key=lambda r: r["rank"]))
    report["fidelity"] = collective_fidelity(watch, ranks, faulted)
    report["table"] = table(report)
    report["ring"] = ring
    report["qps"] = qps
    report["hosts"] = [r["name"] for r in configs[0]["ranks"]]
    return report


def _local_ranks(session, configs, timeout, out_dir):
    """Start every rank in its host's namespace, wait, read their result documents."""
    procs = []
    for cfg in configs:
        path = os.path.join(out_dir, f"rank{cfg['rank']}.config.json")
        with open(path, "w") as f:
            json.dump(cfg, f, indent=1)
        name = cfg["ranks"][cfg["rank"]]["name"]
        log = open(os.path.join(out_dir, f"rank{cfg['rank']}.log"), "w")
        p = session.net.popen_in(name, [sys.executable, "-m", "traffic", "rank",
                                        "--config", path],
                                 cwd=REPO, stdout=log, stderr=STDOUT)
        procs.append((name, p, log))
    t0 = time.monotonic()
    failed = []
    try:
        for name, p, _ in procs:
            left = max(1.0, timeout - (time.monotonic() - t0))
            try:
                p.wait(timeout=left)
            except TimedOut:
                raise RunFailed(f"rank in {name} did not finish within {timeout:.0f}s")
            if p.returncode not in (0, 1):      # 1 = finished with wrong chunks
                failed.append(f"{name} (exit {p.returncode})")
    finally:
        for _, p, log in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
            log.close()
    if failed:
        raise RunFailed(f"ranks failed: {', '.join(failed)}; logs in {out_dir}")
    ranks = []
    for cfg in configs:
        with open(cfg["output"]) as f:
            ranks.append(json.load(f))
    return ranks


def _remote_ranks(session, configs, timeout, out_dir):
    """Every rank on its host's server (``ClusterNet.run_ranks``); their documents
    and logs are kept in ``out_dir`` as a one-machine run keeps them."""
    done = session.net.run_ranks(configs, timeout)
    failed, ranks = [], []
    for cfg in configs:
        k = cfg["rank"]
        status, doc, log = done.get(k, (None, None, ""))
        with open(os.path.join(out_dir, f"rank{k}.log"), "w") as f:
            f.write(log)
        name = cfg["ranks"][k]["name"]
        if status not in (0, 1) or doc is None:    # 1 = finished with wrong chunks
            failed.append(f"{name} (exit {status})")
            continue
        with open(cfg["output"], "w") as f:
            json.dump(doc, f)
        ranks.append(doc)
    if failed:
        raise RunFailed(f"ranks failed: {', '.join(failed)}; logs in {out_dir}")
    return ranks


def collective_fidelity(watch, ranks, faulted=()):
    """The fidelity verdict of a collective: drops outside the links, and CPU.

    A collective's figure is a time, so it is also emulator-bound when the
    machine had no CPU to spare: the ranks and ovs-vswitchd then set the pace.
    """
    rx = [r.get("rx_flows", {}) for r in ranks]
    sent = sum(t.get("received_packets", 0) + t.get("dropped_packets", 0) for t in rx)
    lost = sum(t.get("dropped_packets", 0) for t in rx)
    if all("data_frames_sent" in r and "transport" in r for r in ranks):
        # with a transport, a frame the network lost was sent again: what it lost is
        # every frame put on the wire minus every arrival (duplicates included)
        sent = sum(r["data_frames_sent"] for r in ranks)
        lost = max(0, sent - sum(t.get("received_packets", 0) for t in rx))
    calls = [row for r in ranks for row in r.get("results", ()) if "t_start_ns" in row]
    within = (min(c["t_start_ns"] for c in calls) / 1e9,          # the reported calls
              max(c["t_start_ns"] / 1e9 + c["time_s"] for c in calls)) if calls else None
    return watch.verdict(sent, lost=lost, timing=True,
                         engine={"socket_drops": sum(r.get("socket_drops", 0) for r in ranks)},
                         faulted=set(faulted) | fault_names(watch.session.topo), within=within)


def rank_results(coll_dir):
    """The rank result documents a collective left in ``coll_dir``, in file order."""
    out = []
    for name in sorted(os.listdir(coll_dir)):
        if name.startswith("rank") and name.endswith(".json") and "config" not in name:
            with open(os.path.join(coll_dir, name)) as f:
                out.append(json.load(f))
    return out


def rank_totals(coll_dir, key="reordered_packets"):
    """Sum of one receive counter (``rx_flows[key]``) over the rank result files of a run."""
    return sum(r["rx_flows"][key] for r in rank_results(coll_dir))
