"""All-pairs reachability, checked with real ICMP echoes from every host namespace.

One process opens a raw ICMP socket inside each host's namespace (a socket
keeps the namespace it was made in: ``traffic.netns``), sends one echo
request from every host to every other at once and collects the replies on
all sockets together: the work grows with the echoes, not with processes
(the previous check forked one ``ping`` per host pair: O(n^2) processes,
~20 s of a 64-host start and past a minute at 128).  Pairs that did not
answer are asked again in the next round, until a deadline.  The condition
the run waits on is "every host pair answers", not a sleep.
"""

import os
import select
import socket
import struct
import time

from emulator.errors import RunFailed
from traffic.netns import entered

ICMP_ECHO_REQUEST, ICMP_ECHO_REPLY = 8, 0


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
        for src, dst in sorted(pending):
            try:
                sock_of[src].sendto(echo_request(ident, index[dst]), (ip_of[dst], 0))
            except (BlockingIOError, OSError):
                pass                      # not answered this round; asked again next
        deadline = time.monotonic() + min(wait_s, timeout)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
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
    finally:
        for _, sock in socks.values():
            sock.close()
    return ok


def wait_all_pairs(net, timeout=60.0, progress=None):
    """Wait until every ordered host pair answers; return (seconds, rounds).

    Raises RunFailed listing unreachable pairs if the deadline passes.
    """
    names = [h["name"] for h in net.topo["hosts"]]
    todo = {(a, b) for a in names for b in names if a != b}
    t0 = time.monotonic()
    rounds = 0
    while todo:
        rounds += 1
        todo -= ping_round(net, sorted(todo))
        if progress:
            progress(f"reachability: {len(names) * (len(names) - 1) - len(todo)}"
                     f"/{len(names) * (len(names) - 1)} host pairs")
        if todo and time.monotonic() - t0 > timeout:
            shown = ", ".join(f"{a}->{b}" for a, b in sorted(todo)[:6])
            raise RunFailed(f"{len(todo)} host pairs still unreachable after {timeout:.0f}s: "
                            f"{shown}")
    return time.monotonic() - t0, rounds
