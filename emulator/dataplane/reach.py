"""All-pairs reachability, checked with real ICMP echoes from every host namespace.

One process opens a raw ICMP socket inside each host's namespace (a socket
keeps the namespace it was made in: ``traffic.netns``), sends one echo
request from every host to every other at once and collects the replies on
all sockets together, 512 echoes at a time with 20 ms between bursts (the
whole burst of a 256-host fabric overflowed the switches' queues): the
work grows with the echoes, not with processes
(the previous check forked one ``ping`` per host pair: O(n^2) processes,
~20 s of a 64-host start and past a minute at 128).  Pairs that did not
answer are asked again in the next round, until a deadline.  The condition
the run waits on is "every checked pair answers", not a sleep.

Which pairs (``check_pairs``): every ordered host pair up to ``ALL_PAIRS_UP_TO``
hosts (64: 4 032 echoes).  Beyond, every host to one host on every leaf
(its own included), the targets rotating with the host's position: every
host sends and is answered, every ordered leaf pair is crossed many times
over, and the work grows with hosts x leaves, not hosts squared (256 hosts
on 32 leaves: 8 192 echoes instead of 65 280, which the userspace switches
could not set up flows for in minutes).
"""

import os
import select
import socket
import struct
import time

from emulator.errors import RunFailed
from traffic.netns import entered

ICMP_ECHO_REQUEST, ICMP_ECHO_REPLY = 8, 0
BATCH, PACE_S = 512, 0.02         # echoes per burst, and the pause after each
ALL_PAIRS_UP_TO = 64


def checksum(data):
    """The Internet checksum (RFC 1071) of ``data``."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def echo_request(ident, seq, payload=b"fabric-lab reach"):
    head = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, 0, ident, seq)
    return struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, checksum(head + payload), ident,
                       seq) + payload


def parse_reply(packet):
    """(source IP, ident, seq) of an IPv4 echo reply as a raw socket reads it, or None."""
    if len(packet) < 20 or packet[0] >> 4 != 4:
        return None
    ihl = (packet[0] & 0x0F) * 4
    if len(packet) < ihl + 8 or packet[ihl] != ICMP_ECHO_REPLY:
        return None
    _, _, _, ident, seq = struct.unpack_from("!BBHHH", packet, ihl)
    return socket.inet_ntoa(packet[12:16]), ident, seq


def ping_round(net, pairs, wait_s=0.5, timeout=60):
    """One echo per (src, dst) host pair, all at once; return the set that answered."""
    ip_of = {h["name"]: h["ip"] for h in net.topo["hosts"]}
    names = sorted(ip_of)
    index = {n: i for i, n in enumerate(names)}
    ident = os.getpid() & 0xFFFF
    socks = {}
    ok, pending = set(), set(pairs)
    try:
        for src in sorted({s for s, _ in pairs}):
            with entered(f"/proc/{net.hosts[src].pid}/ns/net"):
                sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            sock.setblocking(False)
            socks[sock.fileno()] = (src, sock)
        sock_of = {src: sock for src, sock in socks.values()}

        def collect(until):
            while pending:
                left = until - time.monotonic()
                if left <= 0:
                    return
                ready, _, _ = select.select(list(socks), [], [], left)
                for fd in ready:
                    src, sock = socks[fd]
                    while True:
                        try:
                            packet = sock.recv(2048)
                        except BlockingIOError:
                            break
                        got = parse_reply(packet)
                        if got and got[1] == ident and got[2] < len(names):
                            pair = (src, names[got[2]])
                            if pair in pending and ip_of[pair[1]] == got[0]:
                                pending.discard(pair)
                                ok.add(pair)

        # paced: BATCH echoes, then replies for PACE_S, so a 256-host fabric's 65 000
        # echoes do not arrive at the userspace switches in one burst they drop
        order = sorted(pending)
        for i in range(0, len(order), BATCH):
            for src, dst in order[i:i + BATCH]:
                try:
                    sock_of[src].sendto(echo_request(ident, index[dst]), (ip_of[dst], 0))
                except (BlockingIOError, OSError):
                    pass                  # not answered this round; asked again next
            if i + BATCH < len(order):
                collect(time.monotonic() + PACE_S)
        collect(time.monotonic() + min(wait_s, timeout))
    finally:
        for _, sock in socks.values():
            sock.close()
    return ok


def check_pairs(topo, all_pairs_up_to=ALL_PAIRS_UP_TO):
    """(the ordered host pairs to check, how they were chosen); see the module doc."""
    from emulator.fabric.addressing import home_leaf
    names = [h["name"] for h in topo["hosts"]]
    if len(names) <= all_pairs_up_to:
        return [(a, b) for a in names for b in names if a != b], "every host pair"
    leaves = {}
    for h in topo["hosts"]:
        leaves.setdefault(home_leaf(h), []).append(h["name"])
    pairs = []
    for i, src in enumerate(names):
        for members in leaves.values():
            for k in range(len(members)):
                dst = members[(i + k) % len(members)]
                if dst != src:
                    pairs.append((src, dst))
                    break
    return pairs, "every host to a host on every leaf"


def wait_all_pairs(net, timeout=60.0, progress=None, pairs=None):
    """Wait until every pair of ``pairs`` (default every ordered host pair) answers;
    return (seconds, rounds).  Raises RunFailed listing unreachable pairs if the
    deadline passes."""
    names = [h["name"] for h in net.topo["hosts"]]
    todo = set(pairs) if pairs is not None else {(a, b) for a in names for b in names if a != b}
    total = len(todo)
    t0 = time.monotonic()
    rounds = 0
    while todo:
        rounds += 1
        todo -= ping_round(net, sorted(todo))
        if progress:
            progress(f"reachability: {total - len(todo)}/{total} host pairs")
        if todo and time.monotonic() - t0 > timeout:
            shown = ", ".join(f"{a}->{b}" for a, b in sorted(todo)[:6])
            raise RunFailed(f"{len(todo)} host pairs still unreachable after {timeout:.0f}s: "
                            f"{shown}")
    return time.monotonic() - t0, rounds
