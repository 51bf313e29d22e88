"""One rank of a collective: the process started in each host's namespace.

Model.  ``python -m traffic rank --config FILE.json`` runs one rank.  The
config (validated by ``load_config``) lists every rank's IP, MAC and
interface; this rank's index; the collective, the message sizes, the pacing
rate (about the host link rate), QPs per connection and timeouts.

1. Barrier: each rank sends a small UDP "hello" (port 4792) to every peer
   every 50 ms until it has heard every peer and every peer has said it heard
   everyone (or 1 s after it heard everyone).  The hellos also make the kernel
   resolve ARP, so the next-hop MAC of each peer is then read from the
   neighbour table (falling back to the config's ``next_hop_mac`` or ``mac``).
2. Optional ``start_time`` (Unix time) is awaited, then ``warmup`` calls of
   the first size run unreported (they absorb the ranks' start skew).
3. Per size (``tag`` = its index), the ``collectives.schedule`` steps run in
   one event loop: a step's sends are queued once the receives it depends on
   are complete (or timed out); queued packets leave paced by a token bucket;
   arriving packets are marked per (tag, step).  A receive not complete
   ``step_timeout_s`` after its step was released unblocks its dependents
   anyway, so a lost packet costs a timeout instead of a hang (details in
   ``Rank.run_size``).  There is no retransmission: a chunk still incomplete
   at the end is missing and reported in ``#wrong``.

A chunk of B bytes is cut into ceil(B/mtu) packets spread round-robin over
the connection's QPs (one PSN space and one UDP source port each, hence one
ECMP path each), as RDMA WRITE FIRST/MIDDLE/LAST/ONLY per QP.
"""

import gc
import json
import select
import socket
import struct
import sys
import time

from .accounting import Accounting
from .entropy import MODES as ENTROPY_MODES, EntropyPolicy, sport as entropy_sport
from .collectives import COLLECTIVES, ring_order, schedule
from .frames import (HEADERS_LEN, PROBE, RETH_LEN, PSN_MASK, FrameTemplate,
                     opcode_for, parse)
from .pacing import TokenBucket
from .receiver import PACKET_OUTGOING, open_capture, open_sink, socket_drops
from .sender import Sender

BARRIER_PORT = 4792
HELLO = struct.Struct("!4sIB")

DEFAULTS = {"collective": "allreduce", "sizes": [1 << 20], "rate_bps": 40e6,
            "qps": 1, "mtu": 1024, "dscp": 26, "ring": "naive", "burst": 8,
            "start_time": None, "step_timeout_s": None, "barrier_timeout_s": 30.0,
            "output": None, "gap_threshold_ms": 10.0, "warmup": 0,
            # NIC path entropy (traffic.entropy): qp | spray | flowlet, and the
            # idle gap that starts a new flowlet
            "entropy": "qp", "flowlet_gap_ms": 1.0}
RANK_KEYS = {"ip", "mac", "intf", "leaf", "name", "next_hop_mac"}


class ConfigError(ValueError):
    """The rank config is invalid; the message names the key."""


def load_config(doc):
    """Validate a config dict (or a path); return it with defaults filled."""
    if isinstance(doc, str):
        with open(doc) as f:
            doc = json.load(f)
    unknown = set(doc) - set(DEFAULTS) - {"rank", "ranks"}
    if unknown:
        raise ConfigError(f"unknown keys {sorted(unknown)}")
    cfg = dict(DEFAULTS, **doc)
    ranks = cfg.get("ranks")
    if not isinstance(ranks, list) or len(ranks) < 1:
        raise ConfigError("ranks: a non-empty list is required")
    for i, r in enumerate(ranks):
        missing = {"ip", "intf"} - set(r)
        if missing or set(r) - RANK_KEYS:
            raise ConfigError(f"ranks[{i}]: needs ip and intf; allowed keys {sorted(RANK_KEYS)}")
    if not isinstance(cfg.get("rank"), int) or not 0 <= cfg["rank"] < len(ranks):
        raise ConfigError(f"rank: an index in 0..{len(ranks) - 1} is required")
    if cfg["collective"] not in COLLECTIVES:
        raise ConfigError(f"collective: one of {COLLECTIVES}")
    if not cfg["sizes"] or any(not isinstance(s, int) or s <= 0 for s in cfg["sizes"]):
        raise ConfigError("sizes: positive integers (bytes)")
    if not isinstance(cfg["warmup"], int) or cfg["warmup"] < 0:
        raise ConfigError("warmup: a count of calls >= 0")
    if cfg["qps"] < 1 or cfg["rate_bps"] <= 0 or not PROBE.size <= cfg["mtu"] <= 8192:
        raise ConfigError("qps >= 1, rate_bps > 0 and 36 <= mtu <= 8192 required")
    if cfg["entropy"] not in ENTROPY_MODES or not cfg["flowlet_gap_ms"] > 0:
        raise ConfigError(f"entropy: one of {ENTROPY_MODES}; flowlet_gap_ms > 0")
    ring = cfg["ring"]
    if ring == "naive":
        cfg["ring_order"] = list(range(len(ranks)))
    elif ring == "topology":
        if any("leaf" not in r for r in ranks):
            raise ConfigError("ring 'topology' needs a 'leaf' for every rank")
        cfg["ring_order"] = ring_order(range(len(ranks)),
                                       {i: r["leaf"] for i, r in enumerate(ranks)})
    elif isinstance(ring, list) and sorted(ring) == list(range(len(ranks))):
        cfg["ring_order"] = list(ring)
    else:
        raise ConfigError("ring: 'naive', 'topology' or a permutation of rank indices")
    return cfg


def flow_id(src, dst, qp):
    return (src << 20) | (dst << 8) | qp


def qpn(src, dst, qp):
    """A QP number unique per (src, dst, qp): distinct UDP sports per QP."""
    return ((src + 1) << 14 | dst << 4 | qp) & PSN_MASK


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


def read_mac(intf):
    with open(f"/sys/class/net/{intf}/address") as f:
        return f.read().strip()


class Rank:
    """Runs one rank; ``run`` returns the result document."""

    def __init__(self, cfg, clock=time.monotonic_ns):
        self.cfg = cfg
        self.me = cfg["rank"]
        self.ranks = cfg["ranks"]
        self.n = len(self.ranks)
        self.clock = clock
        mine = self.ranks[self.me]
        self.intf = mine["intf"]
        self.mac = mine.get("mac") or read_mac(self.intf)
        self._my_ip = socket.inet_aton(mine["ip"])   # frames for others are ignored
        self.rx = open_capture(self.intf)
        self.rx.setblocking(False)
        socket_drops(self.rx)            # reset the kernel's counter
        self.sink = open_sink()
        self.hello = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.hello.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.hello.bind((mine["ip"], BARRIER_PORT))
        self.hello.setblocking(False)
        self.sender = Sender(self.intf, batch=max(1, cfg["burst"]))
        self.acct = Accounting(gap_threshold_ns=int(cfg["gap_threshold_ms"] * 1e6))
        self.entropy = EntropyPolicy(cfg["entropy"], int(cfg["flowlet_gap_ms"] * 1e6))
        self.variants = {}     # (template id, entropy index) -> template with that sport
        self.chunks = {}       # (tag, step) -> [packets expected, set of indices]
        self.corrupt = {}      # (tag, step) -> corrupted packets
        self.psn = {}
        self.templates = {}
        self.peer_mac = {}
        self.heard, self.heard_all = set(), set()
        self.bytes_rx = {}
        self.last_rx = {}      # tag -> last arrival of that call's packets
        # scapy's import takes ~0.5 s: pay it now, not inside the first timed call
        import scapy.contrib.roce  # noqa: F401

    def close(self):
        for s in (self.rx, self.hello, self.sink):
            if s:
                s.close()
        self.sender.close()

    # -- barrier -----------------------------------------------------------
    def _hello_send(self, flag):
        for i, r in enumerate(self.ranks):
            if i != self.me:
                try:
                    self.hello.sendto(HELLO.pack(b"FLTB", self.me, flag),
                                      (r["ip"], BARRIER_PORT))
                except OSError:
                    pass        # no route/ARP yet: the next round retries

    def _hello_recv(self):
        peers = set(range(self.n)) - {self.me}
        while True:
            try:
                data, addr = self.hello.recvfrom(64)
            except BlockingIOError:
                return
            if len(data) != HELLO.size:
                continue
            magic, who, flag = HELLO.unpack(data)
            if magic != b"FLTB" or who >= self.n or who == self.me:
                continue
            self.heard.add(who)
            if flag & 1:                  # bit 0: the sender heard everyone
                self.heard_all.add(who)
            if not flag & 2:              # bit 1: an answer, not answered again
                # so a peer still in its barrier hears us after we left ours
                done = 1 if self.heard >= peers else 0
                try:
                    self.hello.sendto(HELLO.pack(b"FLTB", self.me, 2 | done), addr)
                except OSError:
                    pass

    def barrier(self):
        peers = set(range(self.n)) - {self.me}
        deadline = time.monotonic() + self.cfg["barrier_timeout_s"]
        all_since = None
        while True:
            now = time.monotonic()
            done = self.heard >= peers
            if done and all_since is None:
                all_since = now
            if done and (self.heard_all >= peers or now - all_since > 1.0):
                break
            if now > deadline:
                raise TimeoutError(f"barrier: heard {sorted(self.heard)} of {sorted(peers)}")
            self._hello_send(1 if done else 0)
            select.select([self.hello], [], [], 0.05)
            self._hello_recv()
        for i, r in enumerate(self.ranks):
            if i != self.me:
                mac = r.get("next_hop_mac")
                if not mac:
                    try:
                        mac = resolve_mac(r["ip"], self.intf)
                    except Exception:          # no pyroute2 route: use the config
                        mac = None
                self.peer_mac[i] = mac or r.get("mac")
                if not self.peer_mac[i]:
                    raise RuntimeError(f"no MAC for rank {i} ({r['ip']})")

    # -- data path ----------------------------------------------------------
    def _template(self, peer, qp, opcode, payload):
        key = (peer, qp, opcode, payload)
        t = self.templates.get(key)
        if t is None:
            q = qpn(self.me, peer, qp)
            extra = RETH_LEN if opcode in ("WRITE_FIRST", "WRITE_ONLY") else 0
            t = self.templates[key] = FrameTemplate(
                self.mac, self.peer_mac[peer], self.ranks[self.me]["ip"],
                self.ranks[peer]["ip"], dst_qpn=q, src_qpn=q, opcode=opcode,
                frame_len=HEADERS_LEN + extra + payload, dscp=self.cfg["dscp"])
        return t

    def _packets(self, tag, step, transfer):
        """The packet tuples of one chunk, spread over the QPs."""
        mtu, qps = self.cfg["mtu"], self.cfg["qps"]
        count = max(1, -(-transfer.nbytes // mtu))
        out = []
        per_qp = [len(range(q, count, qps)) for q in range(qps)]
        for i in range(count):
            q = i % qps
            payload = max(min(mtu, transfer.nbytes - i * mtu), PROBE.size)
            op = opcode_for("WRITE", i // qps, per_qp[q])
            key = (transfer.peer, q)
            psn = self.psn.get(key, 0)
            self.psn[key] = (psn + 1) & PSN_MASK
            out.append((self._template(transfer.peer, q, op, payload), psn,
                        flow_id(self.me, transfer.peer, q), tag, step, i, count))
        return out

    def _with_entropy(self, packet, now):
        """``packet`` with the source port its QP's entropy policy picks now."""
        idx = self.entropy.pick(packet[2], now)
        if idx == 0:
            return packet
        t = packet[0]
        key = (id(t), idx)
        v = self.variants.get(key)
        if v is None:
            v = self.variants[key] = t.with_sport(entropy_sport(t.sport, idx))
        return (v,) + packet[1:]

    def _drain(self, buf, mv):
        for _ in range(256):
            try:
                n, addr = self.rx.recvfrom_into(buf)
            except BlockingIOError:
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            p = parse(mv[:n])
            if p is None or p.dst_ip != self._my_ip:
                continue
            now = self.clock()
            key = (p.tag, p.chunk)
            if not p.icrc_ok:
                self.corrupt[key] = self.corrupt.get(key, 0) + 1
                continue
            self.acct.add(p.flow, p.psn, now, n, p.tx_ns)
            entry = self.chunks.get(key)
            if entry is None:
                entry = self.chunks[key] = [p.count, set()]
            entry[1].add(p.index)
            self.bytes_rx[p.tag] = self.bytes_rx.get(p.tag, 0) + n
            self.last_rx[p.tag] = now

    def _step_timeout_ns(self, nbytes):
        t = self.cfg["step_timeout_s"]
        if t is None:   # 4x the chunk's time at the paced rate, at least 1 s
            t = max(1.0, 4 * nbytes * 8 * 1.1 / self.cfg["rate_bps"])
        return int(t * 1e9)

    def run_size(self, tag, size):
        """One collective call of ``size`` bytes; returns its result row.

        A receive not complete ``step_timeout`` after its step was released
        *times out*: the steps depending on it are released anyway, so a lost
        chunk delays the ring by one timeout instead of stopping it.  A chunk
        completing later still counts as received.  The call ends when every
        receive is complete, or when all sends are done, every pending
        deadline has passed and nothing of this call arrived for two step
        timeouts (what is still incomplete then is missing: ``#wrong``).
        """
        cfg = self.cfg
        steps = schedule(cfg["collective"], self.n, self.me, size, cfg["ring_order"])
        cost = (cfg["mtu"] + 100) * 8
        bucket = TokenBucket(cfg["rate_bps"], cfg["burst"] * cost, self.clock())
        buf = bytearray(9216)
        mv = memoryview(buf)
        queue, qpos, released = [], 0, 0
        deadline, unblocked, ok = {}, set(), set()
        sent_bytes = 0
        start = self.clock()
        last_event = start
        end_idle = 2 * max((self._step_timeout_ns(t.nbytes) for st in steps
                            for t in st.recvs), default=0)
        self.last_rx[tag] = start
        while True:
            self._drain(buf, mv)
            now = self.clock()
            for k in range(released):
                if k in ok:
                    continue
                entry = self.chunks.get((tag, k))
                if entry is not None and len(entry[1]) >= entry[0]:
                    ok.add(k)
                    unblocked.add(k)
                    last_event = now
                elif now >= deadline[k]:
                    unblocked.add(k)
            while released < len(steps) and all(d in unblocked for d in steps[released].after):
                st = steps[released]
                for t in st.sends:
                    queue.extend(self._packets(tag, released, t))
                deadline[released] = now + self._step_timeout_ns(
                    max(t.nbytes for t in st.recvs))
                released += 1
            if qpos < len(queue):
                bucket.refill(now)
                n = min(self.sender.batch, len(queue) - qpos, int(bucket.tokens // cost))
                if n > 0:
                    batch = queue[qpos:qpos + n]
                    if self.entropy.active:
                        batch = [self._with_entropy(p, now) for p in batch]
                    sent = self.sender.emit(batch, self.clock)
                    bucket.consume(sent * 8)
                    sent_bytes += sent
                    qpos += n
                    last_event = self.clock()
                    continue
                wait = bucket.wait_ns(cost)
            elif released == len(steps):
                if len(ok) == len(steps):
                    break
                give_up = max([self.last_rx[tag] + end_idle]
                              + [deadline[k] for k in range(released) if k not in ok])
                if now >= give_up:
                    last_event = now
                    break
                wait = give_up - now
            else:
                wait = None
            pending = [deadline[k] - now for k in range(released) if k not in unblocked]
            waits = [w for w in [wait] + pending if w is not None]
            timeout = max(min(waits), 0) / 1e9 if waits else 0.05
            r, _, _ = select.select([self.rx, self.hello], [], [], min(timeout, 0.05))
            if self.hello in r:
                self._hello_recv()
        bad = [k for k in range(len(steps)) if k not in ok]
        corrupted = sum(1 for k in range(len(steps)) if self.corrupt.get((tag, k)))
        missing = sum(1 for k in bad if not self.corrupt.get((tag, k)))
        return {"size": size, "time_s": (last_event - start) / 1e9,
                "bytes_sent": sent_bytes, "bytes_received": self.bytes_rx.get(tag, 0),
                "steps": len(steps), "chunks_missing": missing,
                "chunks_corrupted": corrupted}

    def run(self):
        self.barrier()
        if self.cfg["start_time"]:
            delay = self.cfg["start_time"] - time.time()
            if delay > 0:
                time.sleep(delay)       # the start barrier the config asked for
        # build the full-size templates of every peer now (scapy: ~1 ms each)
        for st in schedule(self.cfg["collective"], self.n, self.me, self.cfg["sizes"][0],
                           self.cfg["ring_order"]):
            for t in st.sends:
                for q in range(self.cfg["qps"]):
                    for op in ("WRITE_ONLY", "WRITE_FIRST", "WRITE_MIDDLE", "WRITE_LAST"):
                        self._template(t.peer, q, op, self.cfg["mtu"])
        # a full GC pass over scapy's objects stalls the loop for tens of ms: exempt them
        gc.collect()
        gc.freeze()
        # warm-up calls (nccl-tests -w) absorb the ranks' start skew; not reported
        calls = [self.cfg["sizes"][0]] * self.cfg["warmup"] + list(self.cfg["sizes"])
        results = [self.run_size(tag, size) for tag, size in enumerate(calls)]
        results = results[self.cfg["warmup"]:]
        flows = self.acct.summary(timeline=False)
        return {"rank": self.me, "name": self.ranks[self.me].get("name"),
                "collective": self.cfg["collective"], "nranks": self.n,
                "link_bps": self.cfg["rate_bps"], "ring": self.cfg["ring_order"],
                "qps": self.cfg["qps"], "results": results,
                "entropy": self.cfg["entropy"], "entropy_changes": self.entropy.changes,
                "rx_flows": flows["total"], "socket_drops": socket_drops(self.rx)}


def main(config_path, output=None):
    """Entry point of ``python -m traffic rank``; returns the exit status."""
    cfg = load_config(config_path)
    rank = Rank(cfg)
    try:
        doc = rank.run()
    finally:
        rank.close()
    text = json.dumps(doc, indent=1)
    out = output or cfg["output"]
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")
    wrong = sum(r["chunks_missing"] + r["chunks_corrupted"] for r in doc["results"])
    return 1 if wrong else 0
