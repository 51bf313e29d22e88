"""Black-box probing: which link drops or corrupts packets silently (pure logic).

Model (in the manner of Pingmesh and NetBouncer: probe every path, then
explain the lossy ones with as few links as possible).

*Paths.*  Probes are RoCEv2 frames, so the switches hash them as they hash
RDMA traffic.  On every rail, every host probes one host on every other leaf
(``probe_pairs``).  For each pair, candidate QPNs (hence UDP source ports,
``frames.udp_sport``) are traced through the installed flows and groups
(``ofproto/trace`` hop by hop, by the caller) until the pair has as many
distinct paths as the topology has shortest paths between its switches
(``ecmp_width``), or the candidates run out; ``choose`` keeps one QPN per
distinct path.  A path is its hops ``node:port``: the port a probe leaves
each node by, so a hop names a *directed* link (``leaf1:eth3`` is
leaf1->spine1).  ``coverage`` says which directed links no probe crosses.

*Counts.*  The traffic engine reports per probe flow, every ``every`` s, the
sequences spanned, how many arrived, the one after the highest that arrived
and how many were sent (a corrupted probe fails its ICRC and counts as lost,
as a NIC drops it).  ``Prober`` keeps those snapshots and judges the last
``window_s`` of them (``Prober.counts``: a path that delivers nothing at all
is 100 % lossy).

*Localization* (``localize``), per window:

1. a path is *lossy* when its losses are too many for the emulator's own
   loss rate (``floor``, measured on the calm baseline, at least 0.1 %): the
   binomial tail P(X >= lost | probes, floor) < ``alpha`` (1e-6);
2. a link is *cleared* when the probes of the non-lossy paths through it,
   pooled, show a loss significantly below ``min_loss`` (the smallest loss
   the prober is asked to find): P(X <= lost | probes, min_loss) < 1e-3;
3. the suspects are a smallest set of uncleared links that lies on every
   lossy path, chosen greedily (the link on most unexplained lossy paths
   first; ties to the higher pooled loss).  Links that lie on exactly the
   same probed paths as a suspect cannot be told apart from it by any probe
   (in a plane of two leaves, leaf->spine and spine->other leaf): they are
   named with it (``alike``).  Lossy paths no uncleared link explains are
   reported as ``unexplained``.

``Prober.feed`` names a suspect only once the same suspects came out of
``confirm`` consecutive windows.
"""

import math

from emulator.experiments.workloads.workload import rail_view

MIN_FLOOR = 1e-3
NONE = (0, 0, 0, 0)          # a flow's (span, unique, next, sent) before it has any


def probe_pairs(topo):
    """[(src view, dst view)]: on every rail, every host to one host on every other
    leaf (the host at its own position there, modulo the leaf's hosts)."""
    pairs = []
    for r in range(max(len(h["ports"]) for h in topo["hosts"])):
        views = [rail_view(h, r) for h in topo["hosts"] if len(h["ports"]) > r]
        by_leaf = {}
        for v in views:
            by_leaf.setdefault(v["leaf"], []).append(v)
        for i, v in enumerate(views):
            for leaf, members in by_leaf.items():
                if leaf != v["leaf"]:
                    pairs.append((v, members[i % len(members)]))
    return pairs


def path_links(path):
    """The directed links a traced path crosses: its ``node:port`` hops."""
    return tuple(h for h in path if ":" in h)


def directed_links(topo):
    """Every directed fabric link as its transmitting hop ``node:port`` -> ``a->b``
    (a bonded host's link to its own NIC is inside the host: not listed)."""
    nics = {h["bond"]["nic"] for h in topo["hosts"] if h.get("bond")}
    out = {}
    for sw in topo["switches"]:
        for p in sw["ports"]:
            if not (sw["name"] in nics and p["peer_kind"] == "host"):
                out[f"{sw['name']}:{p['name']}"] = f"{sw['name']}->{p['peer']}"
    for h in topo["hosts"]:
        if not h.get("bond"):
            for p in h["ports"]:
                out[f"{h['name']}:{p['port']}"] = f"{h['name']}->{p['switch']}"
    return out


def coverage(paths, topo):
    """(covered directed links, every directed link, the uncovered names)."""
    every = directed_links(topo)
    crossed = {h for p in paths.values() for h in path_links(p)}
    missing = sorted(name for hop, name in every.items() if hop not in crossed)
    return len(set(every) & crossed), len(every), missing


def link_of_hop(hop, topo):
    """A hop ``node:port`` -> the link as ``faults.parse_link`` returns it:
    ((switch, its port entry), the other node)."""
    node, _, port_name = hop.rpartition(":")
    for sw in topo["switches"]:
        if sw["name"] == node:
            p = next(p for p in sw["ports"] if p["name"] == port_name)
            return (sw["name"], p), p["peer"]
    host = next(h for h in topo["hosts"] if h["name"] == node)
    hp = next(p for p in host["ports"] if p["port"] == port_name)
    sw = next(s for s in topo["switches"] if s["name"] == hp["switch"])
    return (sw["name"], next(p for p in sw["ports"] if p["port"] == hp["switch_port"])), node


# ---- statistics ------------------------------------------------------------------

def _log_pmf(i, n, p):
    return (math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
            + i * math.log(p) + (n - i) * math.log1p(-p))


def binom_cdf(k, n, p):
    """P(X <= k) for X ~ Binomial(n, p), 0 < p < 1."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return min(1.0, sum(math.exp(_log_pmf(i, n, p)) for i in range(k + 1)))


def binom_sf(k, n, p):
    """P(X >= k) for X ~ Binomial(n, p)."""
    return max(0.0, 1.0 - binom_cdf(k - 1, n, p))


def localize(paths, counts, floor=MIN_FLOOR, min_loss=0.01, alpha=1e-6, clear=1e-3):
    """Suspect links from one window (see the module doc; pure).

    ``paths``: {flow: path}; ``counts``: {flow: (probes, lost)}.  Returns
    {"suspects": [{"hop", "loss", "probes", "lost", "paths", "alike"}], "lossy": [flow],
    "unexplained": [flow]}.
    """
    floor = max(floor, MIN_FLOOR)
    links = {f: path_links(p) for f, p in paths.items()}
    lossy = {f for f, (n, k) in counts.items()
             if f in links and n > 0 and k > 0 and binom_sf(k, n, floor) < alpha}
    pooled, good = {}, {}
    for f, (n, k) in counts.items():
        for hop in links.get(f, ()):
            for acc in (pooled,) + ((good,) if f not in lossy else ()):
                a = acc.setdefault(hop, [0, 0])
                a[0] += n
                a[1] += k
    cleared = {h for h, (n, k) in good.items() if n and binom_cdf(k, n, min_loss) < clear}
    candidates = {h for f in lossy for h in links[f]} - cleared
    left, suspects = set(lossy), []

    def rate(h):
        n, k = pooled.get(h, (0, 0))
        return k / n if n else 0.0
    on = {}                                     # hop -> the probed paths crossing it
    for f in counts:
        for hop in links.get(f, ()):
            on.setdefault(hop, set()).add(f)
    while left and candidates:
        best = max(sorted(candidates), key=lambda h: (sum(h in links[f] for f in left), rate(h)))
        covered = {f for f in left if best in links[f]}
        if not covered:
            break
        # links on exactly the same probed paths cannot be told apart by probes
        alike = sorted(h for h in candidates if h != best and on.get(h) == on.get(best))
        n, k = pooled[best]
        suspects.append({"hop": best, "loss": round(k / n, 4) if n else None, "probes": n,
                         "lost": k, "paths": len({f for f in lossy if best in links[f]}),
                         "alike": alike})
        left -= covered
        candidates -= {best, *alike}
    return {"suspects": suspects, "lossy": sorted(lossy), "unexplained": sorted(left)}


def _arrivals(flow):
    """(span, unique, next) of a progress document's flow entry; an entry without
    ``next`` spans from sequence 0."""
    if not flow:
        return (0, 0, 0)
    span, unique, *rest = flow
    return (span, unique, rest[0] if rest else span)


def _lost_so_far(snap, sent_before):
    """A flow's probes lost as of a snapshot (span, unique, next, _): the gaps below
    the highest arrival, and what was sent a snapshot earlier beyond it."""
    span, unique, nxt, _ = snap
    return span - unique + max(sent_before - nxt, 0)


class Prober:
    """Windows of the engine's progress snapshots, judged by ``localize``."""

    def __init__(self, paths, window_s=5.0, confirm=2, min_loss=0.01):
        self.paths = paths
        self.window_ns = int(window_s * 1e9)
        self.confirm = confirm
        self.min_loss = min_loss
        self.floor = MIN_FLOOR
        self.snapshots = []          # (t_ns, {flow: (span, unique, next, sent)})
        self.streak = []             # the suspects of the last windows
        self.last = None

    def counts(self, since_ns=None):
        """{flow: (probes, lost)} from the snapshot at ``since_ns`` (default: a window
        before the last) to the last one.

        A flow's losses so far, at a snapshot: the sequences below the highest
        that arrived and never did, and those the sender had sent one snapshot
        earlier (a snapshot's period to arrive) beyond it (a black hole: nothing
        arrives, so nothing spans).  The window's losses are the growth of that
        count: exact, whatever the periods between snapshots (a late snapshot
        skews no edge), a reordered probe in flight at a snapshot aside."""
        if len(self.snapshots) < 2:
            return {}
        t_last = self.snapshots[-1][0]
        since = t_last - self.window_ns if since_ns is None else since_ns
        ia = next((i for i, (t, _) in enumerate(self.snapshots) if t >= since),
                  len(self.snapshots) - 1)
        # the sent counts one snapshot earlier (the first snapshot has none earlier:
        # its own, the packets then in flight not yet counted as lost)
        a, a_sent = self.snapshots[ia][1], self.snapshots[max(ia - 1, 0)][1]
        b, b_sent = self.snapshots[-1][1], self.snapshots[-2][1]
        out = {}
        for f in set(b) | set(b_sent):
            sa, sb = a_sent.get(f, NONE)[3], b_sent.get(f, NONE)[3]
            span, s0 = b.get(f, NONE)[0], a.get(f, NONE)[0]
            lost = _lost_so_far(b.get(f, NONE), sb) - _lost_so_far(a.get(f, NONE), sa)
            out[f] = (max(span - s0, sb - sa), max(lost, 0))
        return out

    def set_floor(self, since_ns=None):
        """The emulator's own loss rate, from the snapshots since ``since_ns`` (the
        calm baseline): every flow's losses pooled, at least 0.1 %."""
        c = self.counts(since_ns)
        n = sum(x for x, _ in c.values())
        k = sum(y for _, y in c.values())
        self.floor = max(MIN_FLOOR, k / n if n else 0.0)
        return self.floor

    def feed(self, doc):
        """Add one ``progress`` document; returns the confirmed suspect hops, the
        ``alike`` ones included ([] if none yet).  ``self.last`` keeps the latest window's ``localize`` result."""
        sent, flows = doc.get("sent", {}), doc["flows"]
        self.snapshots.append((doc["t_ns"], {
            f: _arrivals(flows.get(f)) + (sent.get(f, 0),) for f in set(flows) | set(sent)}))
        t0 = doc["t_ns"] - 2 * self.window_ns
        while self.snapshots and self.snapshots[0][0] < t0:
            self.snapshots.pop(0)
        self.last = localize(self.paths, self.counts(), self.floor, self.min_loss)
        self.streak.append(tuple(sorted(h for s in self.last["suspects"]
                                        for h in [s["hop"]] + s["alike"])))
        self.streak = self.streak[-self.confirm:]
        if len(self.streak) == self.confirm and self.streak[0] and \
                len(set(self.streak)) == 1:
            return list(self.streak[0])
        return []
