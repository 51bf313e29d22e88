"""What ``--transport uet`` implies from the fabric: its RTT, ECN marking and trimming.

NSCC and the PDCs' timers scale to the emulated network's own round trip
(``traffic.uet.cc``): here, ``hops`` full UET frames at the hosts' rate (host ->
leaf -> spine -> leaf -> host: 2 x the deepest switch tier) plus 2 ms for the
traffic engines' own passes.  From it, as htsim's ``main_uec`` sets its fabric:

- ECN marking (when ``--ecn`` is left out) from 0.2 to 0.8 BDP, probability 1
  at 0.8 (``KMIN:KMAX:1``);
- the trimming threshold (``--trim-at``, when ``--trim`` is on and it is left
  out): one BDP queued at a port (htsim's queue with trimming is 1 BDP);
- the retransmission timer's floor: the RTT plus six drains of the deepest
  queue a packet meets (htsim's minimum RTO): the trimming threshold's with
  ``--trim``, else a link's whole queue (``--queue-ms``);
- the rank config keys of the UET transport (``rank_keys``).
"""

from emulator.dataplane.lossless.ecn import Ecn
from emulator.fabric import addressing
from lab.modes import EcnAt
from traffic.uet.layout import TRIM_BYTES, frame_len_for_mtu

ENGINE_MS = 2.0        # what the traffic engines add to a round trip (a pass, an ACK)


def hosts_rate(fabric):
    topo = addressing.plan(fabric)
    return min(p["rate_bps"] for h in topo["hosts"] for p in h["ports"])


def network_rtt_ms(fabric, mtu):
    """The emulated network's unloaded RTT of a full UET frame (ms)."""
    topo = addressing.plan(fabric)
    tier = max((sw.get("tier", 1) for sw in topo["switches"]), default=1)
    hops = 2 * max(1, tier)
    return hops * frame_len_for_mtu(mtu) * 8 / hosts_rate(fabric) * 1e3 + ENGINE_MS


def bdp_bytes(fabric, mtu):
    return int(hosts_rate(fabric) / 8 * network_rtt_ms(fabric, mtu) / 1e3)


def default_ecn(fabric, mtu, at=EcnAt.DEQUEUE):
    """NSCC's marking: 0.2 to 0.8 BDP, at least one frame apart."""
    bdp, frame = bdp_bytes(fabric, mtu), frame_len_for_mtu(mtu)
    kmin = max(frame // 2, int(0.2 * bdp))
    return Ecn(kmin, max(kmin + frame, int(0.8 * bdp)), 1.0, at=at)


def default_trim_at(fabric, mtu):
    """Bytes queued at a port past which a UET data frame is trimmed: one BDP."""
    return max(2 * frame_len_for_mtu(mtu), bdp_bytes(fabric, mtu))


RTO_DRAINS = 6         # htsim's minimum RTO: six queue drains past the RTT


def rto_min_ms(spec):
    """The PDCs' retransmission timer floor (ms): the RTT and ``RTO_DRAINS`` drains of
    the trimming threshold (``--trim``) or of a link's queue."""
    rtt = network_rtt_ms(spec.fabric, spec.mtu)
    if spec.trim is not None:
        at = spec.trim_at or default_trim_at(spec.fabric, spec.mtu)
        drain = at * 8 / hosts_rate(spec.fabric) * 1e3
    else:
        drain = spec.queue_ms
    return rtt + RTO_DRAINS * drain


def rank_keys(spec):
    """The rank (and job NIC) config keys of ``spec``'s UET transport."""
    return {"pds": str(spec.pds), "ev_policy": str(spec.ev_policy), "ev_set": spec.ev_set,
            "trim": spec.trim is not None,
            "uet_rtt_ms": round(network_rtt_ms(spec.fabric, spec.mtu), 3),
            "uet_rto_min_ms": round(rto_min_ms(spec), 3)}


MIN_TRIM = TRIM_BYTES
