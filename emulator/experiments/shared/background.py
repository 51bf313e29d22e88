"""Background traffic of a shared cluster: storage, checkpoints, streams (pure).

Model.  Every background flow is RoCE RC transfers between host pairs, run
by the job engine beside the jobs (``merge.Merger.add_flow``: a sending and
a receiving rank per pair, both daemons).  A pair's transfers go out on a
schedule (``until`` the planned time, then ``send``): the sender holds
until a transfer is delivered, so a pair that the fabric slows falls behind
its schedule instead of piling up, and its achieved rate says so.

- ``storage``: every client to a storage host (``write``; client i to
  storage host i mod S: many to one) or back (``read``: one to many), at
  ``rate`` per client for ``duty`` of every ``period``: ``chunk``-byte
  transfers every chunk x 8 / rate seconds in the on-part of each period
  (``chunk`` by default 100 ms at the rate, at least one frame);
- ``checkpoint``: every host of ``job`` writes ``bytes`` to a storage host
  (host i to storage host i mod S) every ``every`` seconds from ``start``;
- ``stream``: one host to another at ``rate``, chunk after chunk.

Schedules run to ``horizon_s`` (longer than the jobs are expected to run);
the engine cuts the flows off when every job has finished.  ``flow_report``
reads what each flow achieved from the engine's result: transfers done,
bytes delivered, the achieved rate from its start to the jobs' end against
the offered one (what its schedule planned in that window), retransmitted
bytes (the RC transport's go-back-N resends: its loss), how late transfers
started against their schedule.
"""

import statistics

from emulator.errors import ConfigError
from emulator.experiments.shared.merge import strip
from traffic.jobs.config import owner_of

DEFAULT_CHUNK_S = 0.1            # a storage or stream transfer: 100 ms at its rate
MAX_TRANSFERS = 20000            # per flow: a schedule this dense is refused


def check_hosts(flow, names, source):
    """Every host a flow names is on the fabric."""
    for key, hosts in (("storage", flow.storage), ("clients", flow.clients),
                       ("from", (flow.src,) if flow.src else ()),
                       ("to", (flow.dst,) if flow.dst else ())):
        for h in hosts:
            if h not in names:
                raise ConfigError(flow.where(key), f"unknown host {h!r}", source)


def endpoints_pairs(flow, placed):
    """[(src host, dst host)] of a flow (module docstring); ``placed``: {job: Placed}."""
    if flow.kind == "stream":
        return [(flow.src, flow.dst)]
    clients = list(flow.clients) or list(placed[flow.job].hosts)
    store = flow.storage
    pairs = []
    for i, c in enumerate(clients):
        s = store[i % len(store)]
        if c == s:
            continue                      # a storage host writes to itself over no link
        pairs.append((c, s) if flow.kind == "checkpoint" or flow.op == "write" else (s, c))
    return pairs


def chunk_of(flow, mtu):
    """The bytes of one storage or stream transfer."""
    if flow.chunk:
        return flow.chunk
    frames = max(1, round(flow.rate_bps * DEFAULT_CHUNK_S / 8 / mtu))
    return frames * mtu


def schedule(flow, horizon_s, mtu):
    """[(t_ns, bytes)] of one pair of ``flow`` up to ``horizon_s`` (module docstring)."""
    out = []
    if flow.kind == "checkpoint":
        t = flow.start_s
        while t < horizon_s:
            out.append((round(t * 1e9), flow.nbytes))
            t += flow.every_s
    else:
        chunk = chunk_of(flow, mtu)
        gap = chunk * 8 / flow.rate_bps
        period = flow.period_s if flow.kind == "storage" else horizon_s
        on = period * (flow.duty if flow.kind == "storage" else 1.0)
        p = 0
        while flow.start_s + p * period < horizon_s:
            k = 0
            while k * gap < on - 1e-12:
                t = flow.start_s + p * period + k * gap
                if t >= horizon_s:
                    break
                out.append((round(t * 1e9), chunk))
                k += 1
            p += 1
    if len(out) > MAX_TRANSFERS:
        raise ConfigError(flow.where(), f"{len(out)} transfers per pair before the jobs "
                          f"can end: make the chunk larger or the rate lower")
    return out


def flow_report(flow, result, end_ns, mtu, planned):
    """What ``flow`` did in the engine's ``result`` (module docstring); ``end_ns``: when
    the jobs ended (the flows were cut off then); ``planned``: a pair's schedule
    (``schedule``), for how late its transfers started."""
    rows = [c for c in result["collectives"] if owner_of(c["id"]) == flow.name]
    done = [c for c in rows if c.get("end_ns") is not None]
    sent = sum(c.get("bytes_sent") or 0 for c in rows)
    resent = sum(c.get("retransmitted_bytes") or 0 for c in rows)
    delivered = sum(c["bytes"] for c in done)
    start = round(flow.start_s * 1e9)
    window = max(end_ns - start, 1) / 1e9
    pairs = len({strip(c["id"], flow.name).split(".")[0] for c in rows})
    late = []
    for c in rows:
        k = int(c["id"].rsplit(".", 1)[1])
        if c.get("start_ns") is not None and k < len(planned):
            late.append(max(0, c["start_ns"] - planned[k][0]) / 1e9)
    times = [c["time_s"] for c in done if c.get("time_s") is not None]
    # offered: what the schedule planned before the jobs ended, over the same window
    offered = sum(n for t, n in planned if t < end_ns) * 8 / window * max(pairs, 1)
    return {"name": flow.name, "kind": flow.kind, "class": str(flow.traffic_class),
            "pairs": pairs, "transfers": len(done),
            "cut_off": sum(bool(c.get("cut_off")) for c in rows),
            "bytes": delivered, "bytes_sent": sent, "retransmitted_bytes": resent,
            "loss": round(resent / sent, 6) if sent else 0.0,
            "offered_Mbps": round(offered / 1e6, 3),
            "achieved_Mbps": round(delivered * 8 / window / 1e6, 3),
            "window_s": round(window, 3),
            "transfer_s_median": round(statistics.median(times), 4) if times else None,
            "late_s_max": round(max(late), 4) if late else None,
            "wrong": sum(c.get("wrong") or 0 for c in rows)}
