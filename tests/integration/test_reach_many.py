"""Reachability over more sockets than select() can watch (1024 descriptors): the
echo round waits with epoll, so a 512-host fabric's raw sockets plus the run's
own descriptors do not stop it."""

import os
import resource
from types import SimpleNamespace

from emulator.dataplane.observe.reach import ping_round

LAYOUT_INDEPENDENT = True
SOURCES = 1100


def test_an_echo_round_waits_on_more_than_1024_sockets():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = SOURCES + 200
    if soft < want:
        assert hard >= want, f"RLIMIT_NOFILE hard limit {hard} < {want}"
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    try:
        me = SimpleNamespace(pid=os.getpid())      # every "host" in this namespace
        names = [f"h{i}" for i in range(SOURCES)]
        net = SimpleNamespace(topo={"hosts": [{"name": n, "ip": "127.0.0.1"} for n in names]},
                              hosts={n: me for n in names})
        pairs = {(n, "h0") for n in names[1:]}
        # the replies reach every raw ICMP socket, so every source sees its pair answered
        assert ping_round(net, pairs, wait_s=2.0) == pairs
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
