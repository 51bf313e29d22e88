"""Collective schedules (pure): who sends which chunk to whom, in which step.

Model.  ``n`` ranks, a message of ``size`` bytes cut into ``n`` chunks
(chunk i is bytes [size*i//n, size*(i+1)//n)).  A schedule is, for one rank,
a list of ``Step``: what it sends (peer, chunk, bytes), what it receives, and
``after``: the steps whose receive must complete before this step's send may
start.  In a ring, step k forwards (reduce-scatter: adds to and forwards)
the chunk received in step k-1, so one slow hop delays everyone.

Sizes follow nccl-tests: ``size`` is the AllReduce buffer, the AllGather
output buffer, the ReduceScatter input buffer, and the AlltoAll buffer (each
peer gets size/n).  Per rank, bytes sent: AllReduce 2(n-1)/n*size, the three
others (n-1)/n*size -- hence nccl-tests' busbw factors (``BUSBW_FACTOR``).

``incast`` (not an NCCL collective: the congestion-control workload) has
every rank but 0 write ``size`` bytes to rank 0 in one step; its busbw is
what rank 0's link carried.

``broadcast`` is a pipelined ring from the ring's first rank: the buffer in
``n`` chunks; in step (time slot) s the rank at ring position p forwards
chunk s - p, which it received in slot s - 1, so every hop carries every
chunk once and the pipeline fills in n - 1 slots (as NCCL's ring
broadcast); busbw = algbw.

Ring order: ``ring_order`` keeps the given order (naive) or, given a
host->leaf map, puts the hosts of each leaf next to each other so that the
ring crosses the spine only once per leaf (the minimum for a ring).
"""

from dataclasses import dataclass

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "incast", "broadcast")


def _allreduce(n):
    return 2 * (n - 1) / n


def _one(n):
    return (n - 1) / n


def _incast(n):
    return n - 1


# incast: busbw is what the root's link carries, (n-1) x size / time
BUSBW_FACTOR = {"allreduce": _allreduce, "allgather": _one,
                "reducescatter": _one, "alltoall": _one, "incast": _incast,
                "broadcast": lambda n: 1}
REDOP = {"allreduce": "sum", "reducescatter": "sum", "allgather": "none",
         "alltoall": "none", "incast": "none", "broadcast": "none"}


@dataclass(frozen=True)
class Transfer:
    """One chunk to or from ``peer`` (a rank index)."""

    peer: int
    chunk: int
    nbytes: int


@dataclass(frozen=True)
class Step:
    """One step of a rank: sends, receives, and the steps it waits for."""

    index: int
    sends: tuple
    recvs: tuple
    after: tuple = ()


def chunk_bytes(size, n, i):
    """Bytes of chunk ``i`` of ``n`` of a ``size``-byte buffer."""
    return size * (i + 1) // n - size * i // n


def ring_order(ranks, leaf_of=None):
    """Ring order of ``ranks``: as given, or grouped by leaf (first-seen order)."""
    ranks = list(ranks)
    if not leaf_of:
        return ranks
    leaves = []
    for r in ranks:
        if leaf_of[r] not in leaves:
            leaves.append(leaf_of[r])
    return [r for leaf in leaves for r in ranks if leaf_of[r] == leaf]


def cross_leaf_hops(ring, leaf_of):
    """Ring hops whose two ends sit on different leaves."""
    n = len(ring)
    return sum(leaf_of[ring[i]] != leaf_of[ring[(i + 1) % n]] for i in range(n))


def _ring_steps(ring, rank, size, phases):
    """Ring steps; ``phases`` lists chunk offsets (send, recv) per step."""
    n = len(ring)
    p = ring.index(rank)
    nxt, prv = ring[(p + 1) % n], ring[(p - 1) % n]
    steps = []
    for k, (soff, roff) in enumerate(phases):
        sc, rc = (p + soff) % n, (p + roff) % n
        steps.append(Step(k, (Transfer(nxt, sc, chunk_bytes(size, n, sc)),),
                          (Transfer(prv, rc, chunk_bytes(size, n, rc)),),
                          (k - 1,) if k else ()))
    return steps


def _broadcast_steps(ring, rank, size):
    """Pipelined ring broadcast from ``ring[0]``: slot s forwards chunk s - p."""
    n = len(ring)
    p = ring.index(rank)
    nxt, prv = ring[(p + 1) % n], ring[(p - 1) % n]
    steps = []
    for s in range(2 * n - 2):
        out, into = s - p, s - p + 1      # chunk sent, chunk received in slot s
        sends = ((Transfer(nxt, out, chunk_bytes(size, n, out)),)
                 if p < n - 1 and 0 <= out < n else ())
        recvs = ((Transfer(prv, into, chunk_bytes(size, n, into)),)
                 if p > 0 and 0 <= into < n else ())
        steps.append(Step(s, sends, recvs, (s - 1,) if sends and p > 0 else ()))
    return steps


def schedule(collective, n, rank, size, ring=None):
    """The steps of ``rank`` (an index in 0..n-1) for one collective call."""
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; one of {COLLECTIVES}")
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} not in 0..{n - 1}")
    if n == 1:
        return []
    ring = list(range(n)) if ring is None else list(ring)
    if sorted(ring) != list(range(n)):
        raise ValueError("ring must be a permutation of the ranks")
    steps = n - 1
    if collective == "allreduce":
        # reduce-scatter: send chunk p-s, receive p-s-1 (reduce it);
        # all-gather: send the reduced chunk p+1-s, receive p-s.
        phases = ([(-s, -s - 1) for s in range(steps)]
                  + [(1 - s, -s) for s in range(steps)])
        return _ring_steps(ring, rank, size, phases)
    if collective == "allgather":
        return _ring_steps(ring, rank, size, [(-s, -s - 1) for s in range(steps)])
    if collective == "reducescatter":
        # ends with rank at ring position p holding the reduced chunk p
        return _ring_steps(ring, rank, size, [(-s - 1, -s - 2) for s in range(steps)])
    if collective == "broadcast":
        return _broadcast_steps(ring, rank, size)
    if collective == "incast":
        # N -> 1: every other rank writes ``size`` bytes to rank 0 at once
        if rank == 0:
            return [Step(0, (), tuple(Transfer(p, p, size) for p in range(1, n)))]
        return [Step(0, (Transfer(0, rank, size),), ())]
    # alltoall: in step s exchange with the peers s apart; no dependencies.
    out = []
    for s in range(1, n):
        dst, src = (rank + s) % n, (rank - s) % n
        out.append(Step(s - 1, (Transfer(dst, dst, chunk_bytes(size, n, dst)),),
                        (Transfer(src, rank, chunk_bytes(size, n, rank)),)))
    return out


def bytes_per_rank(collective, n, size):
    """Bytes each rank sends (= receives) in one call: factor * size, exactly."""
    return sum(t.nbytes for st in schedule(collective, n, 0, size) for t in st.sends)
