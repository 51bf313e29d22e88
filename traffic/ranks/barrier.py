"""The ranks' start barrier and next-hop MAC resolution (``python -m traffic rank``).

Each rank sends a small UDP "hello" (port 4794) to every peer every 50 ms
until it has heard every peer and every peer has said it heard everyone
(or 1 s after it heard everyone); a rank that has just heard everyone says
so at once, not at its next round, so the ranks leave within a round trip
of the last one's arrival (a collective's start skew), not 50 ms apart.
The hellos also make the kernel resolve ARP, so the next-hop MAC of each
peer can then be read from the neighbour table.  A rank keeps answering
hellos after it left the barrier (``serve``), so a peer still inside it
hears everyone.  A second barrier on the next
port (``READY_PORT``) lets ranks start together once each has built its
frames, and a third (``DONE_PORT``) lets them leave together once all are
done, each still answering its peers' late retransmissions meanwhile.
"""

import select
import socket
import struct
import time

# past RoCEv2's 4791 and UET's 4793: a rank's capture sockets take those for data
BARRIER_PORT = 4794
READY_PORT = 4795
DONE_PORT = 4796
HELLO = struct.Struct("!4sIB")
ABORT_PORTS = 15        # an abort's copies from other source ports (``Barrier.abort``)
MAGIC = b"FLTB"


class Barrier:
    """The hello socket of rank ``me`` of ``ips`` (every rank's IP, in order)."""

    def __init__(self, me, ips, port=BARRIER_PORT):
        self.me, self.ips, self.port = me, list(ips), port
        self.n = len(self.ips)
        self.heard, self.heard_all = set(), set()
        self.aborted_by = None      # a peer that said the job is over (``abort``)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((self.ips[me], port))
        self.sock.setblocking(False)

    def fileno(self):
        return self.sock.fileno()

    def close(self):
        self.sock.close()

    def _send(self, flag, sock=None):
        sock = sock or self.sock
        for i, ip in enumerate(self.ips):
            if i != self.me:
                try:
                    sock.sendto(HELLO.pack(MAGIC, self.me, flag), (ip, self.port))
                except OSError:
                    pass        # no route/ARP yet: the next round retries

    def serve(self):
        """Read the hellos waiting; answer each (bit 1 of the flag: an answer)."""
        peers = set(range(self.n)) - {self.me}
        while True:
            try:
                data, addr = self.sock.recvfrom(64)
            except BlockingIOError:
                return
            if len(data) != HELLO.size:
                continue
            magic, who, flag = HELLO.unpack(data)
            if magic != MAGIC or who >= self.n or who == self.me:
                continue
            if flag & 4:                  # bit 2: the sender aborted the job
                self.aborted_by = who
                continue
            self.heard.add(who)
            if flag & 1:                  # bit 0: the sender heard everyone
                self.heard_all.add(who)
            if not flag & 2:              # bit 1: an answer, not answered again
                done = 1 if self.heard >= peers else 0
                try:
                    self.sock.sendto(HELLO.pack(MAGIC, self.me, 2 | done), addr)
                except OSError:
                    pass

    def abort(self, ports=ABORT_PORTS):
        """Tell every peer the job is over (a QP of ours failed), as NCCL aborts a
        communicator on a fatal transport error.  The fabric may have just lost a
        path (what made the QP fail): copies from the same port would all hash onto
        it, so the message goes once from this socket and once from each of
        ``ports`` more sockets of other source ports, each another ECMP draw."""
        self._send(4)
        for _ in range(ports):
            try:
                extra = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            except OSError:
                return              # out of sockets: the copies sent so far
            with extra:
                try:
                    extra.bind((self.ips[self.me], 0))
                except OSError:
                    continue
                self._send(4, extra)

    def wait(self, timeout_s, also=(), socks=(), tick=None):
        """Return once every peer was heard (and said so, or 1 s passed); else TimeoutError.

        ``also``: earlier barriers to keep answering meanwhile (peers still in them);
        ``tick`` is called after each wake-up, which ``socks`` readable also causes."""
        peers = set(range(self.n)) - {self.me}
        deadline = time.monotonic() + timeout_s
        all_since = None
        next_send = 0.0
        while True:
            now = time.monotonic()
            done = self.heard >= peers
            if done and all_since is None:
                all_since = now
                self._send(1)        # say so at once (also if we leave now): peers
                next_send = now + 0.05   # waiting on us leave now, not a round later
            if done and (self.heard_all >= peers or now - all_since > 1.0):
                return
            if now > deadline:
                raise TimeoutError(f"barrier: heard {sorted(self.heard)} of {sorted(peers)}")
            if now >= next_send:      # one round every 50 ms, however often we wake
                self._send(1 if done else 0)
                next_send = now + 0.05
            select.select([self.sock] + [b.sock for b in also] + list(socks), [], [], 0.05)
            self.serve()
            for b in also:
                b.serve()
            if tick is not None:
                tick()


def leave_together(me, ips, timeout_s, also=(), socks=(), tick=None):
    """The last barrier (``DONE_PORT``): wait for every rank, calling ``tick`` meanwhile.

    A rank that is done keeps answering its peers' late retransmissions while
    it waits (``tick`` drains its socket); a peer still stuck after
    ``timeout_s`` (its own result says why) is not waited for longer.
    """
    done = Barrier(me, ips, port=DONE_PORT)
    try:
        done.wait(timeout_s, also=also, socks=socks, tick=tick)
    except TimeoutError:
        pass
    finally:
        done.close()


def serve_readable(barriers, readable):
    """Answer hellos on the barriers (left already) that ``select`` found readable."""
    for b in barriers:
        if b is not None and b in readable:
            b.serve()


def resolve_mac(ip, intf, trigger=False, timeout=3.0):
    """Next-hop MAC of ``ip`` from the kernel's route and neighbour tables.

    With ``trigger``, a datagram to the discard port makes the kernel ARP
    first, and the neighbour table is polled until ``timeout``.
    """
    from pyroute2 import IPRoute
    end = time.monotonic() + timeout
    with IPRoute() as ipr:
        route = ipr.route("get", dst=ip)[0]
        hop = route.get("RTA_GATEWAY") or ip
        while True:
            for n in ipr.neigh("dump", dst=hop):
                mac = n.get("NDA_LLADDR")
                if mac and n["state"] not in (0x01, 0x20):   # INCOMPLETE, FAILED
                    return mac
            if not trigger or time.monotonic() > end:
                return None
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                try:
                    s.sendto(b"arp", (ip, 9))
                except OSError:
                    pass
            time.sleep(0.05)      # poll interval while the kernel ARPs


def next_hop_macs(ips):
    """{ip: next-hop MAC, or None while unresolved} from this namespace's route and
    neighbour tables (one netlink socket for all: a job resolves many peers)."""
    from pyroute2 import IPRoute
    out = {}
    with IPRoute() as ipr:
        known = {n.get("NDA_DST"): n.get("NDA_LLADDR") for n in ipr.neigh("dump")
                 if n.get("NDA_LLADDR") and n["state"] not in (0x01, 0x20)}
        for ip in ips:
            try:
                route = ipr.route("get", dst=ip)[0]
            except Exception:            # no route (yet): unresolved
                out[ip] = None
                continue
            out[ip] = known.get(route.get("RTA_GATEWAY") or ip)
    return out


def read_mac(intf):
    with open(f"/sys/class/net/{intf}/address") as f:
        return f.read().strip()
