"""The ranks' start barrier (traffic.ranks.barrier) on loopback addresses: ranks that
arrive at different times leave together, within a round trip of the last one."""

import random
import threading
import time

import pytest

from traffic.ranks.barrier import BARRIER_PORT, DONE_PORT, READY_PORT, Barrier
from traffic.roce.frames import ROCE_PORT
from traffic.uet.layout import UET_PORT

N = 6


def run_ranks(port, arrivals):
    """Each rank joins ``arrivals[i]`` s after the start; returns when each left (s)."""
    ips = [f"127.0.0.{i + 1}" for i in range(N)]
    left, errors = [None] * N, []
    t0 = time.monotonic()

    def rank(i):
        try:
            time.sleep(arrivals[i])
            b = Barrier(i, ips, port=port)
            try:
                b.wait(5)
                left[i] = time.monotonic() - t0
                end = time.monotonic() + 0.3      # answer peers still inside, as ranks do
                while time.monotonic() < end:
                    b.serve()
                    time.sleep(0.001)
            finally:
                b.close()
        except Exception as e:     # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors, errors
    return left


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ranks_leave_together_not_a_round_apart(seed):
    # hellos go out every 50 ms: a rank that learned everyone is in only at its next
    # round left up to 50 ms after the others (a collective's start skew)
    rnd = random.Random(seed)
    arrivals = [0.025 * i + rnd.uniform(0, 0.01) for i in range(N)]
    rnd.shuffle(arrivals)
    left = run_ranks(23000 + seed, arrivals)
    assert all(t is not None for t in left)
    assert min(left) >= max(arrivals)            # nobody leaves before the last arrived
    assert max(left) - min(left) < 0.040, left   # typically ~1 ms; a round is 50 ms


def test_an_abort_reaches_every_peer_from_several_source_ports():
    """A job's abort goes out from more than one source port (each its own ECMP path:
    the one that just died may carry the barrier's own port), every copy an abort."""
    ips = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    port = 47000 + random.randrange(1000)
    b = [Barrier(i, ips, port=port) for i in range(3)]
    try:
        b[0].abort(ports=4)
        for peer in b[1:]:
            sources = set()
            deadline = time.monotonic() + 2
            while len(sources) < 5 and time.monotonic() < deadline:
                try:
                    data, addr = peer.sock.recvfrom(64)
                except BlockingIOError:
                    time.sleep(0.01)
                    continue
                assert data[-1] & 4 and int.from_bytes(data[4:8], "big") == 0
                sources.add(addr[1])
            assert len(sources) == 5 and port in sources     # its own port and 4 more
        b[0].abort(ports=0)
        b[1].serve()
        assert b[1].aborted_by == 0
    finally:
        for x in b:
            x.close()


def test_the_barriers_ports_are_not_a_transports():
    # a rank's capture sockets hand RoCEv2's and UET's ports to their transports'
    # receive paths; a hello there would be parsed as a data frame
    ports = {BARRIER_PORT, READY_PORT, DONE_PORT}
    assert len(ports) == 3 and not ports & {ROCE_PORT, UET_PORT}
