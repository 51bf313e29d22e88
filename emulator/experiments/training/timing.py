"""The time model of a training job's programs (pure): ring bytes and the analytic estimate.

Bytes.  ``edge_bytes(kind, n, size)`` is what one edge of an n-member ring
carries over a whole collective: nccl-tests' busbw factor times the size
(AllReduce 2(n-1)/n, AllGather / ReduceScatter / AlltoAll (n-1)/n per GPU,
Broadcast 1: a pipelined ring forwards the whole buffer over every edge).
``fabric_size`` is the message an e-endpoint collective needs so that its
ring edges carry what the n-member ring's edges carry (``job`` explains
where the two rings come from): for the three ring kinds
size x (n-1)e / (n(e-1)), since 2(e-1)/e x S' = 2(n-1)/n x S (and the same
without the 2); for Broadcast the size itself; for AlltoAll, where each
member sends size/n to every other, endpoints A and B exchange
m_A m_B size/n, and an e-endpoint AlltoAll of S' exchanges S'/e per pair, so
S' = e x max(m_A m_B) x size / n (exact when the groups are balanced, which
the rank layout makes them).  ``local_bytes`` is what one GPU moves over
NVLink: the ring's edge bytes when members share an endpoint (a ring with
hops inside it), for AlltoAll (m-1)/n x size to the m-1 members on its own
endpoint.

Estimate.  ``simulate`` runs every rank's program on a virtual clock, with
the runner's semantics (``traffic.jobs.program``, ``traffic.jobs.config``):
compute advances the rank; a collective starts when its last member issues
it and, if it uses the network, once every member's NIC is done with its
previous network collective (one FIFO stream per rank: concurrent
collectives share the NIC by taking turns, as SimAI queues its non-blocking
weight-gradient collectives).  A network collective (``fabric`` and more
than one endpoint) lasts its wire time, plus ``local_ns`` when some members
share an endpoint; any other lasts ``local_ns``.  Wire time: a ring kind's
edge bytes over the e endpoints (= the n-member ring's) over the slowest
per-GPU NIC share among the members (the NIC's rate over the GPUs that use
it); AlltoAll: an endpoint's (e-1)/e x bytes over the share of its m
members.  Blocking collectives, waits and receives stall the rank; what
they stall is that group kind's exposed communication.  A send is eager (it
never waits for the receiver) and holds the sender until delivered; between
ranks on one endpoint it takes no time.
"""

from collections import defaultdict

RING_KINDS = ("allreduce", "allgather", "reducescatter")


def edge_bytes(kind, n, size):
    """Bytes over one edge of an n-member ring (per GPU for AlltoAll)."""
    if n < 2:
        return 0.0
    if kind == "allreduce":
        return 2 * (n - 1) / n * size
    if kind == "broadcast":
        return float(size)
    return (n - 1) / n * size


def fabric_size(kind, size, counts):
    """Equivalent message of the collective over len(counts) endpoints (members per endpoint)."""
    n, e = sum(counts), len(counts)
    if e < 2:
        return 0.0
    if kind in RING_KINDS:
        return size * (n - 1) * e / (n * (e - 1))
    if kind == "alltoall":
        a, b = sorted(counts)[-2:]
        return e * a * b * size / n
    return float(size)


def wire_seconds(kind, nbytes, counts, share_bps):
    """Seconds of an e-endpoint collective of ``nbytes`` (members per endpoint: counts)."""
    e = len(counts)
    if e < 2:
        return 0.0
    if kind == "alltoall":
        return (e - 1) / e * nbytes * 8 / (min(counts) * share_bps)
    return edge_bytes(kind, e, nbytes) * 8 / share_bps


def local_bytes(kind, size, counts):
    """Bytes one GPU moves over NVLink (0 when no two members share an endpoint)."""
    n, m = sum(counts), max(counts)
    if m < 2:
        return 0.0
    if kind == "alltoall":
        return (m - 1) / n * size
    return edge_bytes(kind, n, size)


def simulate(programs, share_bps, endpoint_of):
    """Run the programs on a virtual clock; return the estimate (seconds).

    ``share_bps[r]``: rank r's per-GPU NIC share; ``endpoint_of[r]``: its NIC.
    """
    n = len(programs)
    t, pc, free = [0.0] * n, [0] * n, [0.0] * n
    compute = [0.0] * n
    exposed = [defaultdict(float) for _ in range(n)]
    busy = [defaultdict(float) for _ in range(n)]
    arrived, done, kind_of = defaultdict(dict), {}, {}

    def start_coll(op):
        members = op["members"]
        counts = defaultdict(int)
        for m in members:
            counts[endpoint_of[m]] += 1
        start = max(arrived[op["id"]].values())
        network = op.get("fabric", True) and len(counts) > 1
        if network:
            start = max([start] + [free[m] for m in members])
            share = min(share_bps[m] for m in members)
            dur = wire_seconds(op["kind"], op["bytes"], list(counts.values()), share)
            if len(members) > len(counts):
                dur += op.get("local_ns", 0) / 1e9
        else:
            dur = op.get("local_ns", 0) / 1e9
        end = start + dur
        for m in members:
            busy[m][op["group"]] += dur
            if network:
                free[m] = end
        done[op["id"]] = end

    def stall(r, until, kind):
        if until > t[r]:
            exposed[r][kind] += until - t[r]
            t[r] = until

    def step(r, op):
        kind = op["op"]
        if kind == "compute":
            t[r] += op["ns"] / 1e9
            compute[r] += op["ns"] / 1e9
            return True
        if kind == "coll":
            cid = op["id"]
            kind_of[cid] = op["group"]
            if r not in arrived[cid]:
                arrived[cid][r] = t[r]
                if len(arrived[cid]) == len(op["members"]):
                    start_coll(op)
            if not op.get("blocking", True):
                return True
            if cid not in done:
                return False
            stall(r, done[cid], op["group"])
            return True
        if kind == "wait":
            if any(i not in done for i in op["ids"]):
                return False
            last = max(op["ids"], key=lambda i: done[i])
            stall(r, done[last], kind_of[last])
            return True
        if kind == "send":
            peer = op["peer"]
            start = t[r]
            if endpoint_of[peer] != endpoint_of[r]:
                start = max(start, free[r])
                free[r] = start + op["bytes"] * 8 / share_bps[r]
            done[op["id"]] = end = free[r] if endpoint_of[peer] != endpoint_of[r] else start
            busy[r]["PP"] += end - start
            stall(r, end, "PP")
            return True
        if kind == "recv":
            if op["id"] not in done:
                return False
            stall(r, done[op["id"]], "PP")
            return True
        raise ValueError(f"unknown op {kind!r}")

    progress = True
    while progress:
        progress = False
        for r in range(n):
            prog = programs[r]
            while pc[r] < len(prog) and step(r, prog[pc[r]]):
                pc[r] += 1
                progress = True
    stuck = [r for r in range(n) if pc[r] < len(programs[r])]
    if stuck:
        r = stuck[0]
        raise RuntimeError(f"the programs deadlock: rank {r} waits at op {pc[r]} "
                           f"{programs[r][pc[r]]}")
    slowest = max(range(n), key=lambda r: t[r]) if n else 0
    total = t[slowest] if n else 0.0
    return {"total_s": total, "compute_s": compute[slowest] if n else 0.0,
            "exposed_s": total - (compute[slowest] if n else 0.0),
            "slowest_rank": slowest,
            "exposed_by_group_s": dict(exposed[slowest]) if n else {},
            "busy_by_group_s": dict(busy[slowest]) if n else {}}
