"""One rank of a collective: the process started in each host's namespace.

Model.  ``python -m traffic rank --config FILE.json`` runs one rank.  The
config (validated by ``load_config``) lists every rank's IP, MAC and
interface; this rank's index; the collective, the message sizes, the pacing
rate (about the host link rate), QPs per connection and timeouts.

1. Barrier (``barrier``): UDP hellos until every rank heard every other;
   they also make the kernel resolve ARP, so the next-hop MAC of each peer
   is then read from the neighbour table (falling back to the config's
   ``next_hop_mac`` or ``mac``).
2. Optional ``start_time`` (Unix time) is awaited, then ``warmup`` calls of
   the first size run unreported (they absorb the ranks' start skew).  From
   the second barrier on, what arrives is received, ACKed and echoed as CNPs.
3. Per size (``tag`` = its index), the ``collectives.schedule`` steps run in
   one event loop: a step's sends are queued once the receives it depends on
   are complete (or timed out); queued packets wait in per-QP send queues
   served round-robin (``sendq``, as a NIC's QP scheduler) and leave paced
   by a token bucket;
   arriving packets are marked per (tag, step).  A receive not complete
   ``step_timeout_s`` after its step was released unblocks its dependents
   anyway, so a lost packet costs a timeout instead of a hang (details in
   ``Rank.run_size``).  A chunk still incomplete at the end is missing and
   reported in ``#wrong``.

Transport (``transport``, docs/transport.md): ``rc`` (the default) runs the
RoCE reliable connection of every QP (``traffic.roce.transport``, ``traffic.roce.qps``);
a call ends once everything arrived and everything sent is acknowledged.  A
QP out of retries aborts the job: the rank tells its peers (``Barrier.abort``),
every rank stops, ``failed_qps`` says which.  ``none`` sends every packet once.

A chunk of B bytes is cut into ceil(B/mtu) packets spread round-robin over
the connection's QPs (one PSN space and one UDP source port each, hence one
ECMP path each), as RDMA WRITE FIRST/MIDDLE/LAST/ONLY per QP.
"""

import gc
import select
import socket
import sys
import time

from lab.modes import Transport
from traffic.nic.accounting import Accounting
from traffic.nic.pacing import TokenBucket
from traffic.nic.receiver import (
    PACKET_OUTGOING,
    nothing_more,
    open_capture,
    open_sinks,
    socket_drops,
)
from traffic.nic.sender import Sender
from traffic.nic.sendq import SendQueues
from traffic.ranks.barrier import (
    READY_PORT,
    Barrier,
    leave_together,
    read_mac,
    resolve_mac,
    serve_readable,
)
from traffic.ranks.collectives import schedule
from traffic.ranks.config import (  # noqa: F401
    DEFAULTS,
    TRANSPORTS,
    ConfigError,
    cc_params,
    flow_id,
    load_config,
    out_of_order,
    qpn,
)
from traffic.ranks.outbound import Outbound, qp_key
from traffic.ranks.stack import Stack, is_uet, uet_summary
from traffic.ranks.uet_outbound import UetOutbound
from traffic.roce.frames import parse
from traffic.roce.rcframes import parse_control


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
        self.peer_of_ip = {socket.inet_aton(r["ip"]): i for i, r in enumerate(self.ranks)}
        self.rx = open_capture(self.intf)
        self.rx.setblocking(False)
        socket_drops(self.rx)            # reset the kernel's counter
        self.sinks = open_sinks()
        self.ips = [r["ip"] for r in self.ranks]
        self.hello = Barrier(self.me, self.ips)
        self.ready = None      # the second barrier (READY_PORT), once the frames are built
        # a NIC's transmit ring: a few frames in the interface's queue at most (the
        # send buffer counts a frame until it leaves), the rest wait in the QPs
        self.sender = Sender(self.intf, batch=max(1, cfg["burst"]),
                             sndbuf=4 * (cfg["mtu"] + 100))
        self.retx_bytes = 0
        self.packets_sent = 0  # data frames put on the wire, every (re)transmission
        self.peer_mac = {}     # filled by ``barrier``
        # the transport it sends with (``qps``: RC's QPs or UET's PDCs), and both it answers
        self.stack = Stack(cfg, self.sender.send_one, self.mac, mine["ip"],
                           dict(enumerate(self.ips)), self.peer_mac,
                           seed=(cfg["qpn_seed"] or 0) * 1000 + self.me)
        self.qps = self.stack.send
        self.acct = Accounting(gap_threshold_ns=int(cfg["gap_threshold_ms"] * 1e6))
        self.chunks = {}       # (tag, step, peer) -> [packets expected, set of indices]
        self.corrupt = {}      # (tag, step) -> corrupted packets
        if cfg["transport"] == Transport.UET:
            self.out = UetOutbound(self.me, mine["ip"], self.mac, self.ips, self.peer_mac,
                                   cfg["mtu"], cfg["qps"], self.qps, cfg["dscp"],
                                   cfg["qpn_seed"])
        else:
            self.out = Outbound(self.me, mine["ip"], self.mac, self.ips, self.peer_mac,
                                cfg["mtu"], cfg["qps"], cfg["dscp"], cfg["qpn_seed"],
                                cfg["entropy"], int(cfg["flowlet_gap_ms"] * 1e6), self.qps)
        self.bytes_rx = {}
        self.last_rx = {}      # tag -> last arrival of that call's packets
        import scapy.contrib.roce  # noqa: F401  (0.5 s: paid now, not in a timed call)

    def close(self):
        for s in (self.rx, self.hello, self.ready, *self.sinks):
            if s:
                s.close()
        self.sender.close()

    def barrier(self):
        self.hello.wait(self.cfg["barrier_timeout_s"])
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
    def _drain(self, buf, mv):
        qps = self.stack.rc
        for _ in range(256):
            try:
                n, addr = self.rx.recvfrom_into(buf)
            except OSError as e:
                if nothing_more(e):
                    return
                raise
            if addr[2] == PACKET_OUTGOING:
                continue
            if self.stack and is_uet(buf):
                self._drain_uet(mv, n)
                continue
            p = parse(mv[:n])
            if p is None:
                if qps:
                    c = parse_control(mv[:n])
                    if c is not None and c.dst_ip == self._my_ip:
                        qps.control(c, self.clock())
                continue
            if p.dst_ip != self._my_ip:
                continue
            now = self.clock()
            key = (p.tag, p.chunk)
            if not p.icrc_ok:
                self.corrupt[key] = self.corrupt.get(key, 0) + 1
                continue
            self.acct.add(p.flow, p.psn, now, n, p.tx_ns)
            if qps:
                peer = self.peer_of_ip.get(p.src_ip)
                if peer is None or not qps.arrived(
                        p.src_ip, self.peer_mac.get(peer) or self.ranks[peer].get("mac"),
                        self.ranks[peer]["ip"], p.dqpn, p.psn, p.ackreq, now, p.ecn == 3):
                    continue          # out of sequence or a duplicate: not placed
            self._place(p.tag, p.chunk, p.src_ip, p.index, p.count, n, now)

    def _place(self, tag, chunk, src_ip, index, count, n, now):
        whole = (tag, chunk, self.peer_of_ip.get(src_ip))
        entry = self.chunks.get(whole)
        if entry is None:
            entry = self.chunks[whole] = [count, set()]
        entry[1].add(index)
        self.bytes_rx[tag] = self.bytes_rx.get(tag, 0) + n
        self.last_rx[tag] = now

    def _drain_uet(self, mv, n):
        """A UET frame: data placed (or a trimmed one NACKed), acknowledgements taken."""
        now = self.clock()
        got = self.stack.uet.receive(mv[:n], n, now, self._peer_of)
        if got is None:
            return
        d, placed = got
        if not d.ok and not d.trimmed:
            key = (d.tag, d.chunk)
            self.corrupt[key] = self.corrupt.get(key, 0) + 1
            return
        self.acct.add(d.flow, d.psn, now, n, d.tx_ns)
        if placed:
            self._place(d.tag, d.chunk, d.src, d.index, d.count, n, now)

    def _peer_of(self, ip):
        """(next-hop MAC, IP text) of the peer at ``ip`` (bytes)."""
        peer = self.peer_of_ip.get(ip)
        r = self.ranks[peer]
        return self.peer_mac.get(peer) or r.get("mac"), r["ip"]

    def _aborted(self):
        """A QP of ours ran out of retries (then tell the peers), or a peer said so."""
        if self.qps and self.qps.failed() and self.hello.aborted_by is None:
            self.hello.aborted_by = self.me
            self.hello.abort()
        return self.hello.aborted_by is not None

    def _complete(self, tag, step, peer):
        entry = self.chunks.get((tag, step, peer))
        return entry is not None and len(entry[1]) >= entry[0]

    def _step_timeout_ns(self, nbytes):
        t = self.cfg["step_timeout_s"]
        if t is None:   # 4x the chunk's time at the paced rate, at least 1 s
            t = max(1.0, 4 * nbytes * 8 * 1.1 / self.cfg["rate_bps"])
            if self.qps:   # and never before the transport would have given up
                t += self.cfg["rc_params"].give_up_ns() / 1e9
        return int(t * 1e9)

    def _emit(self, batch, again, now):
        """Send ``batch`` (entropy applied per packet); returns the bytes sent."""
        wire = self.out.wire(batch, now, again)
        sent = self.sender.emit(wire, self.clock)
        self.packets_sent += len(wire)
        if self.qps:
            # RC's timers run from when the send returned; UET's RTT samples from when
            # the NIC took the frames (a frame waits in its transmit ring meanwhile)
            now = now if self.cfg["transport"] == Transport.UET else self.clock()
            for pkt, a in zip(batch, again):
                self.qps.sent(qp_key(pkt), pkt[1], pkt, now, a)
                if a:
                    self.retx_bytes += pkt[0].len
        return sent

    def run_size(self, tag, size):
        """One collective call of ``size`` bytes; returns its result row.

        A receive not complete ``step_timeout`` after its step was released
        *times out*: the steps depending on it are released anyway, so a lost
        chunk delays the ring by one timeout instead of stopping it.  A chunk
        completing later still counts as received.  The call ends when every
        receive is complete (and, with the RC transport, every packet sent
        is acknowledged or its QP failed), or when all sends are done, every
        pending deadline has passed and nothing of this call arrived for two
        step timeouts (what is still incomplete then is missing: ``#wrong``).
        """
        cfg, qps = self.cfg, self.qps
        steps = schedule(cfg["collective"], self.n, self.me, size, cfg["ring_order"])
        cost = (cfg["mtu"] + 100) * 8
        bucket = TokenBucket(cfg["rate_bps"], cfg["burst"] * cost, self.clock())
        buf = bytearray(9216)
        mv = memoryview(buf)
        queue, released = SendQueues(qp_key), 0
        deadline, unblocked, ok = {}, set(), set()
        sent_bytes = 0
        before = self.stack.counters() if qps else {}
        retx0 = self.retx_bytes
        start = self.clock()
        last_event = start
        end_idle = 2 * max((self._step_timeout_ns(t.nbytes) for st in steps
                            for t in st.recvs), default=0)
        self.last_rx[tag] = start
        while True:
            self._drain(buf, mv)
            now = self.clock()
            if qps:
                self.stack.poll(now)
                if self._aborted():
                    last_event = now
                    break
            for k in range(released):
                if k in ok:
                    continue
                if all(self._complete(tag, k, t.peer) for t in steps[k].recvs):
                    ok.add(k)
                    unblocked.add(k)
                    last_event = now
                elif now >= deadline[k]:
                    unblocked.add(k)
            while released < len(steps) and all(d in unblocked for d in steps[released].after):
                st = steps[released]
                for t in st.sends:
                    queue.extend(self.out.packets(tag, released, t.peer, t.nbytes, now))
                deadline[released] = now + self._step_timeout_ns(
                    max((t.nbytes for t in st.recvs), default=0))
                released += 1
            if len(queue) or (qps and qps.retx):
                bucket.refill(now)
                n = min(self.sender.batch, int(bucket.tokens // cost))
                if n > 0:
                    waiting = len(queue)
                    batch, again = self.out.next_batch(queue, n, now)
                    if batch:
                        sent = self._emit(batch, again, now)
                        bucket.consume(sent * 8)
                        sent_bytes += sent
                        last_event = self.clock()
                    if batch or len(queue) < waiting:      # sent, or a failed QP flushed
                        continue
                # no token yet, or every QP with work waits for its rate (DCQCN)
                wait = bucket.wait_ns(cost) if n <= 0 else max(qps.next_send_ns(now), 20_000)
            elif released == len(steps):
                # a QP still sending (again) ends by its ACKs or by running out of retries
                sending = bool(qps and qps.busy())
                if len(ok) == len(steps) and not sending:
                    if qps:
                        last_event = now          # the last ACK completed the sends
                    break
                give_up = max([self.last_rx[tag] + end_idle]
                              + [deadline[k] for k in range(released) if k not in ok])
                if now >= give_up and not sending:
                    last_event = now
                    break
                wait = None if sending else give_up - now
            else:
                wait = None
            pending = [deadline[k] - now for k in range(released) if k not in unblocked]
            timer = self.stack.next_deadline() if qps else None
            waits = [w for w in [wait, None if timer is None else timer - now] + pending
                     if w is not None]
            timeout = max(min(waits), 0) / 1e9 if waits else 0.05
            r, _, _ = select.select([self.rx, self.hello, self.ready], [], [],
                                    min(timeout, 0.05))
            serve_readable((self.hello, self.ready), r)
        bad = [k for k in range(len(steps)) if k not in ok]
        corrupted = sum(1 for k in range(len(steps)) if self.corrupt.get((tag, k)))
        missing = sum(1 for k in bad if not self.corrupt.get((tag, k))
                      for t in steps[k].recvs if not self._complete(tag, k, t.peer))
        row = {"size": size, "time_s": (last_event - start) / 1e9, "t_start_ns": start,
               "bytes_sent": sent_bytes, "bytes_received": self.bytes_rx.get(tag, 0),
               "steps": len(steps), "chunks_missing": missing,
               "chunks_corrupted": corrupted}
        if qps:
            after = self.stack.counters()
            row["transport"] = {k: after[k] - before.get(k, 0) for k in after}
            row["retransmitted_bytes"] = self.retx_bytes - retx0
        return row

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
                self.out.prepare(t.peer)
            for t in st.recvs if self.qps else ():
                peer = self.ranks[t.peer]
                ip = socket.inet_aton(peer["ip"])
                self.stack.uet.prepare(ip, self.peer_mac[t.peer], peer["ip"])
                for q in range(self.cfg["qps"]):
                    self.stack.rc.prepare(ip, self.peer_mac[t.peer], peer["ip"],
                                          qpn(t.peer, self.me, q, self.cfg["qpn_seed"]))
        # a full GC pass over scapy's objects stalls the loop for tens of ms: exempt them
        gc.collect()
        gc.freeze()
        # every rank has its frames: start together (a rank still building them would
        # not answer yet, and its peers' first packets would time out)
        # Meanwhile arriving packets are received, ACKed and echoed as CNPs: a NIC does
        # that whether its application has started the call or not.
        self.ready = Barrier(self.me, self.ips, port=READY_PORT)
        self.ready.wait(self.cfg["barrier_timeout_s"], also=(self.hello,), socks=(self.rx,),
                        tick=self._receive_only())
        # warm-up calls (nccl-tests -w) absorb the ranks' start skew; not reported
        calls = [self.cfg["sizes"][0]] * self.cfg["warmup"] + list(self.cfg["sizes"])
        print("calls", file=sys.stderr, flush=True)       # a drill times its faults from here
        results = []
        for tag, size in enumerate(calls):
            if tag == self.cfg["warmup"] and self.qps:
                self.qps.trace.clear()   # the cuts traced are the reported calls'
            results.append(self.run_size(tag, size))
            if self._aborted():
                results[-1]["aborted"] = True
                break                    # the job is over: the calls left never run
        results = results[self.cfg["warmup"]:]
        if self.stack:
            self.stack.uet.close_all(self.clock())    # the job's end closes its PDCs
        self._linger()
        flows = self.acct.summary(timeline=False)
        extra = {}
        if self.qps:   # totals; first DCQCN cuts (ms from the first reported call, peer, rate)
            extra["transport"] = self.stack.counters()
            if self.cfg["transport"] == Transport.UET:
                t0 = results[0]["t_start_ns"] if results else 0
                extra["uet"] = uet_summary(self.qps, t0)
            extra["rc"] = {"timeout_exp": self.cfg["timeout_exp"],
                           "retry_cnt": self.cfg["retry_cnt"]}
            t0 = results[0]["t_start_ns"] if results else (
                self.qps.trace[0][0] if self.qps.trace else 0)
            extra["dcqcn_cuts"] = [(round((t - t0) / 1e6, 3), p, r)
                                  for t, p, r, _alpha in self.qps.trace]
            extra["failed_qps"] = [{"peer": self.ranks[peer].get("name") or peer, "qp": q}
                                   for peer, q in self.qps.failed()]
            extra["per_qp"] = self.qps.per_qp()
            extra["aborted"] = self._aborted()
        return dict({"rank": self.me, "name": self.ranks[self.me].get("name"),
                "collective": self.cfg["collective"], "nranks": self.n,
                "link_bps": self.cfg["rate_bps"], "ring": self.cfg["ring_order"],
                "qps": self.cfg["qps"], "results": results,
                "entropy": self.cfg["entropy"], "entropy_changes": self.out.entropy.changes,
                "rx_flows": flows["total"], "socket_drops": socket_drops(self.rx),
                "data_frames_sent": self.packets_sent,
                "control_frames_dropped": self.sender.control_dropped,
                "nic_queue_full_waits": self.sender.queue_full}, **extra)

    def _receive_only(self):
        """A barrier's ``tick``: take in what arrived and run the transport's timers."""
        buf = bytearray(9216)
        mv = memoryview(buf)

        def tick():
            self._drain(buf, mv)
            if self.qps:
                self.stack.poll(self.clock())
        return tick

    def _linger(self):
        """Stay until every rank is done, ACKing late retransmissions (barrier.leave_together)."""
        if self.qps:
            leave_together(self.me, self.ips,
                           self.cfg["barrier_timeout_s"], also=(self.hello, self.ready),
                           socks=(self.rx,), tick=self._receive_only())

