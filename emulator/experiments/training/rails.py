"""Rank-aligned AllReduce and all-to-all on a rail fabric, as job-engine documents (pure).

Model.  A host of a rail fabric has one GPU per NIC: GPU i of host a is
rank (a, i) on NIC ``eth<i>`` (rail i+1).  ``S`` is the per-GPU size, as
nccl-tests counts it; G = hosts x rails GPUs, H hosts.

* ``allreduce`` (rank-aligned, as NCCL's rings on a rail fabric): one ring
  per rail over that rail's GPUs, S bytes, all rails at once.  Nothing
  leaves its rail, so rail-only and rail-optimized carry the same bytes.
* ``alltoall``: every GPU sends S/G to every GPU.  The part between GPUs of
  one host rides NVLink on both fabrics (not the network).
  - rail-optimized: GPU (a,i) sends S/G straight to every GPU (b,j) of
    every other host through its own NIC; cross-rail bytes cross the
    spines.
  - rail-only (NCCL's PXN, staged as Wang et al. count it): first every
    host moves, over its HB link (``links.hb``), what each GPU has for the
    other rails' GPUs to the GPU of that rail: S x (rails-1) bytes per
    host; then NIC (a,i) sends S/H (every GPU of a's bytes for GPU (b,i))
    to every (b,i), rail-aligned.  Each NIC sends S x (H-1)/H on either
    fabric: the difference is the HB stage and the spines.

The job (``traffic.jobs.config``): endpoints are the NICs (then, on
rail-only, each host's ``hb0`` and ``hb1``).  Every transfer of the
all-to-all is a send/recv pair between two ranks of its own (a send holds
its rank until delivered: one rank per transfer lets a NIC serve all of
them at once, as its QPs would); on rail-only, a host's rail-stage senders
wait for its HB transfer (a local barrier).  Every iteration ends with a
barrier of all ranks (``fabric: false``: no network); iteration 0 is a
warm-up, the others are measured (``measure``).
"""

from emulator.dataplane.links import hb
from emulator.errors import ConfigError

WORKLOADS = ("allreduce", "alltoall")


def gpus(topo):
    """[(host name, NIC index, port document)] in fabric order: the GPU ranks."""
    out = [(h["name"], i, p) for h in topo["hosts"] for i, p in enumerate(h["ports"])]
    rails = {len(h["ports"]) for h in topo["hosts"]}
    if len(rails) != 1 or rails == {1}:
        raise ConfigError("--fabrics", "a rail fabric's hosts all have one NIC per rail "
                                       "(preset rail-only or rail-optimized, planes >= 2)")
    return out


def staged(topo):
    """True where the rails meet only inside the hosts (rail-only): the HB stage."""
    return any(h.get("routes") for h in topo["hosts"])


class _Doc:
    """The document under construction: endpoints, ranks, programs."""

    def __init__(self, endpoints):
        self.endpoints, self.ranks, self.programs = endpoints, [], []
        self.pairs = {}          # (src endpoint, dst endpoint) -> (sender, receiver) ranks

    def rank(self, endpoint):
        self.ranks.append(endpoint)
        self.programs.append([])
        return len(self.ranks) - 1

    def pair(self, cid, src_ep, dst_ep, nbytes, gate=None):
        """A transfer between the two ranks of (src_ep, dst_ep), made at the first one;
        ``gate`` (id, members list) holds the sender."""
        if (src_ep, dst_ep) not in self.pairs:
            self.pairs[(src_ep, dst_ep)] = (self.rank(src_ep), self.rank(dst_ep))
        s, d = self.pairs[(src_ep, dst_ep)]
        if gate is not None:
            gate[1].append(s)
            self.programs[s].append(("gate", gate[0]))
        self.programs[s].append({"op": "send", "id": cid, "peer": d, "bytes": nbytes})
        self.programs[d].append({"op": "recv", "id": cid, "peer": s, "bytes": nbytes})
        return s, d


def barrier(cid, members, ranks):
    """A barrier of ``members`` (no network); those sharing an endpoint side by side."""
    return {"op": "coll", "id": cid, "kind": "allreduce", "bytes": 0, "fabric": False,
            "members": sorted(members, key=lambda m: (ranks[m], m))}


def job_document(topo, workload, size, netns_of, iterations=2):
    """The job document of ``workload`` (``size`` bytes per GPU) with ``iterations``
    measured after one warm-up; ``netns_of(host name)``: its namespace path."""
    if workload not in WORKLOADS:
        raise ConfigError("--workload", f"{workload!r}: the rail comparison runs "
                                        f"{' or '.join(WORKLOADS)}")
    ranks = gpus(topo)
    hosts = topo["hosts"]
    rails, H = len(hosts[0]["ports"]), len(hosts)
    G = H * rails
    endpoints = [{"netns": netns_of(name), "intf": p["port"], "ip": p["ip"], "mac": p["mac"],
                  "name": f"{name}:{p['port']}", "rate_bps": p["rate_bps"]}
                 for name, _, p in ranks]
    ep = {(name, i): k for k, (name, i, _) in enumerate(ranks)}
    pxn = workload == "alltoall" and staged(topo)
    hb_ep = {}
    if pxn:
        for k, h in enumerate(hosts):
            hb_ep[h["name"]] = len(endpoints)
            endpoints += hb.endpoints(netns_of(h["name"]), k, h["name"], hb.rate_of(topo, h))
    doc = _Doc(endpoints)
    if workload == "allreduce":
        gpu_rank = {key: doc.rank(e) for key, e in ep.items()}
    for t in range(iterations + 1):
        if workload == "allreduce":
            for (name, i), r in gpu_rank.items():
                doc.programs[r].append({
                    "op": "coll", "id": f"it{t}.ar.rail{i + 1}", "kind": "allreduce",
                    "group": "DP", "members": [gpu_rank[(h["name"], i)] for h in hosts],
                    "bytes": size, "fabric": True})
        elif pxn:
            for h in hosts:
                a = h["name"]
                gate = (f"it{t}.pxn.{a}", [])
                x, y = doc.pair(f"it{t}.hb.{a}", hb_ep[a], hb_ep[a] + 1,
                                size * (rails - 1))
                gate[1].append(y)
                for i in range(rails):
                    for b in hosts:
                        if b is not h:
                            doc.pair(f"it{t}.a2a.{a}:{i}>{b['name']}:{i}", ep[(a, i)],
                                     ep[(b["name"], i)], size // H, gate)
                doc.programs[y].append(barrier(*gate, doc.ranks))
                _resolve_gates(doc, gate)
        else:
            for a, i, _ in ranks:
                for b, j, _ in ranks:
                    if a != b:
                        doc.pair(f"it{t}.a2a.{a}:{i}>{b}:{j}", ep[(a, i)], ep[(b, j)],
                                 size // G)
        members = list(range(len(doc.ranks)))
        for r in members:
            doc.programs[r].append(barrier(f"it{t}.end", members, doc.ranks))
    return {"endpoints": endpoints, "ranks": doc.ranks, "programs": doc.programs}


def _resolve_gates(doc, gate):
    """Replace the ("gate", id) placeholders of ``gate``'s senders by its barrier op."""
    for r in gate[1]:
        doc.programs[r] = [barrier(*gate, doc.ranks) if op == ("gate", gate[0]) else op
                           for op in doc.programs[r]]


def measure(result, workload, size, topo, link_bps):
    """Per measured iteration (1..): its time (from the barrier that ended the iteration
    before, which every rank leaves at once, to the last end of its transfers or
    collectives: data and ACKs delivered), algbw, busbw (nccl-tests factors over the GPU
    count of one collective) and efficiency (busbw / NIC rate)."""
    hosts = topo["hosts"]
    rails, H = len(hosts[0]["ports"]), len(hosts)
    n, factor = (H, 2 * (H - 1) / H) if workload == "allreduce" else \
        (H * rails, (H * rails - 1) / (H * rails))
    by_it, barrier_end = {}, {}
    for c in result["collectives"]:
        it, kind = c["id"].split(".")[:2]
        if kind == "end":
            barrier_end[int(it[2:])] = c["end_ns"]
        else:
            by_it.setdefault(int(it[2:]), []).append(c)
    rows = []
    for it in sorted(by_it)[1:]:
        cs = by_it[it]
        start = barrier_end.get(it - 1)      # every rank left the last barrier then
        ends = [c["end_ns"] for c in cs if c["end_ns"] is not None]
        if len(ends) < len(cs) or start is None:
            rows.append({"iteration": it, "time_s": None, "wrong": None})
            continue
        t = (max(ends) - start) / 1e9
        hb_s = [(c["end_ns"] - c["start_ns"]) / 1e9 for c in cs if c["id"].split(".")[1] == "hb"]
        busbw = size / t * factor * 8
        rows.append({"iteration": it, "time_s": round(t, 4), "ranks": n,
                     "algbw_Mbps": round(size / t * 8 / 1e6, 3),
                     "busbw_Mbps": round(busbw / 1e6, 3),
                     "efficiency": round(busbw / link_bps, 4),
                     "hb_stage_s": round(max(hb_s), 4) if hb_s else None,
                     "wrong": sum(c.get("wrong") or 0 for c in cs)})
    return rows


def ideal_seconds(workload, size, topo, hb_bps=None):
    """The fluid time of one call: the NICs' bytes at their rate, plus the HB stage."""
    hosts = topo["hosts"]
    rails, H = len(hosts[0]["ports"]), len(hosts)
    link = min(p["rate_bps"] for h in hosts for p in h["ports"])
    if workload == "allreduce":
        return size * 2 * (H - 1) / H * 8 / link
    net = size * (H - 1) / H * 8 / link
    return net + (size * (rails - 1) * 8 / hb_bps if hb_bps else 0.0)
