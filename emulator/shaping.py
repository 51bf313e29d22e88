"""Link rates enforced with a TBF qdisc on the egress of both ends of a link.

TBF, not HTB: one qdisc per interface, its own byte-limited FIFO, and a
backlog that ``tc -s`` / netlink stats report per link (the egress queue of
an emulated switch port).  The queue is sized in time at the link rate
(``queue_ms``), as switch buffers are: a 40 Mbit/s link with 30 ms holds
150 kB.  netem is not used (this kernel lacks it).
"""

MTU_FRAME = 1514
# 30 ms is 100 full frames at 40 Mbit/s: a shallow switch buffer in packets, and
# enough to absorb the scheduling stalls of a userspace datapath on 2 shared cores.
DEFAULT_QUEUE_MS = 30.0


def tbf_params(rate_bps, queue_ms=DEFAULT_QUEUE_MS):
    """Arguments for pyroute2's ``tc('add', 'tbf', ...)`` (rate in bytes/s)."""
    rate = rate_bps // 8
    # Bucket: ~1 ms at rate, at least two full frames so a frame always fits.
    burst = max(2 * MTU_FRAME, rate // 1000)
    limit = max(3 * MTU_FRAME, int(rate * queue_ms / 1000.0)) + burst
    return {"rate": rate, "burst": burst, "limit": limit}


def apply(ipr, index, rate_bps, queue_ms=DEFAULT_QUEUE_MS):
    """Install the shaper on interface ``index`` of the namespace of ``ipr``."""
    ipr.tc("add", "tbf", index=index, handle=0x10000, **tbf_params(rate_bps, queue_ms))


def stats(ipr, index):
    """(backlog_bytes, drops, sent_bytes) of the shaper on ``index``."""
    for msg in ipr.get_qdiscs(index=index):
        if msg.get_attr("TCA_KIND") == "tbf":
            basic = msg.get_attr("TCA_STATS2")
            queue = basic.get_attr("TCA_STATS_QUEUE") if basic else None
            sent = basic.get_attr("TCA_STATS_BASIC") if basic else None
            return ((queue or {}).get("backlog", 0), (queue or {}).get("drops", 0),
                    (sent or {}).get("bytes", 0))
    return (0, 0, 0)
