"""A rail-only host's HB domain (NVLink, NVSwitch): one shaped veth pair inside the host.

Model.  On a rail-only fabric (preset ``rail-only``: rails that share no
switch) a GPU reaches a GPU of another rail by moving its data to the GPU
of that rail in its own host over the high-bandwidth domain, whose NIC then
sends it on its rail (NCCL's PXN).  That move is a link here: ``hb0`` and
``hb1``, a veth pair inside each host's namespace, addressed from the
host's position k in the fabric (from 0): the k-th /30 of 169.254.0.0/16
(``.1`` and ``.2``) and MACs ``02:48:42:<k>:01|02`` (unique in a job), both ends shaped with the
fabric's TBF at ``planes x hb_rate`` (the NVSwitch carries every GPU's
NVLink at once; a uniform pattern loads all of them alike) and the session's
queue.  Frames written to ``hb0`` arrive on ``hb1`` and the other way round;
the job engine puts PXN's staging through it (experiments.compare.rails)
and its counters say how many bytes crossed.

Names need no run tag: they live and die with the host's namespace.
"""

from emulator.dataplane.links import shaping
from emulator.dataplane.system.netlink import Netlink, netns_of

ENDS = ("hb0", "hb1")
PREFIX_LEN = 30
HB_FACTOR = 8


def rate_of(topo, host):
    """The host's HB link rate (bit/s), or None: no HB link (a host with one NIC, or a
    fabric whose rails meet in switches)."""
    if not host.get("routes"):          # its NICs are not in islands of their own
        return None
    per_gpu = dict(topo.get("params") or {}).get("hb_rate") or \
        HB_FACTOR * min(p["rate_bps"] for p in host["ports"])
    return len(host["ports"]) * per_gpu


def addresses(k):
    """((ip, mac) of hb0, (ip, mac) of hb1) of the k-th host (from 0)."""
    if not 0 <= k < 1 << 14:
        raise ValueError(f"host number {k} has no HB /30 in 169.254.0.0/16")
    base = 4 * k
    return tuple((f"169.254.{base >> 8}.{(base & 255) + end + 1}",
                  "02:48:42:%02x:%02x:%02x" % (k >> 8, k & 255, end + 1)) for end in (0, 1))


def add(ipr, topo, host, queue_ms, frame, shape=True):
    """Create ``host``'s pair in the namespace of ``ipr`` (inside the host), address and
    shape it; nothing where the host has no HB link (``rate_of``)."""
    rate_bps = rate_of(topo, host)
    if rate_bps is None:
        return
    ipr.link("add", ifname=ENDS[0], kind="veth", peer=ENDS[1])
    for name, (ip, mac) in zip(ENDS, addresses(topo["hosts"].index(host))):
        idx = ipr.link_lookup(ifname=name)[0]
        ipr.link("set", index=idx, address=mac, mtu=frame - 14)
        ipr.addr("add", index=idx, address=ip, prefixlen=PREFIX_LEN)
        ipr.link("set", index=idx, state="up")
        if shape:
            shaping.apply(ipr, idx, int(rate_bps), queue_ms, frame)


def sent_bytes(pid):
    """Bytes ``hb0`` sent (the HB hop's forward direction) in the namespace of ``pid``."""
    with Netlink(netns_of(pid)) as ipr:
        link = ipr.get_links(ipr.link_lookup(ifname=ENDS[0])[0])[0]
        return link.get_attr("IFLA_STATS64")["tx_bytes"]


def endpoints(netns, k, name, rate_bps):
    """The job engine's two endpoints of the k-th host's HB link (``traffic.jobs.config``)."""
    return [{"netns": netns, "intf": ENDS[i], "ip": ip, "mac": mac, "next_hop_mac": mac,
             "name": f"{name}:{ENDS[i]}", "rate_bps": rate_bps}
            for i, (ip, mac) in enumerate(addresses(k))]
