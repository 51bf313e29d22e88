"""A NIC's transports: the one it sends with, and both it receives with.

A NIC sends over one transport (``transport`` of its config: RoCE RC or UET)
and answers both, as a NIC that speaks RoCEv2 and UET takes each frame by its UDP
port (4791, 4793): so RC and UET senders may share a receiver (``compare --cc
dcqcn+nscc``).  ``Stack`` holds the sending one (``send``, the
``RankQPs`` or ``UetPdcs`` the engines drive) and the other for receiving, with
default settings; ``poll``, ``next_deadline`` and ``counters`` cover both.
"""

from lab.modes import Transport
from traffic.ranks.config import cc_params, out_of_order, uet_config
from traffic.roce.qps import RankQPs
from traffic.uet.pdcs import UetPdcs

UET_PORT_BYTES = (4793).to_bytes(2, "big")


class Stack:
    """The transports of one NIC (``cfg``: a rank config, or a job's NIC keys with
    ``rate_bps``); ``send_frame`` puts a control frame on the wire; ``trace_limit``:
    RC's DCQCN cuts and go-backs traced (``RankQPs``)."""

    def __init__(self, cfg, send_frame, mac, ip, peer_ip, peer_mac, rate_slack_ns=0, seed=None,
                 trace_limit=500):
        self.send = self.rc = self.uet = None
        if not Transport(cfg["transport"]).reliable:
            return
        sends_uet = cfg["transport"] == Transport.UET
        self.rc = RankQPs(cfg["rc_params"], send_frame, mac, ip, cfg["dscp"],
                          ooo=out_of_order(cfg), rate_slack_ns=rate_slack_ns,
                          trace_limit=trace_limit, **({} if sends_uet else cc_params(cfg)))
        self.uet = UetPdcs(uet_config(cfg), send_frame, mac, ip, cfg["dscp"], seed=seed,
                           peer_ip=peer_ip, peer_mac=peer_mac)
        self.send = self.uet if sends_uet else self.rc

    def __bool__(self):
        return self.send is not None

    def poll(self, now):
        """Run both transports' timers; the next deadline of either (ns) or None."""
        due = [d for d in (self.rc.poll(now), self.uet.poll(now)) if d is not None]
        return min(due, default=None)

    def next_deadline(self):
        due = [d for d in (self.rc.next_deadline(), self.uet.next_deadline())
               if d is not None]
        return min(due, default=None)

    def counters(self):
        """The sending transport's counters, with what the other received added."""
        out = dict(self.send.counters())
        other = self.uet if self.send is self.rc else self.rc
        for k, v in other.counters().items():
            if isinstance(v, int) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
        return out


def is_uet(frame):
    """A frame to UDP port 4793 (IPv4 without options)."""
    return frame[36:38] == UET_PORT_BYTES


def uet_summary(pdcs, t0, points=400):
    """What a run reports of a NIC's UET PDCs besides the counters: every NSCC window's
    trace ((ms since ``t0``, bytes), at most ``points`` a PDC), the EVs its
    policies retired and when the last one was."""
    windows = {}
    for (peer, q), trace in pdcs.windows().items():
        step = max(1, len(trace) // points)
        windows[f"{peer}:{q}"] = [(round((t - t0) / 1e6, 3), w) for t, w in trace[::step]]
    c = pdcs.counters()
    last = pdcs.last_retired_ns()
    return {"windows": windows, "evs_retired": c["evs_retired"],
            "last_retired_ms": None if last is None else round((last - t0) / 1e6, 3),
            "ev_freezes": c["ev_freezes"], "ev_set": pdcs.p.ev_set,
            "ev_policy": str(pdcs.p.ev_policy), "cc": str(pdcs.p.cc),
            "network_rtt_ms": pdcs.p.nscc.network_rtt_ns / 1e6 if pdcs.p.nscc else None}
