"""Packet trimming at the switches' egress: a UET data frame that would not be admitted
is cut to its headers and sent ahead of data, so its receiver can ask for it at once.

Model.  A switch port of a lossy link trims instead of dropping (UE
Specification 1.0.1's packet trimming, as SONiC's HLD implements it on
hardware: a threshold, a trimmed size, a DSCP, a queue):

- *admission*: eBPF cannot read a qdisc's backlog, so the port's queue is the
  dequeue ECN marker's exact count (``ecnq``: bytes in at the tc egress hook,
  bytes out at the far end's XDP), kept in its map.  A UET data frame (UDP 4793,
  a PDS RUD/ROD request) arriving while the count plus itself exceeds ``at``
  bytes is not admitted whole;
- *trim*: ``bpf_skb_change_tail`` cuts it to ``size`` bytes (default 134: the
  headers and the probe header its receiver reads), the IPv4 total length and
  header checksum and the UDP length are fixed (UET's UDP checksum is 0), its
  DSCP becomes ``TRIM_DSCP`` (the ECN bits stay), and it is counted per port;
- *its length on the link*: the kernel takes a frame's length for its qdiscs
  before the tc egress hook runs, so a frame trimmed there would still cost the
  shaper its whole length; the port's TBF gets a size table (``STAB``: no
  overhead, no table) that makes the kernel take the length again at enqueue,
  after the trim, and a trimmed frame costs the link its 134 bytes;
- *priority*: the port's shaper gets two classes under its TBF (which keeps the
  link rate): a strict-priority HTB class 10:10 for trimmed frames and frames
  of at most 256 bytes (acknowledgements), and 10:20 for the rest, a byte FIFO
  of the link's ``--queue-ms``.  The tc program sets each frame's class
  (``skb->priority``).  Host NICs keep one FIFO (their queue is the sender's own).

Trimming is for lossy links: a lossless class (PFC) pauses before its queue
fills, so ``--trim`` is refused on a lossless fabric.  The C is ``bpf/trim.h``,
a step of ``ecnq.bpf.c``'s egress program; ``CONFIG`` is its part of that
program's constants.
"""

import struct
from dataclasses import dataclass

from emulator.dataplane.links import shaping
from emulator.dataplane.observe.counters import link_names
from emulator.errors import RunFailed
from traffic.uet.layout import TRIM_BYTES, TRIM_DSCP

CLASS_HIGH, CLASS_DATA = 0x100010, 0x100020     # 10:10 strict priority, 10:20 data
FIFO_HIGH, FIFO_DATA = 0x300000, 0x200000
HIGH_LIMIT = 256 << 10                           # the priority class's byte FIFO
SMALL = 256                                      # frames up to this ride the priority class
# TCA_STAB: one TCA_STAB_BASE (struct tc_sizespec: cell_log, size_log, cell_align,
# overhead, linklayer 1 = ethernet, mpu, mtu, tsize 0: no table), as ``tc qdisc add
# ... stab overhead 0 linklayer ethernet`` sends it: qdisc_pkt_len = skb->len at enqueue
_SIZESPEC = struct.pack("=BBhiIIII", 0, 0, 0, 0, 1, 0, 0, 0)
STAB = struct.pack("=HH", 4 + len(_SIZESPEC), 1) + _SIZESPEC


@dataclass(frozen=True)
class Trim:
    """One run's trimming: frames past ``at`` bytes queued cut to ``size`` bytes."""

    size: int = TRIM_BYTES
    at: int = 0
    dscp: int = TRIM_DSCP

    def config(self):
        """The programs' ``trim.*`` constants (ecnq.CONFIG)."""
        return {"trim.at": self.at, "trim.size": self.size, "trim.dscp": self.dscp,
                "trim.high": CLASS_HIGH, "trim.small": SMALL}

    def text(self):
        return (f"UET data frames trimmed to {self.size} B past {self.at} B queued "
                f"(DSCP {self.dscp}, ahead of data)")


NO_TRIM = dict.fromkeys(Trim().config(), 0)


def apply_tree(ipr, index, params, frame):
    """A switch port's shaper with trimming: TBF 1: of ``params``
    (``shaping.tbf_params``) -> HTB 10: (strict priority only) -> 10:10 (trimmed
    frames and acknowledgements, a byte FIFO of HIGH_LIMIT) and 10:20 (the rest, a
    byte FIFO of the TBF's limit, the link's queue); the TBF's size table (``STAB``)
    charges a trimmed frame its trimmed length."""
    ipr.tc("add", "tbf", index=index, handle=0x10000, stab=STAB, **params)
    shaping.add_priority_band(ipr, index, (CLASS_HIGH, FIFO_HIGH, HIGH_LIMIT),
                              (CLASS_DATA, FIFO_DATA, params["limit"]), frame)


def record(session, marker):
    """The trims per port (by link direction, ``leaf1->h1``) into ``session``'s
    results, and a line of them in the printout (a failed read is a teardown error)."""
    doc = session.results.setdefault("trim", {})
    try:
        trims = marker.trims()
    except (RunFailed, OSError) as e:
        session.teardown_errors.append(f"trim counters: {e}")
        return
    names = link_names(session.topo)
    by_link = {names.get(k, k): v for k, v in sorted(trims.items()) if v}
    doc["trimmed_packets"] = by_link
    doc["trimmed_total"] = sum(trims.values())
    top = ", ".join(f"{k} {v}" for k, v in sorted(by_link.items(), key=lambda kv: -kv[1])[:4])
    session.progress(f"trimmed {doc['trimmed_total']} UET frames on {len(by_link)} switch "
                     f"ports{': ' + top if top else ''}")
