"""The configuration of one collective rank (``python -m traffic rank --config``).

``load_config`` validates a config document and fills in the defaults;
``flow_id`` and ``qpn`` name a rank's QPs the same way on both ends.
"""

import json
import zlib

from lab.modes import CC, Delivery, Entropy, EvPolicy, Transport
from traffic.nic.entropy import MODES as ENTROPY_MODES
from traffic.ranks.collectives import COLLECTIVES, ring_order
from traffic.roce.dcqcn import DcqcnParams
from traffic.roce.frames import PROBE, PSN_MASK
from traffic.roce.timely import TimelyParams
from traffic.roce.transport import RcParams
from traffic.uet.cc import NsccParams
from traffic.uet.layout import frame_len_for_mtu as uet_frame_len
from traffic.uet.pdcs import UetConfig
from traffic.uet.pds import ACK_BYTES, PdsParams

TRANSPORTS = Transport.names()
CC_MODES = CC.names()


def out_of_order(cfg):
    """Do the responders place packets out of order?  As asked, else when the
    entropy is not one path per QP."""
    return cfg["entropy"] != Entropy.QP if cfg.get("ooo") is None else bool(cfg["ooo"])

DEFAULTS = {"collective": "allreduce", "sizes": [1 << 20], "rate_bps": 40e6,
            "qps": 1, "mtu": 1024, "dscp": 26, "ring": "naive", "burst": 8,
            "start_time": None, "step_timeout_s": None, "barrier_timeout_s": 30.0,
            "output": None, "gap_threshold_ms": 10.0, "warmup": 0,
            # NIC path entropy (traffic.nic.entropy): qp | spray | flowlet, and the
            # idle gap that starts a new flowlet
            "entropy": Entropy.QP, "flowlet_gap_ms": 1.0,
            # responders place out of order (None: when the entropy is not per QP;
            # true under switches that choose per packet)
            "ooo": None,
            # RC transport (traffic.roce.transport): NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT
            "transport": Transport.RC, "timeout_exp": RcParams.timeout_exp,
            "retry_cnt": RcParams.retry_cnt,
            # congestion control at the sending NIC: dcqcn, timely (transport rc); nscc,
            # rccc (transport uet: traffic.uet)
            "cc": CC.NONE, "cc_params": {},
            # Ultra Ethernet (transport uet): the PDC's delivery, its EV policy and set,
            # the network's RTT its timers and NSCC scale to (null: 4 frame times of the
            # rate plus 2 ms), the retransmission timer's floor (null: 4 RTTs) and
            # ceiling (null: RC's timeout, or the floor if above it), whether the
            # switches trim, how long an idle PDC stays open
            "pds": Delivery.RUD, "ev_policy": EvPolicy.REPS, "ev_set": 256,
            "uet_rtt_ms": None, "uet_rto_min_ms": None, "uet_rto_max_ms": None, "trim": False,
            "close_idle_ms": 2000.0,
            # the job's QP numbers (``qpn``): None numbers them by rank, an int draws
            # them as a NIC gives every job new ones (hence new UDP source ports)
            "qpn_seed": None}
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
    if cfg["qpn_seed"] is not None and (not isinstance(cfg["qpn_seed"], int)
                                        or cfg["qpn_seed"] < 0):
        raise ConfigError("qpn_seed: null or an integer >= 0")
    if cfg["ooo"] not in (None, True, False):
        raise ConfigError("ooo: true, false or null")
    if cfg["entropy"] not in ENTROPY_MODES or not cfg["flowlet_gap_ms"] > 0:
        raise ConfigError(f"entropy: one of {ENTROPY_MODES}; flowlet_gap_ms > 0")
    if cfg["transport"] not in TRANSPORTS:
        raise ConfigError(f"transport: one of {TRANSPORTS}")
    if cfg["cc"] not in CC_MODES or (CC(cfg["cc"]).transport not in (None, cfg["transport"])):
        raise ConfigError(f"cc: one of {CC_MODES}; dcqcn and timely need transport rc "
                          "(CNPs and ACKs are the RC transport's frames), nscc and rccc "
                          "transport uet")
    if cfg["pds"] not in Delivery.names() or cfg["ev_policy"] not in EvPolicy.names() \
            or not isinstance(cfg["ev_set"], int) or not 1 <= cfg["ev_set"] <= 16384:
        raise ConfigError(f"pds: one of {Delivery.names()}; ev_policy: one of "
                          f"{EvPolicy.names()}; ev_set: 1..16384")
    timers = ("uet_rtt_ms", "uet_rto_min_ms", "uet_rto_max_ms")
    if any(cfg[k] is not None and not cfg[k] > 0 for k in timers) \
            or not cfg["close_idle_ms"] > 0:
        raise ConfigError("uet_rtt_ms, uet_rto_min_ms, uet_rto_max_ms: null or > 0; "
                          "close_idle_ms > 0")
    if None not in (cfg["uet_rto_min_ms"], cfg["uet_rto_max_ms"]) \
            and cfg["uet_rto_max_ms"] < cfg["uet_rto_min_ms"]:
        raise ConfigError("uet_rto_max_ms: at least uet_rto_min_ms")
    try:
        cc_params(cfg)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"cc_params: {e}")
    try:
        # TIMELY needs RTT samples: an ACK per packet (a delayed one would add its delay)
        cfg["rc_params"] = RcParams(timeout_exp=cfg["timeout_exp"], retry_cnt=cfg["retry_cnt"],
                                    **({"ack_every": 1} if cfg["cc"] == CC.TIMELY else {}))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"timeout_exp/retry_cnt: {e}")
    if cfg["transport"] == Transport.UET:
        try:
            uet_config(cfg)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"cc_params (nscc): {e}")
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


def qpn(src, dst, qp, seed=None):
    """A QP number unique per (src, dst, qp): distinct UDP sports per QP.

    With a ``seed`` (the job's ``qpn_seed``) the numbers are shuffled by a
    bijection of the 24-bit QPN space drawn from the seed: still unique, but
    another job gets other numbers, hence other UDP source ports and other
    ECMP paths, as with a real NIC's QP allocation.
    """
    base = ((src + 1) << 14 | dst << 4 | qp) & PSN_MASK
    return base if seed is None else shuffle24(base, seed)


def shuffle24(x, seed):
    """A seeded bijection of 0..2^24-1: xor, odd multiply, xorshift, odd multiply, xor."""
    k = [zlib.crc32(f"{seed}:{i}".encode()) & PSN_MASK for i in range(4)]
    x = ((x ^ k[0]) * (k[1] | 1)) & PSN_MASK
    x ^= x >> 12
    x = (x * (k[2] | 1)) & PSN_MASK
    return x ^ k[3]


def network_rtt_ns(cfg):
    """The RTT a UET PDC's timers and NSCC scale to: the config's, else four full
    frames at the rate (host -> leaf -> spine -> leaf -> host) and 2 ms of the
    engines' own (an ACK waits for the receiver's next pass)."""
    if cfg.get("uet_rtt_ms"):
        return int(cfg["uet_rtt_ms"] * 1e6)
    return int(4 * uet_frame_len(cfg["mtu"]) * 8e9 / cfg["rate_bps"] + 2e6)


def uet_config(cfg):
    """The ``uet.pdcs.UetConfig`` of a rank (or job NIC) config."""
    rtt = network_rtt_ns(cfg)
    cc = CC(cfg["cc"]) if CC(cfg["cc"]).transport == Transport.UET else \
        CC.NSCC if cfg["transport"] != Transport.UET else CC.NONE
    floor = int(cfg["uet_rto_min_ms"] * 1e6) if cfg.get("uet_rto_min_ms") else 4 * rtt
    rto = int(cfg["uet_rto_max_ms"] * 1e6) if cfg.get("uet_rto_max_ms") else \
        RcParams(timeout_exp=cfg["timeout_exp"]).timeout_ns
    # ACK coalescing as htsim's receiver (UecSink::_bytes_unacked_threshold): once
    # 16 KB arrived unacknowledged, four 4 KB packets; one MTU at least.  NSCC's
    # window bound leaves room for it (``NsccParams.held_bytes``)
    ack = max(cfg["mtu"], ACK_BYTES)
    pds = PdsParams(rto_ns=max(rto, floor), rto_min_ns=floor, retry_cnt=cfg["retry_cnt"],
                    ack_bytes=ack, ack_delay_ns=rtt, rod=cfg["pds"] == Delivery.ROD)
    nscc = NsccParams(cfg["rate_bps"], cfg["mtu"], rtt, trimming=bool(cfg["trim"]),
                      **dict({"held_bytes": ack},
                             **(cfg["cc_params"] if cc == CC.NSCC else {})))
    return UetConfig(line_bps=cfg["rate_bps"], mtu=cfg["mtu"],
                     frame_len=uet_frame_len(cfg["mtu"], cc == CC.RCCC), pds=pds,
                     ev_policy=EvPolicy(cfg["ev_policy"]), ev_set=cfg["ev_set"], cc=cc,
                     nscc=nscc, initial_credit=int(nscc.bdp),
                     freeze_ns=500 * rtt, hold_ns=2500 * rtt,
                     close_idle_ns=int(cfg["close_idle_ms"] * 1e6))


def cc_params(cfg):
    """``RankQPs`` keyword for the config's congestion control ({} for none, and for
    UET's: ``uet_config`` holds them)."""
    if cfg["cc"] == CC.DCQCN:
        return {"dcqcn": DcqcnParams(cfg["rate_bps"], **cfg["cc_params"])}
    if cfg["cc"] == CC.TIMELY:
        return {"timely": TimelyParams(cfg["rate_bps"], **cfg["cc_params"])}
    return {}
