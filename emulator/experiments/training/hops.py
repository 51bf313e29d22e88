"""A training job's hop latency (pure): measured before the job, counted on its critical path.

Why.  Scaling keeps every bandwidth term of the real job (sizes / s over
NICs r times slower: r/s times longer, as compute is stretched), but not
the latency of a ring step: a step here costs the job engine's tick, Open
vSwitch's forwarding and a frame's store-and-forward per switch, about
1-3 ms, where a real step costs microseconds.  Dividing the emulated
iteration by r/s divides those milliseconds too.  So the real-equivalent
iteration is split in two (``split``):

- bandwidth part = (emulated iteration - h_emu x N) / (r/s);
- latency part = h_real x N;

with N the ring steps the iteration's critical rank waited through
(``ring_steps``), h_emu the emulated per-hop latency measured in the same
job engine run (``calibration`` / ``hop_latency``) and h_real a real one
(``--real-hop-latency``, by default NCCL's own per-hop figure,
``REAL_HOP_S``).

Calibration.  Before iteration 0 every job runs ``REPEATS`` blocking
AllReduces of one RoCE frame per ring chunk over one rank per host (each
host's first rank: one NIC per host, one plane on a rail fabric), then a
barrier of every rank (a collective with no network part): the iterations
start together after it.  A calibration AllReduce over H hosts takes
2(H-1) ring steps of one frame each, so h_emu = (its network time - its
ring edge's bytes at the slowest link rate) / 2(H-1): the fixed cost of a
step (tick, switches, the store-and-forward of a frame past the first
link), averaged over a ring through every host; the median of the repeats.

Steps (NCCL's ``nsteps`` for the ring kinds; the longest chain of
dependent hops of the job engine's schedules, ``traffic.ranks.collectives``):
AllReduce 2(e-1), AllGather and ReduceScatter e-1, Broadcast (pipelined
ring) e-1, AlltoAll 1 (every exchange is sent at once), a send/recv
between two NICs 1; e = the collective's endpoints (NICs).  N counts, on
the rank that ended the iteration last, every op of that iteration that
held it (a blocking collective, a send, a receive or a wait that it spent
time in) and crossed the network: a collective or transfer that overlapped
compute costs no latency in the real job either.  A wait counts the steps
of the collective it waited for last.
"""

import statistics

from emulator.experiments.training.timing import edge_bytes

REPEATS = 3
CAL = "cal."                 # the calibration ops' ids
# NCCL 2.20.3, src/graph/tuning.cc: hwLat[NCCL_HW_NET][NCCL_ALGO_RING][NCCL_PROTO_SIMPLE]
# = 14.0 us, the latency NCCL's tuning model charges per inter-node step of a ring
REAL_HOP_S = 14e-6


def steps(kind, endpoints):
    """Ring steps (dependent hops) of a collective over ``endpoints`` NICs."""
    if endpoints < 2:
        return 0
    if kind == "allreduce":
        return 2 * (endpoints - 1)
    if kind in ("allgather", "reducescatter", "broadcast"):
        return endpoints - 1
    return 1                  # alltoall, p2p


def calibration(placement, mtu, repeats=REPEATS):
    """Per rank, the ops to run before iteration 0 (empty when the job has one host)."""
    first = {}
    for p in placement:
        if p.host not in first or p.nic_index < placement[first[p.host]].nic_index:
            first[p.host] = p.rank
    hosts = list(first.values())
    if len(hosts) < 2:
        return [[] for _ in placement]
    ops = [{"op": "coll", "id": f"{CAL}hop{k}", "kind": "allreduce", "group": "CAL",
            "members": hosts, "bytes": len(hosts) * mtu, "blocking": True, "local_ns": 0,
            "fabric": True} for k in range(repeats)]
    barrier = {"op": "coll", "id": f"{CAL}barrier", "kind": "allreduce", "group": "CAL",
               "members": [p.rank for p in placement], "bytes": 1, "blocking": True,
               "local_ns": 0, "fabric": False}
    return [(ops if p.rank in hosts else []) + [barrier] for p in placement]


def hop_latency(result, rate_bps):
    """h_emu in seconds (module docstring), or None without a calibration; and the
    samples.  ``rate_bps``: the slowest NIC of the calibration ring."""
    samples = []
    for c in result["collectives"]:
        if not c["id"].startswith(f"{CAL}hop") or not c.get("network_s"):
            continue
        e = len(c["endpoints"])
        wire = edge_bytes("allreduce", e, c["bytes"]) * 8 / rate_bps
        samples.append((c["network_s"] - wire) / steps("allreduce", e))
    return (statistics.median(samples) if samples else None), samples


def prologue_end(result):
    """When the calibration ended, or the job's start offset (an ``until`` after it, on a
    shared cluster) if later (ns since the job's start; 0 without either)."""
    ends = [c["end_ns"] for c in result["collectives"]
            if c["id"].startswith(CAL) and c.get("end_ns") is not None]
    ends += [rec["end_ns"] for r in result["ranks"] for rec in r["ops"]
             if rec["op"] == "until" and rec.get("end_ns") is not None]
    return max(ends, default=0)


def ring_steps(result, rank, iteration):
    """N of ``iteration`` on ``rank`` (a result's rank record): see the module docstring."""
    coll = {c["id"]: c for c in result["collectives"]}
    prefix = f"it{iteration}."
    n = 0
    for rec in rank["ops"]:
        if rec["op"] == "compute" or rec.get("end_ns") is None \
                or rec["end_ns"] <= rec["start_ns"]:
            continue
        ids = [rec["id"]] if "id" in rec else list(rec.get("ids", ()))
        if not ids or not ids[0].startswith(prefix):
            continue
        c = coll.get(max(ids, key=lambda i: coll.get(i, {}).get("end_ns") or 0))
        if c and c.get("network"):
            n += steps(c["kind"], len(c["endpoints"]))
    return n


def split(emulated_s, stretch, n, hop_emu_s, hop_real_s):
    """(bandwidth part, latency part) of the real-equivalent iteration, seconds."""
    if hop_emu_s is None:
        return emulated_s / stretch, 0.0
    return max(0.0, emulated_s - hop_emu_s * n) / stretch, hop_real_s * n
