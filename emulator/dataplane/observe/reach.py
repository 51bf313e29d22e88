"""All-pairs reachability, checked with real ICMP echoes from every host namespace.

One process opens a raw ICMP socket inside each host's namespace (a socket
keeps the namespace it was made in: ``traffic.nic.netns``), sends one echo
request from every host to every other at once and collects the replies on
all sockets together, 512 echoes at a time with 20 ms between bursts (the
whole burst of a 256-host fabric overflowed the switches' queues): the
work grows with the echoes, not with processes
(the previous check forked one ``ping`` per host pair: O(n^2) processes,
~20 s of a 64-host start and past a minute at 128).  Pairs that did not
answer are asked again in the next round, until a deadline.  The condition
the run waits on is "every checked pair answers", not a sleep.  When the
machine's neighbour table cannot hold the entries of all echoes at once, the
pairs go in waves (``waves``; see "the kernel's ARP table" below).

Which pairs (``check_pairs``): every ordered host pair up to ``ALL_PAIRS_UP_TO``
hosts (64: 4 032 echoes).  Beyond, every host to one host on every leaf
(its own included), the targets rotating with the host's position: every
host sends and is answered, every ordered leaf pair is crossed many times
over, and the work grows with hosts x leaves, not hosts squared (256 hosts
on 32 leaves: 8 192 echoes instead of 65 280, which the userspace switches
could not set up flows for in minutes).
"""

import os
import selectors
import socket
import struct
import time

from emulator.dataplane.system.nlmsg import (  # noqa: F401
    NLMSG,
    NLMSG_DONE,
    NLMSG_ERROR,
    attrs,
    error_of,
    messages,
)
from emulator.errors import RunFailed
from emulator.fabric.addressing import home_leaf
from traffic.nic.netns import entered

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
    """One echo per (src, dst) host pair, all at once; return the set that answered.
    A fabric on several servers sends each echo from its source's server."""
    if hasattr(net, "ping_round"):
        return net.ping_round(pairs, wait_s=wait_s)
    ip_of = {h["name"]: h["ip"] for h in net.topo["hosts"]}
    names = sorted(ip_of)
    index = {n: i for i, n in enumerate(names)}
    ident = os.getpid() & 0xFFFF
    socks = {}
    ok, pending = set(), set(pairs)
    sel = selectors.DefaultSelector()     # epoll: a fabric's hosts pass select()'s 1024 fds
    try:
        for src in sorted({s for s, _ in pairs}):
            with entered(f"/proc/{net.hosts[src].pid}/ns/net"):
                sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            sock.setblocking(False)
            socks[sock.fileno()] = (src, sock)
            sel.register(sock, selectors.EVENT_READ, src)
        sock_of = {src: sock for src, sock in socks.values()}

        def collect(until):
            while pending:
                left = until - time.monotonic()
                if left <= 0:
                    return
                for key, _ in sel.select(left):
                    src, sock = key.data, key.fileobj
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
        sel.close()
        for _, sock in socks.values():
            sock.close()
    return ok


def check_pairs(topo, all_pairs_up_to=ALL_PAIRS_UP_TO):
    """(the ordered host pairs to check, how they were chosen); see the module doc."""
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


# ---- the kernel's ARP table is one for all namespaces -------------------------
#
# Every echo needs a neighbour entry at its sender and one at its answerer, and
# the kernel's IPv4 neighbour table is shared by every namespace of the machine:
# past net.ipv4.neigh.default.gc_thresh3 entries (1024 by default) no new entry
# is made until old ones are 5 s stale, and the hosts cannot even ARP.  A 256-host
# fabric's 16 384 echoes need up to 32 768 entries: with gc_thresh3 at 16 384,
# 340 pairs stayed silent for 13 s.  So the pairs are checked in waves that fit
# what the table has free, and between waves the hosts' entries (a cache that the
# kernel would age out) are deleted.

GC_THRESH3 = "/proc/sys/net/ipv4/neigh/default/gc_thresh3"
ARP_STAT = "/proc/net/stat/arp_cache"
NUD_NOARP, NUD_PERMANENT = 0x40, 0x80


def neighbour_room():
    """Entries the machine's IPv4 neighbour table can still take (all namespaces)."""
    with open(GC_THRESH3) as f:
        limit = int(f.read())
    with open(ARP_STAT) as f:
        f.readline()
        entries = int(f.readline().split()[0], 16)
    return max(0, limit - entries)


def waves(pairs, room):
    """``pairs`` (sorted) cut into waves of echoes whose neighbour entries (two per
    echo at most) fit in half of ``room`` (the rest is left to whatever else runs);
    one wave when they all fit."""
    pairs = sorted(pairs)
    fits = max(64, room // 4)                  # pairs per wave
    n = -(-len(pairs) // fits)                 # ceil
    if n <= 1:
        return [pairs]
    size = -(-len(pairs) // n)                 # waves of equal size
    return [pairs[i:i + size] for i in range(0, len(pairs), size)]


_NDMSG = struct.Struct("=BxxxiHBB")
RTM_NEWNEIGH, RTM_DELNEIGH, RTM_GETNEIGH = 28, 29, 30
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NDA_DST = 1


def parse_neighbours(buf):
    """(entries [(ifindex, dst bytes, state)], done) of one recv() of an RTM_GETNEIGH
    dump; a netlink error raises OSError."""
    out = []
    for mtype, body, end in messages(buf):
        if mtype == NLMSG_DONE:
            return out, True
        if mtype == NLMSG_ERROR:
            err, exc = error_of(buf, body, "neighbour dump")
            if err:
                raise exc
        elif mtype == RTM_NEWNEIGH:
            family, ifindex, state, _, _ = _NDMSG.unpack_from(buf, body)
            for t, a, b in attrs(buf, body + _NDMSG.size, end):
                if t == NDA_DST and family == socket.AF_INET and b - a == 4:
                    out.append((ifindex, bytes(buf[a:b]), state))
    return out, False


def delete_request(seq, ifindex, dst):
    """An RTM_DELNEIGH for IPv4 neighbour ``dst`` (4 bytes) on ``ifindex``, acked."""
    body = _NDMSG.pack(socket.AF_INET, ifindex, 0, 0, 0) + struct.pack("=HH", 8, NDA_DST) + dst
    return NLMSG.pack(NLMSG.size + len(body), RTM_DELNEIGH, NLM_F_REQUEST | NLM_F_ACK,
                       seq, 0) + body


def _acks(sock, want):
    """Read ``want`` netlink acks; errors other than ENOENT (gone already) raise."""
    while want:
        buf = sock.recv(1 << 16)
        for mtype, body, _ in messages(buf):
            if not want:
                break
            if mtype == NLMSG_ERROR:
                want -= 1
                err, exc = error_of(buf, body, "deleting a neighbour")
                if err and err != 2:
                    raise exc


def flush_neighbours(net):
    """Delete the learned IPv4 neighbour entries of every host namespace (static
    ones stay); return how many went."""
    gone = 0
    for h in net.topo["hosts"]:
        with entered(f"/proc/{net.hosts[h['name']].pid}/ns/net"):
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0)
        with sock:
            sock.settimeout(5.0)
            sock.bind((0, 0))
            sock.send(NLMSG.pack(NLMSG.size + _NDMSG.size, RTM_GETNEIGH,
                                  NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
                      + _NDMSG.pack(socket.AF_INET, 0, 0, 0, 0))
            entries, done = [], False
            while not done:
                part, done = parse_neighbours(sock.recv(1 << 16))
                entries += part
            learned = [(i, d) for i, d, state in entries
                       if not state & (NUD_NOARP | NUD_PERMANENT)]
            for k in range(0, len(learned), 64):
                batch = learned[k:k + 64]
                sock.send(b"".join(delete_request(2 + k + j, i, d)
                                   for j, (i, d) in enumerate(batch)))
                _acks(sock, len(batch))
            gone += len(learned)
    return gone


def wait_all_pairs(net, timeout=60.0, progress=None, pairs=None, room=None):
    """Wait until every pair of ``pairs`` (default every ordered host pair) answers;
    return (seconds, rounds).  Raises RunFailed listing unreachable pairs if the
    deadline passes.  The pairs go in waves when the machine's neighbour table has
    no room for all their entries at once (``waves``); ``room`` defaults to what
    the table has free now."""
    names = [h["name"] for h in net.topo["hosts"]]
    todo = set(pairs) if pairs is not None else {(a, b) for a in names for b in names if a != b}
    total = len(todo)
    t0 = time.monotonic()
    rounds = 0
    parts = waves(todo, neighbour_room() if room is None else room)
    if len(parts) > 1 and progress:
        progress(f"reachability in {len(parts)} waves: the neighbour table has room "
                 f"for {2 * len(parts[0])} entries at a time")
    for k, wave in enumerate(parts):
        if k:
            try:
                flush_neighbours(net)
            except OSError as e:
                raise RunFailed(f"clearing the hosts' neighbour entries between waves: {e}")
        wave = set(wave)
        while wave:
            rounds += 1
            answered = ping_round(net, sorted(wave))
            wave -= answered
            todo -= answered
            if progress:
                progress(f"reachability: {total - len(todo)}/{total} host pairs")
            if wave and time.monotonic() - t0 > timeout:
                shown = ", ".join(f"{a}->{b}" for a, b in sorted(todo)[:6])
                raise RunFailed(f"{len(todo)} host pairs still unreachable after "
                                f"{timeout:.0f}s: {shown}")
    return time.monotonic() - t0, rounds
