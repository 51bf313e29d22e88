"""One NIC of a job: its sockets, QPs, send queues, pacing and receive path.

Model.  A ``JobNic`` is one endpoint (a host interface) serving every
collective of the job that crosses it, as a RoCE NIC serves every
communicator of its host:

- one RC QP set per peer endpoint (``qps.RankQPs``: ``qps`` QPs per
  connection, one PSN space and one UDP source port each), shared by every
  collective between the two NICs; the frames' probe ``tag`` says which
  instance a packet belongs to, ``chunk`` its step;
- per-QP send queues served round-robin (``sendq``), resends first
  (``outbound.Outbound.next_batch``), DCQCN/TIMELY per QP when configured;
- a token bucket at the endpoint's rate, ``burst`` frames deep;
- a transmit ring: a batch the interface's queue refused (a paused or full
  link) waits in the NIC, never in a blocking send (one process serves all
  NICs: one of them stalling must not stall the others);
- ACK/NAK/CNP frames go out on a socket of their own, at once (a NIC's
  control path is not queued behind its data); refused ones wait in order;
- the receive socket is read in batches when the engine's selector says it
  is readable; arrival times are the kernel's receive stamps, so reading on
  the engine's tick adds nothing to the measured times.

The sockets are opened inside the endpoint's namespace (``netns.entered``).
"""

import fcntl
import socket
import struct
import time
from collections import deque

from lab.modes import Transport
from traffic.nic.accounting import Accounting
from traffic.nic.netns import entered
from traffic.nic.pacing import TokenBucket
from traffic.nic.receiver import (
    PACKET_OUTGOING,
    nothing_more,
    open_capture,
    open_sinks,
    socket_drops,
)
from traffic.nic.sender import _DOWN, _FULL, MSG_DONTWAIT, ROOM_WAIT_NS, Sender, open_raw
from traffic.nic.sendq import SendQueues
from traffic.ranks.outbound import Outbound, qp_key
from traffic.ranks.stack import Stack, is_uet, uet_summary
from traffic.ranks.uet_outbound import UetOutbound
from traffic.roce.frames import ETH_LEN, FastParser, frame_len_for_mtu
from traffic.roce.rcframes import parse_control

SO_TIMESTAMPNS = 35
TIMESPEC = struct.Struct("=qq")
ANC_SIZE = socket.CMSG_SPACE(TIMESPEC.size)
CONTROL_BACKLOG = 4096            # control frames waiting for room, at most
TRACE_LIMIT = 20_000              # DCQCN cuts and go-backs traced per NIC (``timelines``)
SIOCGIFMTU = 0x8921


class JobNic:
    """Endpoint ``index`` of a job (``spec``: its ``endpoints`` entry; ``nic``: the
    validated NIC keys; ``peers``: endpoint index -> spec)."""

    def __init__(self, index, spec, nic, peers, clock=time.monotonic_ns, tick_ns=1_000_000,
                 timelines=False, tag_owner=None, classes=(), tag_class=None):
        self.index, self.spec, self.clock = index, spec, clock
        self.tag_owner = tag_owner   # tag -> owner index (``job_config.owner_of``), or None
        self.name, self.ip, self.rate = spec["name"], spec["ip"], spec["rate_bps"]
        self.cfg = nic
        self.cost = (nic["mtu"] + 100) * 8
        # The engine passes by at most once per tick: the bucket holds two ticks of
        # tokens (else it would cap the rate below the link's), at least ``burst`` frames
        depth = max(max(1, nic["burst"]) * self.cost, 2 * self.rate * tick_ns / 1e9)
        batch = min(64, max(1, nic["burst"], -(-int(depth) // self.cost)))
        self.rx = self.sender = self.ctl = self.udp = None
        self.sinks = []
        try:
            with entered(spec.get("netns")):
                self.rx = open_capture(spec["intf"])
                self.sinks = open_sinks()
                # a NIC's transmit ring: a few frames in the interface's queue (the
                # send buffer counts a frame until it leaves), the rest wait in the QPs
                self.sender = Sender(spec["intf"], batch=batch,
                                     sndbuf=2 * batch * (nic["mtu"] + 100))
                self.ctl = open_raw(spec["intf"], sndbuf=256 << 10)
                self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        except BaseException:
            self.close()
            raise
        frame = frame_len_for_mtu(nic["mtu"]) - ETH_LEN
        mtu = struct.unpack_from("16si", fcntl.ioctl(
            self.udp.fileno(), SIOCGIFMTU, struct.pack("16si", spec["intf"].encode(), 0)))[1]
        if frame > mtu:
            self.close()
            raise ValueError(f"endpoint {self.name}: RoCE mtu {nic['mtu']} makes "
                             f"{frame}-byte IP packets; {spec['intf']} has MTU {mtu}")
        self.rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.rx.setblocking(False)
        self.udp.setblocking(False)
        socket_drops(self.rx)                  # reset the kernel's counter
        self.drops = 0
        self.mac = spec.get("mac") or ":".join(
            f"{b:02x}" for b in self.sender.sock.getsockname()[4])
        self.my_ip = socket.inet_aton(self.ip)
        self.peer_ip = {j: p["ip"] for j, p in peers.items()}
        self.peer_of_ip = {socket.inet_aton(p["ip"]): j for j, p in peers.items()}
        self.peer_name = {j: p["name"] for j, p in peers.items()}
        self.peer_mac = {}                     # filled once resolved (``job``)
        # the transport it sends with (``rc``: RC's QPs or UET's PDCs), and both it answers
        self.stack = Stack(dict(nic, rate_bps=self.rate), self.send_control, self.mac,
                           self.ip, self.peer_ip, self.peer_mac, rate_slack_ns=2 * tick_ns,
                           seed=(nic["qpn_seed"] or 0) * 1000 + index,
                           trace_limit=TRACE_LIMIT if timelines else 500)
        self.rc = self.stack.send
        self.uet = nic["transport"] == Transport.UET
        if self.uet:
            self.out = UetOutbound(index, self.ip, self.mac, self.peer_ip, self.peer_mac,
                                   nic["mtu"], nic["qps"], self.rc, nic["dscp"],
                                   nic["qpn_seed"], class_dscp=classes or None,
                                   tag_class=tag_class)
        else:
            self.out = Outbound(index, self.ip, self.mac, self.peer_ip, self.peer_mac,
                                nic["mtu"], nic["qps"], nic["dscp"], nic["qpn_seed"],
                                nic["entropy"], int(nic["flowlet_gap_ms"] * 1e6), self.rc,
                                class_dscp=classes or None, tag_class=tag_class)
        self.queue = SendQueues(qp_key)
        self.ring = deque()                    # (packet, resent?) the interface refused
        self.ctl_wait = deque()                # control frames the interface refused
        self.bucket = TokenBucket(self.rate, depth, clock())
        self.acct = Accounting(gap_threshold_ns=int(nic["gap_threshold_ms"] * 1e6),
                               bin_ns=None)
        self.parse = FastParser(True)
        self.buf = bytearray(9216)
        self.bufs = [self.buf]
        self.mv = memoryview(self.buf)
        self.rt_offset = time.time_ns() - clock()   # kernel stamps -> CLOCK_MONOTONIC
        self.chunks = {}       # (tag, step, peer) -> [packets expected, set of indices]
        self.done = {}         # tag -> [(step, peer)] of chunks completed since looked at
        self.corrupt = {}      # (tag, step) -> corrupted packets
        self.last_rx = {}      # tag -> last arrival of its data (ns)
        self.rx_bytes, self.tx_bytes, self.retx_bytes = {}, {}, {}    # per tag
        # per flow (QP) and owner: flow id << 16 | owner index -> [bytes, resent bytes]
        self.flow_tx = {}
        self.unsent = {}       # tag -> packets queued, never sent yet
        # tag -> when its first new packet left, when its queue of new ones ran empty
        self.tx_first, self.tx_drained = {}, {}
        # tag -> [(arrival ns, bytes accepted so far)] (``timelines``), else None
        self.rx_line = {} if timelines else None
        self.last_ack = None
        # when the transport's timers need a look (``poll_rc``): None while none runs
        self.rc_due = None
        if self.rc is not None:
            self.rto = self.rc.p.pds.rto_min_ns if self.uet else nic["rc_params"].timeout_ns
        self.data_sent = self.data_received = self.control_sent = 0
        self.control_received = self.control_dropped = self.other_frames = 0

    def close(self):
        for s in (self.rx, *self.sinks, self.ctl, self.udp):
            if s is not None:
                s.close()
        if self.sender is not None:
            self.sender.close()

    def fileno(self):
        return self.rx.fileno()

    def step_timeout_ns(self, nbytes):
        """A receive's timeout, as a rank's (``Rank._step_timeout_ns``) at this NIC's rate."""
        t = self.cfg["step_timeout_s"]
        if t is None:   # 4x the chunk's time at the paced rate, at least 1 s
            t = max(1.0, 4 * nbytes * 8 * 1.1 / self.rate)
            if self.rc:   # and never before the transport would have given up
                t += (self.rc.p.pds.give_up_ns() if self.uet else
                      self.cfg["rc_params"].give_up_ns()) / 1e9
        return int(t * 1e9)

    # -- the collectives' side ---------------------------------------------------------
    def enqueue(self, tag, packets):
        self.queue.extend(packets)
        self.unsent[tag] = self.unsent.get(tag, 0) + len(packets)

    def complete(self, tag, step, peer):
        entry = self.chunks.get((tag, step, peer))
        return entry is not None and len(entry[1]) >= entry[0]

    def poll_rc(self, now):
        """Run the transport's timers if one may be due (a DCQCN rate limiter's
        timers every pass); keeps ``rc_due`` for the engine's wake-up."""
        rp = self.stack.rc.rp
        if rp or (self.rc_due is not None and now >= self.rc_due):
            self.rc_due = self.stack.poll(now)
            if rp:
                self.rc_due = now if self.rc_due is None else min(self.rc_due, now)

    def busy(self):
        """Something waits to be sent (data, resends or control frames)."""
        return bool(self.ring or len(self.queue) or self.ctl_wait
                    or (self.rc is not None and self.rc.retx))

    # -- sending -----------------------------------------------------------------------
    def send_control(self, frame):
        """An ACK, NAK or CNP: now, or after the ones still waiting for room."""
        if self.ctl_wait or not self._control_out(frame):
            if len(self.ctl_wait) < CONTROL_BACKLOG:
                self.ctl_wait.append(frame)
            else:
                self.control_dropped += 1

    def _control_out(self, frame):
        try:
            self.ctl.send(frame, MSG_DONTWAIT)
        except OSError as e:
            if e.errno in _FULL:
                return False
            if e.errno not in _DOWN:
                raise
            self.control_dropped += 1        # the interface is down: lost on the wire
        else:
            self.control_sent += 1
        return True

    def transmit(self, now):
        """Send what the bucket and the QPs allow now; returns ns until more may
        go (the bucket or a QP's rate), or None when nothing waits."""
        while self.ctl_wait and self._control_out(self.ctl_wait[0]):
            self.ctl_wait.popleft()
        rc, ring = self.rc, self.ring
        while ring or len(self.queue) or (rc is not None and rc.retx):
            self.bucket.refill(now)
            n = min(self.sender.batch, int(self.bucket.tokens // self.cost))
            if n <= 0:
                return self.bucket.wait_ns(self.cost)
            batch, again = [], []
            while ring and len(batch) < n:
                pkt, a = ring.popleft()
                batch.append(pkt)
                again.append(a)
            if len(batch) < n:
                waiting = len(self.queue)
                more, a = self.out.next_batch(self.queue, n - len(batch), now)
                if not more and not batch:
                    if len(self.queue) < waiting:
                        continue                 # a failed QP's packets were flushed
                    # every QP with work waits for its rate (DCQCN, TIMELY)
                    return max(rc.next_send_ns(now), 20_000) if rc is not None else None
                batch += more
                again += a
            k = self.sender.post(self.out.wire(batch, now, again), now)
            self._sent(batch[:k], again[:k], now)
            if k < len(batch):
                ring.extendleft(reversed(list(zip(batch[k:], again[k:]))))
                return ROOM_WAIT_NS            # the interface's queue is full
        return None

    def _sent(self, batch, again, now):
        rc, unsent, tx, retx = self.rc, self.unsent, self.tx_bytes, self.retx_bytes
        owner, ftx = self.tag_owner, self.flow_tx
        total = 0
        for pkt, a in zip(batch, again):
            tag, n = pkt[3], pkt[0].len
            total += n
            tx[tag] = tx.get(tag, 0) + n
            k = pkt[2] << 16 | (owner[tag] if owner else 0)
            f = ftx.get(k)
            if f is None:
                f = ftx[k] = [0, 0]
            f[0] += n
            if a:
                retx[tag] = retx.get(tag, 0) + n
                f[1] += n
            else:
                unsent[tag] -= 1
                if tag not in self.tx_first:
                    self.tx_first[tag] = now
                if not unsent[tag]:
                    self.tx_drained[tag] = now
            if rc is not None:
                rc.sent(qp_key(pkt), pkt[1], pkt, now, a)
        self.bucket.consume(total * 8)
        self.data_sent += len(batch)
        if rc is not None and batch:          # a timer starts no earlier than an RTO
            due = now + self.rto
            if self.rc_due is None or due < self.rc_due:
                self.rc_due = due

    # -- receiving -----------------------------------------------------------------------
    def drain(self, limit=256):
        """Read what the socket holds (at most ``limit`` frames); returns frames read."""
        sock, bufs, mv, rdma = self.rx, self.bufs, self.mv, self.parse.rdma
        rc, acct, chunks, my_ip = self.stack.rc, self.acct, self.chunks, self.my_ip
        buf = self.buf
        off, got, first = self.rt_offset, 0, None
        for _ in range(limit):
            try:
                n, anc, _flags, addr = sock.recvmsg_into(bufs, ANC_SIZE)
            except OSError as e:
                if nothing_more(e):
                    break
                raise
            got += 1
            if addr[2] == PACKET_OUTGOING:
                continue
            if anc and anc[0][1] == SO_TIMESTAMPNS:     # the only control message asked
                sec, nsec = TIMESPEC.unpack_from(anc[0][2])
                ts = sec * 1_000_000_000 + nsec - off
            else:
                ts = self.clock()
            if rc is not None and is_uet(buf):
                if self._drain_uet(n, ts):
                    first = ts if first is None else first
                continue
            f = rdma(mv, n)
            if f is None:
                c = parse_control(mv[:n]) if rc is not None else None
                if c is not None and c.dst_ip == my_ip:
                    self.control_received += 1
                    self.last_ack = ts
                    rc.control(c, ts)
                else:
                    self.other_frames += 1
                continue
            src, dst, ecn, dqpn, psn, ackreq, flow, tx_ns, tag, chunk, index, count, ok = f
            if dst != my_ip:
                self.other_frames += 1
                continue
            if not ok:
                self.corrupt[(tag, chunk)] = self.corrupt.get((tag, chunk), 0) + 1
                continue
            self.data_received += 1
            acct.add(flow, psn, ts, n, tx_ns)
            peer = self.peer_of_ip.get(src)
            if rc is not None and (peer is None or not rc.arrived(
                    src, self.peer_mac.get(peer), self.peer_ip[peer], dqpn, psn, ackreq, ts,
                    ecn == 3)):
                continue          # out of sequence or a duplicate: not placed
            key = (tag, chunk, peer)
            entry = chunks.get(key)
            if entry is None:
                entry = chunks[key] = [count, set()]
            entry[1].add(index)
            if len(entry[1]) == entry[0]:
                self.done.setdefault(tag, []).append((chunk, peer))
            got_bytes = self.rx_bytes[tag] = self.rx_bytes.get(tag, 0) + n
            if self.rx_line is not None:
                self.rx_line.setdefault(tag, []).append((ts, got_bytes))
            self.last_rx[tag] = ts
            if first is None:
                first = ts
        if first is not None and rc is not None:   # a coalesced ACK may be due from then
            due = self.stack.next_deadline()
            if due is not None and (self.rc_due is None or due < self.rc_due):
                self.rc_due = due
        return got

    def _drain_uet(self, n, ts):
        """A UET frame: data placed (a trimmed one NACKed), acknowledgements taken;
        True if data arrived."""
        got = self.stack.uet.receive(self.mv[:n], n, ts, self._peer_of)
        if got is None:
            self.control_received += 1
            self.last_ack = ts
            return False
        d, placed = got
        if d.dst != self.my_ip:
            self.other_frames += 1
            return False
        if not d.ok and not d.trimmed:
            self.corrupt[(d.tag, d.chunk)] = self.corrupt.get((d.tag, d.chunk), 0) + 1
            return False
        self.data_received += 1
        self.acct.add(d.flow, d.psn, ts, n, d.tx_ns)
        if placed:
            key = (d.tag, d.chunk, self.peer_of_ip.get(d.src))
            entry = self.chunks.get(key)
            if entry is None:
                entry = self.chunks[key] = [d.count, set()]
            entry[1].add(d.index)
            if len(entry[1]) == entry[0]:
                self.done.setdefault(d.tag, []).append((d.chunk, key[2]))
            got_bytes = self.rx_bytes[d.tag] = self.rx_bytes.get(d.tag, 0) + n
            if self.rx_line is not None:
                self.rx_line.setdefault(d.tag, []).append((ts, got_bytes))
            self.last_rx[d.tag] = ts
        return True

    def _peer_of(self, ip):
        """(next-hop MAC, IP text) of the peer endpoint at ``ip`` (bytes)."""
        j = self.peer_of_ip.get(ip)
        return self.peer_mac.get(j), self.peer_ip.get(j)

    def forget(self, tag):
        """Drop what was kept of a finished instance's chunks (late copies are ignored)."""
        for key in [k for k in self.chunks if k[0] == tag]:
            del self.chunks[key]
        self.done.pop(tag, None)

    # -- results -------------------------------------------------------------------------
    def flows(self, owners=("",)):
        """What this NIC sent per flow (QP) and owner: peer, QP, owner, bytes (frames
        on the wire), the resent part of them."""
        out = []
        for k, (n, resent) in sorted(self.flow_tx.items()):
            flow, own = k >> 16, k & 0xFFFF
            peer = (flow >> 8) & 0xFFF
            out.append({"peer": self.peer_name.get(peer, peer), "peer_index": peer,
                        "qp": flow & 0xFF, "owner": owners[own] if own < len(owners) else own,
                        "bytes": n, "retransmitted_bytes": resent})
        return out

    def result(self, t0, owners=("",)):
        self.drops += socket_drops(self.rx)
        flows = self.acct.summary(timeline=False)
        doc = {"name": self.name, "ip": self.ip, "rate_bps": self.rate,
               "data_frames_sent": self.data_sent, "data_frames_received": self.data_received,
               "control_frames_sent": self.control_sent,
               "control_frames_received": self.control_received,
               "control_frames_dropped": self.control_dropped,
               "other_frames": self.other_frames, "socket_drops": self.drops,
               "corrupted_frames": sum(self.corrupt.values()),
               "nic_queue_full_waits": self.sender.queue_full,
               "link_down_frames": self.sender.link_down,
               "queued_unsent": len(self.queue) + len(self.ring),
               "entropy_changes": self.out.entropy.changes,
               "rx_flows": flows["total"], "tx_flows": self.flows(owners)}
        if self.rc is not None:
            doc["transport"] = self.stack.counters()
            # (ms since the job began, peer, rate after the cut) of the first CNPs
            # (ms since the job began, peer, rate after the cut, alpha after it)
            doc["dcqcn_cuts"] = [(round((t - t0) / 1e6, 3), self.peer_name.get(p, p), r, a)
                                 for t, p, r, a in self.stack.rc.trace]
            if self.rx_line is not None:   # (ms, peer, "nak"|"timeout") of RC's go-backs
                doc["go_backs"] = [(round((t - t0) / 1e6, 3), self.peer_name.get(p, p), k)
                                   for t, p, k in self.stack.rc.events]
            if self.uet:
                doc["uet"] = uet_summary(self.rc, t0)
            doc["failed_qps"] = [{"peer": self.peer_name.get(p, p), "qp": q}
                                 for p, q in self.rc.failed()]
        return doc
