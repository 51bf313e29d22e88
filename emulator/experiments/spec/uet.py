"""What ``--transport uet`` implies from the fabric: its RTT, ECN marking and trimming.

NSCC and the PDCs' timers scale to the emulated network's own round trip
(``traffic.uet.cc``): here, ``hops`` full UET frames at the hosts' rate (host ->
leaf -> spine -> leaf -> host: 2 x the deepest switch tier) plus 2 ms for the
traffic engines' own passes.  From it, as htsim's ``main_uec`` sets its fabric:

- ECN marking (when ``--ecn`` is left out) from 0.2 to 0.8 BDP, probability 1
  at 0.8 (``KMIN:KMAX:1``);
- the trimming threshold (``--trim-at``, when ``--trim`` is on and it is left
  out): one BDP queued at a port (htsim's queue with trimming is 1 BDP);
- the retransmission timer's bounds, as htsim sets its minimum RTO (the RTT plus
  six drains of a queue): its floor from the queue NSCC keeps (the trimming
  threshold with ``--trim``, else the ECN marking's ceiling, else a link's
  queue), its ceiling from the deepest one a packet can wait in (a link's whole
  queue, ``--queue-ms``); between them the timer follows the measured round
  trips (``srtt + 4 rttvar``, ``traffic.uet.pds``);
- the rank config keys of the UET transport (``rank_keys``).
"""

from emulator.dataplane.lossless import ecn as ecn_marking
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


def kept_queue_bytes(spec):
    """The queue NSCC keeps a port at (bytes), or None when nothing bounds it below a
    link's whole queue: the trimming threshold (a frame past it is cut), else the
    ECN marking's ceiling (every frame past it is marked, and the window shrinks)."""
    if spec.trim is not None:
        return spec.trim_at or default_trim_at(spec.fabric, spec.mtu)
    marking = ecn_marking.parse(spec.ecn, at=spec.ecn_at) if spec.ecn else None
    return None if marking is None else marking.kmax


def rto_bounds_ms(spec):
    """The PDCs' retransmission timer (floor, ceiling) in ms: the RTT and
    ``RTO_DRAINS`` drains of the queue NSCC keeps, and of a link's whole queue.  A
    floor from the whole queue kept a lost packet waiting 12 s on compare's 2000 ms
    queues (2026-11-28-uet.md's cut) where its EV could have been retired in tens
    of milliseconds."""
    rtt = network_rtt_ms(spec.fabric, spec.mtu)
    whole = rtt + RTO_DRAINS * spec.queue_ms
    kept = kept_queue_bytes(spec)
    if kept is None:
        return whole, whole
    drain = kept * 8 / hosts_rate(spec.fabric) * 1e3
    return min(whole, rtt + RTO_DRAINS * drain), whole


def rank_keys(spec):
    """The rank (and job NIC) config keys of ``spec``'s UET transport."""
    rto_min, rto_max = rto_bounds_ms(spec)
    return {"pds": str(spec.pds), "ev_policy": str(spec.ev_policy), "ev_set": spec.ev_set,
            "trim": spec.trim is not None,
            "uet_rtt_ms": round(network_rtt_ms(spec.fabric, spec.mtu), 3),
            "uet_rto_min_ms": round(rto_min, 3), "uet_rto_max_ms": round(rto_max, 3)}


MIN_TRIM = TRIM_BYTES
