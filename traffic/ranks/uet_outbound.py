"""What a UET NIC sends: its write packets, their frames, PSNs and entropy values.

``UetOutbound`` is ``outbound.Outbound`` for ``--transport uet`` (the rank engine
and the job engine use either the same way):

- ``packets(tag, step, peer, nbytes)``: one chunk (an SES WRITE message) cut into
  ceil(nbytes/mtu) packets spread round-robin over the connection's PDCs; each
  gets its PSN from its PDC (``traffic.uet.pdcs``: the first one opens the PDC);
  the last packet of the message on each PDC asks for an ACK at once (AR);
- ``template``: the data frame of one (peer, PDC, payload, AR), built by scapy
  once at full size before the traffic starts, other sizes from it;
- ``next_batch``: resends first (NACKed, trimmed or timed-out PSNs), then new
  packets from the per-PDC send queues that the PDC's window or credit admits;
- ``wire``: each packet with the entropy value, flags and PDC ids it leaves with.
"""

import socket

from lab.modes import CC
from traffic.ranks.config import flow_id, qpn
from traffic.roce.frames import PROBE
from traffic.uet.frames import DataTemplate
from traffic.uet.layout import headers_len
from traffic.uet.pdcs import packet_key


class UetOutbound:
    """The outgoing packets of NIC ``me`` over its ``pdcs`` (``uet.pdcs.UetPdcs``)."""

    def __init__(self, me, ip, mac, peer_ip, peer_mac, mtu, qps, pdcs, dscp=26, qpn_seed=None,
                 class_dscp=None, tag_class=None):
        self.me, self.ip, self.mac = me, ip, mac
        self.peer_ip, self.peer_mac = peer_ip, peer_mac
        self.mtu, self.qps, self.dscp, self.seed = mtu, qps, dscp, qpn_seed
        # traffic classes, as ``Outbound``'s: class c's packets go on PDCs c*qps ..
        # (c+1)*qps-1 with DSCP class_dscp[c]; tag_class: tag -> class
        self.class_dscp = list(class_dscp or [dscp])
        self.tag_class = tag_class
        self.pdcs = pdcs
        self.rod = pdcs.p.pds.rod                 # ROD requests
        self.cc_state = pdcs.p.cc == CC.RCCC      # requests carry the credit target
        self.templates = {}           # (peer, pdc, payload, ar) -> DataTemplate
        self.entropy = _Changes()     # what the engines report as entropy changes
        self.rc = pdcs                # the engines ask their outbound's transport

    def template(self, peer, pdc, payload, ar):
        key = (peer, pdc, payload, ar)
        t = self.templates.get(key)
        if t is None:
            t = self.templates[key] = DataTemplate(
                self.mac, self.peer_mac[peer], self.ip, self.peer_ip[peer], payload,
                self.class_dscp[pdc // self.qps], 2, ar, self.rod, self.cc_state, self.mtu)
            self.pdcs.add_qp((peer, pdc), qpn(self.me, peer, pdc, self.seed))
        return t

    def prepare(self, peer):
        """Build the full-size frames to ``peer`` (on every class's PDCs) and its control
        frames now."""
        for q in range(self.qps * len(self.class_dscp)):
            for ar in (False, True):
                self.template(peer, q, self.mtu, ar)
        self.pdcs.prepare(socket.inet_aton(self.peer_ip[peer]), self.peer_mac[peer],
                          self.peer_ip[peer])

    def packets(self, tag, step, peer, nbytes, now=0):
        """The packet tuples of one chunk of ``nbytes`` to ``peer``, over the PDCs."""
        mtu, qps = self.mtu, self.qps
        count = max(1, -(-nbytes // mtu))
        base = self.tag_class[tag] * qps if self.tag_class else 0
        last = {}
        for i in range(count):
            last[base + i % qps] = i
        out = []
        for i in range(count):
            q = base + i % qps
            payload = max(min(mtu, nbytes - i * mtu), PROBE.size)
            t = self.template(peer, q, payload, last[q] == i)
            psn = self.pdcs.assign_psn((peer, q), t.len, now)
            out.append((t, psn, flow_id(self.me, peer, q), tag, step, i, count))
        return out

    def wire(self, batch, now, again=None):
        """The packets as they leave: entropy value, flags, PDC ids."""
        again = again or [False] * len(batch)
        self.entropy.changes += len(batch)
        return [self.pdcs.wire(p, now, a) for p, a in zip(batch, again)]

    def next_batch(self, queue, limit, now):
        """(packets to send now, resent?): resends first, then new packets from the
        per-PDC send queues that the PDC's window or credit admits."""
        pdcs = self.pdcs
        batch, again = [], []
        if pdcs.retx:
            for _key, _psn, pkt in pdcs.resends(limit, now):
                batch.append(pkt)
                again.append(True)

        def admit(key, pkt):
            return pdcs.admit(key, pkt[0].len, now)
        new = queue.take(limit - len(batch), admit, pdcs.usable)
        return batch + new, again + [False] * len(new)


class _Changes:
    __slots__ = ("changes",)

    def __init__(self):
        self.changes = 0


def frame_len(mtu, cc_state=False):
    """A full UET data frame's bytes at ``mtu``."""
    return headers_len(cc_state) + mtu


__all__ = ["UetOutbound", "frame_len", "packet_key"]
