"""What a NIC sends: its RDMA WRITE packets, their frames, PSNs and path entropy.

Shared by a collective rank (``traffic.ranks.rank``: one NIC per process) and the
job engine (``traffic.jobs.job``: every NIC in one process).  ``Outbound`` stands
for one NIC, numbered ``me``, and its connections to peers numbered the same
way (ranks, or a job's endpoints):

- ``packets(tag, step, peer, nbytes)``: one chunk cut into ceil(nbytes/mtu)
  packets spread round-robin over the connection's QPs, as RDMA WRITE
  FIRST/MIDDLE/LAST/ONLY per QP, each the tuple ``(template, psn, flow, tag,
  step, index, count)`` that ``Sender`` puts on the wire;
- ``template``: the frame of one (peer, QP, opcode, payload), built by scapy
  once at full size (the callers build those before the traffic starts) and
  derived from it without scapy for a message's shorter last packet;
- ``next_batch``: resends first (go-back-N keeps PSN order), then new packets
  from the per-QP send queues (``sendq``) that the QPs' rates allow;
- ``wire``: the batch with the entropy policy's UDP source ports.

QP numbers and flow ids are ``rank_config.qpn`` and ``flow_id`` of (me,
peer, qp): the receiving side names the same QPs the same way.
"""

from lab.modes import Entropy
from traffic.nic.entropy import EntropyPolicy
from traffic.nic.entropy import sport as entropy_sport
from traffic.ranks.config import flow_id, qpn
from traffic.roce.frames import HEADERS_LEN, PROBE, PSN_MASK, RETH_LEN, FrameTemplate, opcode_for

OPCODES = ("WRITE_ONLY", "WRITE_FIRST", "WRITE_MIDDLE", "WRITE_LAST")


class Outbound:
    """The outgoing packets of NIC ``me``; ``peer_ip``/``peer_mac`` map a peer
    number to its IP and next-hop MAC (the MACs may be filled in later)."""

    def __init__(self, me, ip, mac, peer_ip, peer_mac, mtu, qps, dscp=26, qpn_seed=None,
                 entropy=Entropy.QP, flowlet_gap_ns=1_000_000, rc=None, class_dscp=None,
                 tag_class=None):
        self.me, self.ip, self.mac = me, ip, mac
        self.peer_ip, self.peer_mac = peer_ip, peer_mac
        self.mtu, self.qps, self.dscp, self.seed = mtu, qps, dscp, qpn_seed
        # traffic classes: class c's packets go on QPs c*qps .. (c+1)*qps-1 with DSCP
        # class_dscp[c] (a real NIC gives every class QPs of its own: one QP's packets
        # in two switch queues would come out of order); tag_class: tag -> class
        self.class_dscp = list(class_dscp or [dscp])
        self.tag_class = tag_class
        self.rc = rc                  # RankQPs: every QP a template is built for is its
        self.entropy = EntropyPolicy(entropy, flowlet_gap_ns)
        self.templates = {}           # (peer, qp, opcode, payload) -> FrameTemplate
        self.variants = {}            # (template id, entropy index) -> template
        self.psn = {}                 # (peer, qp) -> next PSN

    def template(self, peer, qp, opcode, payload):
        key = (peer, qp, opcode, payload)
        t = self.templates.get(key)
        if t is None:
            extra = RETH_LEN if opcode in ("WRITE_FIRST", "WRITE_ONLY") else 0
            full = self.templates.get((peer, qp, opcode, self.mtu))
            if full is not None:      # a shorter last packet: no scapy in the loop
                t = self.templates[key] = full.resized(HEADERS_LEN + extra + payload)
                return t
            q = qpn(self.me, peer, qp, self.seed)
            # the last packet of a message asks for an ACK (an RDMA WRITE completes there)
            t = self.templates[key] = FrameTemplate(
                self.mac, self.peer_mac[peer], self.ip, self.peer_ip[peer], dst_qpn=q,
                src_qpn=q, opcode=opcode, frame_len=HEADERS_LEN + extra + payload,
                dscp=self.class_dscp[qp // self.qps], ecn=2, ackreq=opcode in ("WRITE_LAST", "WRITE_ONLY"))  # ECT(0)
            if self.rc:
                self.rc.add_qp((peer, qp), q)
        return t

    def prepare(self, peer):
        """Build the full-size frames of every QP (of every class) to ``peer`` now
        (scapy: ~1 ms each)."""
        for q in range(self.qps * len(self.class_dscp)):
            for op in OPCODES:
                self.template(peer, q, op, self.mtu)

    def packets(self, tag, step, peer, nbytes, now=0):
        """The packet tuples of one chunk of ``nbytes`` to ``peer``, spread over the QPs
        (``now``: as UET's, whose PDCs open when a packet is assigned; RC's QPs are open)."""
        mtu, qps = self.mtu, self.qps
        count = max(1, -(-nbytes // mtu))
        out = []
        per_qp = [len(range(q, count, qps)) for q in range(qps)]
        psns = self.psn
        base = self.tag_class[tag] * qps if self.tag_class else 0
        for i in range(count):
            q = base + i % qps
            payload = max(min(mtu, nbytes - i * mtu), PROBE.size)
            op = opcode_for("WRITE", i // qps, per_qp[q - base])
            key = (peer, q)
            psn = psns.get(key, 0)
            psns[key] = (psn + 1) & PSN_MASK
            out.append((self.template(peer, q, op, payload), psn,
                        flow_id(self.me, peer, q), tag, step, i, count))
        return out

    def with_entropy(self, packet, now):
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

    def wire(self, batch, now, again=None):
        """The packets as they leave: with their entropy's source ports (``again``:
        which are resent; RoCE's frames do not say)."""
        if not self.entropy.active:
            return batch
        return [self.with_entropy(p, now) for p in batch]

    def next_batch(self, queue, limit, now):
        """(packets to send now, resent?): resends first, then new packets from the
        per-QP send queues (``sendq``: a QP its rate holds back waits alone)."""
        rc = self.rc
        batch, again = [], []
        if rc and rc.retx:
            for _key, _psn, pkt in rc.resends(limit, now):
                batch.append(pkt)
                again.append(True)
        if rc:
            def admit(key, pkt):
                if not rc.may_send(key, now):
                    return False
                rc.charge(key, pkt[0].len, now)
                return True
            new = queue.take(limit - len(batch), admit, rc.usable)
        else:
            new = queue.take(limit - len(batch))
        return batch + new, again + [False] * len(new)


def qp_key(packet):
    """(peer, qp) of one of a NIC's packets, from its flow id (``flow_id``)."""
    return (packet[2] >> 8) & 0xFFF, packet[2] & 0xFF
