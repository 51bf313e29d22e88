"""Per-flow packet accounting (pure: no sockets, no clock; unit-tested).

Model.  A flow is one PSN space (one QP stream).  Each arrival is
``(psn, arrival_ns, length)``.  The 24-bit PSN is unwrapped to an extended
sequence: the candidate nearest to the highest sequence seen so far (a packet
more than 2**23 behind is taken as ahead, after a wrap).  Then, per flow:

- ``received_packets``: every arrival, duplicates included;
- ``duplicated_packets``: arrivals of a sequence already seen;
- ``reordered_packets``: first arrivals of a sequence below the highest seen
  (late packets, RFC 4737's "reordered");
- ``dropped_packets``: expected minus distinct received, where expected is
  the sender's count when known, else the span of sequences seen
  (``first_psn`` .. highest);
- a disruption: two consecutive arrivals further apart than
  ``gap_threshold_ns``.  ``total_disruptions`` counts them,
  ``longest_disruption`` is the longest in SECONDS (SONiC's unit),
  ``longest_disruption_ms`` the same in ms, ``disrupted_packets`` the
  sequences skipped across those gaps (0 when the sender paused); per
  disruption, ``skipped`` and, of those, ``never_arrived`` (a skipped
  sequence that arrived later was reordered, not lost);
- a throughput timeline: bytes per ``bin_ns`` (1 ms) since ``t0_ns``.

Key names follow SONiC's data-plane checker (sent/received/dropped/
duplicated packets, total_disruptions, longest_disruption).
"""

PSN_BITS = 24
PSN_MOD = 1 << PSN_BITS
PSN_HALF = PSN_MOD >> 1


def unwrap(psn, highest):
    """The extended sequence of 24-bit ``psn`` nearest to extended ``highest``."""
    delta = (psn - highest) % PSN_MOD
    if delta >= PSN_HALF:
        delta -= PSN_MOD
    return highest + delta


class FlowAccount:
    """Accounting of one flow; feed ``add`` in arrival order."""

    def __init__(self, flow_id, gap_threshold_ns=10_000_000, t0_ns=None,
                 bin_ns=1_000_000, first_psn=None):
        self.flow_id = flow_id
        self.gap_threshold_ns = gap_threshold_ns
        self.t0_ns = t0_ns
        self.bin_ns = bin_ns
        self.first_psn = first_psn
        self.received = self.duplicates = self.reordered = self.bytes = 0
        self.highest = None          # extended sequence
        self.lowest = None
        self._seen = bytearray()     # one byte per extended seq from _base
        self._base = 0
        self.first_ns = self.last_ns = None
        self.disruptions = []        # (start_ns, end_ns, skipped, first skipped seq)
        self.timeline = []           # bytes per bin
        self.lat_min = self.lat_max = None
        self.lat_sum = 0
        self.lat_n = 0

    def _mark(self, ext):
        """Mark ``ext`` seen; return True if it was already."""
        i = ext - self._base
        if i < 0:                    # earlier than anything seen: grow at front
            grow = max(-i, 1024)
            self._seen[0:0] = bytes(grow)
            self._base -= grow
            i += grow
        if i >= len(self._seen):
            self._seen.extend(bytes(max(i + 1 - len(self._seen), 4096)))
        seen = self._seen[i]
        self._seen[i] = 1
        return bool(seen)

    def add(self, psn, arrival_ns, length=0, tx_ns=None):
        """Account one arrival."""
        if self.highest is None:
            ext = psn if self.first_psn is None else unwrap(psn, self.first_psn)
            self._base = ext
            self.highest = self.lowest = ext
            self.first_ns = arrival_ns
            if self.t0_ns is None:
                self.t0_ns = arrival_ns
            prev_highest = ext - 1
        else:
            ext = unwrap(psn, self.highest)
            prev_highest = self.highest
            gap = arrival_ns - self.last_ns
            if gap > self.gap_threshold_ns:
                self.disruptions.append(
                    (self.last_ns, arrival_ns, max(ext - prev_highest - 1, 0), prev_highest + 1))
        self.last_ns = arrival_ns
        self.received += 1
        self.bytes += length
        if self._mark(ext):
            self.duplicates += 1
        elif ext < prev_highest:
            self.reordered += 1
        if ext > self.highest:
            self.highest = ext
        if ext < self.lowest:
            self.lowest = ext
        if self.bin_ns:                  # None: no timeline (the engine's receivers)
            b = (arrival_ns - self.t0_ns) // self.bin_ns
            if b >= 0:
                tl = self.timeline
                if b >= len(tl):
                    tl.extend([0] * (b + 1 - len(tl)))
                tl[b] += length
        if tx_ns:
            lat = arrival_ns - tx_ns
            self.lat_sum += lat
            self.lat_n += 1
            if self.lat_min is None or lat < self.lat_min:
                self.lat_min = lat
            if self.lat_max is None or lat > self.lat_max:
                self.lat_max = lat

    def arrived(self, first, n):
        """How many of the ``n`` sequences from extended ``first`` arrived (so far)."""
        lo = max(first - self._base, 0)
        hi = min(first + n - self._base, len(self._seen))
        return self._seen.count(1, lo, hi) if hi > lo else 0

    @property
    def unique(self):
        return self.received - self.duplicates

    def expected(self, sent=None):
        """Packets the sender sent, or the span of sequences seen."""
        if sent is not None:
            return sent
        if self.highest is None:
            return 0
        first = self.lowest
        if self.first_psn is not None:
            first = min(first, unwrap(self.first_psn, self.lowest))
        return self.highest - first + 1

    def summary(self, sent=None):
        """SONiC data-plane-checker style dictionary for this flow."""
        longest = max((e - s for s, e, *_ in self.disruptions), default=0)
        expected = self.expected(sent)
        out = {
            "flow": self.flow_id,
            "sent_packets": sent,
            "received_packets": self.received,
            "dropped_packets": max(expected - self.unique, 0),
            "duplicated_packets": self.duplicates,
            "total_duplications": self.duplicates,
            "reordered_packets": self.reordered,
            "total_disruptions": len(self.disruptions),
            "disrupted_packets": sum(d[2] for d in self.disruptions),
            "longest_disruption": longest / 1e9,
            "longest_disruption_ms": longest / 1e6,
            "disruptions": [{"start_ns": s, "end_ns": e, "ms": (e - s) / 1e6,
                             "skipped": n, "never_arrived": n - self.arrived(first, n)}
                            for s, e, n, first in self.disruptions],
            "received_bytes": self.bytes,
            "first_arrival_ns": self.first_ns,
            "last_arrival_ns": self.last_ns,
        }
        if self.lat_n:
            out["latency_us"] = {"min": self.lat_min / 1e3, "max": self.lat_max / 1e3,
                                 "avg": self.lat_sum / self.lat_n / 1e3}
        return out


class Accounting:
    """All flows seen by one receiver, keyed by flow id, on a common t0."""

    def __init__(self, gap_threshold_ns=10_000_000, t0_ns=None, bin_ns=1_000_000):
        self.gap_threshold_ns = gap_threshold_ns
        self.t0_ns = t0_ns
        self.bin_ns = bin_ns
        self.flows = {}
        self.corrupted = 0

    def add(self, flow_id, psn, arrival_ns, length=0, tx_ns=None):
        fa = self.flows.get(flow_id)
        if fa is None:
            if self.t0_ns is None:
                self.t0_ns = arrival_ns
            fa = self.flows[flow_id] = FlowAccount(
                flow_id, self.gap_threshold_ns, self.t0_ns, self.bin_ns)
        fa.add(psn, arrival_ns, length, tx_ns)

    def timeline_mbps(self):
        """Aggregate throughput per bin, Mbit/s."""
        n = max((len(f.timeline) for f in self.flows.values()), default=0)
        tot = [0] * n
        for f in self.flows.values():
            for i, b in enumerate(f.timeline):
                tot[i] += b
        if not self.bin_ns:
            return []
        scale = 8 / (self.bin_ns / 1e9) / 1e6
        return [round(b * scale, 3) for b in tot]

    def summary(self, sent=None, timeline=True):
        """Per-flow summaries plus totals; ``sent`` maps flow id -> sent count."""
        sent = sent or {}
        ids = sorted(set(self.flows) | set(sent))
        flows = []
        for fid in ids:
            fa = self.flows.get(fid) or FlowAccount(fid)
            flows.append(fa.summary(sent.get(fid)))
        total = {k: sum(f[k] or 0 for f in flows) for k in (
            "sent_packets", "received_packets", "dropped_packets",
            "duplicated_packets", "reordered_packets", "total_disruptions",
            "disrupted_packets")}
        total["longest_disruption"] = max((f["longest_disruption"] for f in flows), default=0)
        total["longest_disruption_ms"] = total["longest_disruption"] * 1e3
        total["corrupted_packets"] = self.corrupted
        out = {"flows": flows, "total": total,
               "bin_ms": self.bin_ns / 1e6 if self.bin_ns else None,
               "t0_ns": self.t0_ns}
        if timeline:
            out["timeline_mbps"] = self.timeline_mbps()
        return out
