"""Training jobs from SimAI workloads (pure): ranks on the fabric, their groups, op programs.

``build_job(workload, hosts, options)`` turns a parsed workload
(``simai.Workload``) and the fabric's hosts (``fabric_hosts(topology)``)
into a ``Job``: where each rank sits, its groups, one op program per rank
for a runner, the scale, and a group summary.  ``estimate(job, rate)`` is
the analytic iteration time (``job_time``).

Ranks and groups: ``job_ranks`` (rank r is GPU r mod K of host r div K;
Megatron / SimAI group layout).

Where a collective runs.  Ring order: by host, then NIC, then rank, so
members sharing an endpoint (a host's NIC) are adjacent, as NCCL and SimAI
put a node's GPUs next to each other.  Members all on one host: local,
NVLink only (``fabric`` false), even on a rail fabric where they use
different NICs (GPUs of a host talk over NVLink; the planes meet only
there).  Members on several hosts: the ring's hops between endpoints cross
the fabric and the hops between members of one endpoint are NVLink.  The
runner (``traffic.jobs.config``) runs the fabric part as a collective over
the e distinct endpoints, so ``bytes`` is then the equivalent size whose
ring edges carry what the n-member ring's edges carry
(``job_time.fabric_size``).  A fabric collective that puts two NICs of one
host in its ring (tp < K on a rail fabric) is counted in
``summary["intra_host_network"]``: the runner would send between them over
the network, which a multi-plane fabric cannot carry.

Time.  ``local_ns`` = the NVLink time of members sharing an endpoint (a
GPU's ring bytes, nccl-tests' factors: 2(n-1)/n x size for AllReduce,
(n-1)/n for the others, over ``nvlink_bps`` per GPU: by default 8 x the
real NIC rate, scaled as the NICs are) plus the row's update delay (SimAI
waits the update column after every collective of the row, fwd, ig and wg
alike, before calling it finished).  The runner adds ``local_ns`` after the
network part (when members share an endpoint; NCCL would overlap the hops,
so this errs long by at most the NVLink share) or spends it alone for a
local collective.

Scale.  r = ``real_rate_bps`` (a real GPU's NIC rate) / the emulated
per-GPU NIC share.  Sizes are divided by s; compute, NVLink and update
times are multiplied by r/s, so the job runs r/s times slower than the real
one with every ratio kept.  ``choose_scale``: the smallest s >= 1 that
brings one iteration (analytic estimate) to ``target_s`` (30 s) of emulated
time, capped so that every fabric collective's ring chunk (its bytes /
e) stays >= 8 frames of the RoCE MTU; collectives below 8 frames even
unscaled do not cap it and are flagged ``latency_bound``, as is any below
8 frames at the chosen (or given) s.

Program (per rank, JSON-ready; one iteration after another).  SimAI's loop
(``iterate_hybrid_parallel_Transformer[_fwd_in_bckwd]``): forward over the
rows (wait for the row's weight-gradient collective of the previous
iteration, compute, blocking fwd collective); backward from the last row
(ig compute, blocking ig collective, wg compute, non-blocking wg
collective); at the end a wait for every pending one.  ``checkpoints`` /
``checkpoint_initiates`` replay forward from the nearest checkpoint before
an initiating row's ig.  SimAI's loop has no micro-batch loop: aicb writes
``ga`` micro-batches as rows, and SimAI uses ``ga`` only in its PP report.
pp > 1 (SimAI keeps PP off the network): AICB's layout of the rows
(``simai.layout``) as a whole: the prefix's forward, the ``ga`` micro-batch
blocks run 1F1B (stage p warms up with pp-p-1 forwards; before a block's
forward a stage receives ``pp_comm`` bytes from the previous stage, after
it sends them on; gradients go back the same way), the suffix's forward and
backward, then the prefix's backward (its gradient collectives close the
iteration, where SimAI's forward-then-backward order puts them too).  Every
stage runs every row (aicb writes one stage's rows for all of them).
Compute ops carry ``label`` ``it<k>.L<row>.<phase>`` for the reports.
DATA: no fwd / ig collectives (SimAI disables them), backward is wg compute,
wg collective, ig compute.  MICRO: every row's wg collective, blocking, no
compute (SimAI issues row 0's only, once per pass; aicb writes a size
sweep).  Collectives of a one-member group or of 0 bytes are left out and
counted in ``summary["skipped"]``.  Under HYBRID_TRANSFORMER_FWD_IN_BCKWD a
fwd collective below 4096 bytes is raised to 4096, as SimAI does.  Ops:

  {"op": "compute", "ns": int}
  {"op": "coll", "id": "it0.L3.fwd.TP1", "kind": allreduce|allgather|
   reducescatter|alltoall|broadcast (root: members[0]), "group": TP|DP|EP|
   DP_EP, "members": [ranks, ring order], "bytes": int (scaled; for a fabric
   collective the equivalent size over its endpoints), "blocking": bool,
   "local_ns": int, "fabric": bool}
  {"op": "wait", "ids": [ids of this rank's non-blocking collectives]}
  {"op": "send", "id", "peer", "bytes"}  (eager: never waits for the peer)
  {"op": "recv", "id", "peer", "bytes"}  (blocks until that send arrived)

An id names one collective instance (iteration, row, phase -- ``rfwd`` for
a replayed forward --, group kind and group index), the same on every
member; every member holds the same dict.
"""

import math
from dataclasses import dataclass, field

from emulator.errors import ConfigError
from emulator.experiments.training import simai
from emulator.experiments.training import timing as job_time
from emulator.experiments.training.hops import REAL_HOP_S
from emulator.experiments.training.ranks import (  # noqa: F401  (the job's vocabulary)
    GROUP_KINDS,
    Nic,
    Placement,
    fabric_hosts,
    form_groups,
    place,
)
from emulator.experiments.training.timing import fabric_size, local_bytes

SUPPORTED = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_TRANSFORMER", "DATA", "MICRO")
MIN_CHUNK_FRAMES = 8
SIMAI_MIN_FWD_BYTES = 4096


@dataclass(frozen=True)
class JobOptions:
    """How to run a workload: GPUs per host, iterations, the real rates, scale, MTU."""

    gpus_per_host: int = 8
    iterations: int = 1
    real_rate_bps: float = 400e9        # a real GPU's NIC rate
    nvlink_rate_bps: float | None = None  # a real GPU's NVLink rate; None: 8 x real_rate_bps
    scale: float | None = None          # sizes divided by it; None: choose_scale
    mtu: int = 4096                     # RoCE MTU: a frame's payload
    target_s: float = 30.0              # emulated seconds per iteration choose_scale aims at
    real_hop_s: float = REAL_HOP_S      # a real ring step's latency (``hops``)


@dataclass(frozen=True)
class Job:
    """A workload placed on a fabric: programs, groups, scale, summary."""

    workload: object
    options: JobOptions
    placement: tuple
    groups: dict                # kind -> tuple of member tuples
    scale: float
    stretch: float              # r / s: time factor of compute, NVLink and update
    rate_ratio: float           # r
    nvlink_bps: float           # emulated, per GPU
    scale_cap: float
    real_iteration_s: float     # analytic, at the real rates
    programs: tuple
    latency_bound: tuple        # "L<row>.<phase>.<group>" of flagged collectives
    summary: dict = field(default_factory=dict)


def choose_scale(real_iteration_s, rate_ratio, cap=math.inf, target_s=30.0):
    """The divisor s of the sizes: the smallest s >= 1 with real_iteration_s x r / s <=
    target_s (an iteration's emulated time), but never above ``cap``."""
    return min(cap, max(1.0, real_iteration_s * rate_ratio / target_s))


def build_job(workload, hosts, options=None, placement=None):
    """Place ``workload`` on ``hosts`` and write every rank's program (module docstring);
    ``placement``: the ranks already placed (a shared cluster's ``Placement`` tuple)."""
    o = options or JobOptions()
    if workload.policy not in SUPPORTED:
        raise ConfigError("workload", f"policy {workload.policy} is not one the lab runs; "
                          f"it runs {', '.join(SUPPORTED)}", getattr(workload, "path", None))
    if o.iterations < 1 or (o.scale is not None and o.scale <= 0) or o.mtu < 1:
        raise ConfigError("options", "iterations >= 1, scale > 0 and mtu >= 1 are needed")
    par = workload.parallel
    if placement is None:
        placement = place(hosts, o.gpus_per_host, par["all_gpus"])
    n = len(placement)
    groups = form_groups(n, par["tp"], par["pp"], par["ep"])
    ratio = o.real_rate_bps / min(p.share_bps for p in placement)
    nvlink = o.nvlink_rate_bps or 8 * o.real_rate_bps
    real = _Writer(workload, placement, groups, 1.0, 1.0, nvlink, o.mtu)
    real_programs = real.write(1)
    real_s = job_time.simulate(real_programs, [o.real_rate_bps] * n,
                              _endpoints(placement))["total_s"]
    floor = MIN_CHUNK_FRAMES * o.mtu
    fits = [c for c in real.chunks if c >= floor]
    cap = min(fits) / floor if fits else math.inf
    s = o.scale or choose_scale(real_s, ratio, cap, o.target_s)
    w = _Writer(workload, placement, groups, s, ratio / s, nvlink / ratio, o.mtu)
    programs = w.write(o.iterations)
    return Job(workload, o, placement, groups, s, ratio / s, ratio, nvlink / ratio, cap,
               real_s, tuple(programs), tuple(sorted(w.latency_bound)), w.summary)


def estimate(job, link_rate_bps=None):
    """The analytic estimate of ``job`` on NICs of ``link_rate_bps`` (None: the fabric's own
    rates; a number: every NIC; a dict: by (host, port) or host), in emulated seconds."""
    shares = []
    for p in job.placement:
        rate = p.nic.rate_bps
        if isinstance(link_rate_bps, dict):
            rate = link_rate_bps.get((p.host, p.nic.port), link_rate_bps.get(p.host, rate))
        elif link_rate_bps is not None:
            rate = link_rate_bps
        shares.append(rate / p.sharing)
    est = job_time.simulate(job.programs, shares, _endpoints(job.placement))
    its = job.options.iterations
    groups = {}
    for kind in GROUP_KINDS:
        s = job.summary[kind]
        groups[kind] = {"collectives": s["collectives"], "bytes": s["bytes"],
                        "busy_s": est["busy_by_group_s"].get(kind, 0.0),
                        "exposed_s": est["exposed_by_group_s"].get(kind, 0.0)}
    return {"iteration_s": est["total_s"] / its, "total_s": est["total_s"],
            "compute_s": est["compute_s"], "exposed_s": est["exposed_s"],
            "slowest_rank": est["slowest_rank"], "groups": groups}


def job_document(job):
    """The job as one JSON-ready dict: ``endpoints`` (host, port, rate), ``ranks`` (rank ->
    endpoint index) and ``programs`` as ``traffic.jobs.config`` takes them (the caller
    adds each endpoint's namespace, interface and address), and what the job was made of."""
    eps = list(dict.fromkeys(_endpoints(job.placement)))
    rates = {(p.host, p.nic.port): p.nic.rate_bps for p in job.placement}
    return {"endpoints": [{"host": h, "port": port, "rate_bps": rates[(h, port)]}
                          for h, port in eps],
            "ranks": [eps.index(e) for e in _endpoints(job.placement)],
            "programs": [list(p) for p in job.programs],
            "job": {"workload": job.workload.path, "policy": job.workload.policy,
                    "parallel": dict(job.workload.parallel),
                    "gpus": [{"rank": p.rank, "host": p.host, "gpu": p.gpu}
                             for p in job.placement],
                    "scale": job.scale, "stretch": job.stretch, "rate_ratio": job.rate_ratio,
                    "scale_cap": None if math.isinf(job.scale_cap) else job.scale_cap,
                    "nvlink_bps": job.nvlink_bps, "iterations": job.options.iterations,
                    "real_iteration_s": job.real_iteration_s,
                    "latency_bound": list(job.latency_bound), "summary": job.summary}}


def _endpoints(placement):
    return [(p.host, p.nic.port) for p in placement]


class _Writer:
    """Writes the rank programs at one scale (sizes / scale, times x stretch)."""

    def __init__(self, workload, placement, groups, scale, stretch, nvlink_bps, mtu):
        self.w, self.placement = workload, placement
        self.scale, self.stretch, self.nvlink, self.mtu = scale, stretch, nvlink_bps, mtu
        self.layers = workload.layers
        self.index = {kind: {m: (gi, ms) for gi, ms in enumerate(gs) for m in ms}
                      for kind, gs in groups.items()}
        self.stage = len(placement) // workload.parallel["pp"]
        self.host_order = {p.host: p.rank for p in reversed(placement)}  # its first rank
        self.ops, self.chunks, self.latency_bound = {}, [], set()
        self.summary = {k: {"collectives": 0, "bytes": 0, "scaled_bytes": 0, "fabric": 0,
                            "local": 0, "fabric_bytes": 0} for k in GROUP_KINDS}
        self.summary["skipped"] = {"single_member": 0, "zero_bytes": 0, "policy": 0}
        self.summary["intra_host_network"] = 0
        self.checkpoints = sorted(workload.checkpoints)
        self.initiates = set(workload.checkpoint_initiates)
        self.layout = simai.layout(workload)
        self.summary["layout"] = {"prefix": len(self.layout.prefix),
                                  "micro_batches": len(self.layout.blocks),
                                  "block": len(self.layout.blocks[0]),
                                  "suffix": len(self.layout.suffix),
                                  "found": self.layout.found,
                                  "text": self.layout.describe()}

    def write(self, iterations):
        return [self._program(r, iterations) for r in range(len(self.placement))]

    def _program(self, rank, iterations):
        prog, pending = [], {}
        for it in range(iterations):
            if self.w.policy == "MICRO":
                for row, layer in enumerate(self.layers):
                    self._coll(prog, rank, it, row, "wg", layer.wg, True, layer.update_ns)
            elif self.w.parallel["pp"] == 1:
                self._forward(prog, rank, it, 0, len(self.layers), pending)
                self._backward(prog, rank, it, 0, len(self.layers), pending)
            else:
                self._pipeline(prog, rank, it, pending)
        if pending:
            prog.append({"op": "wait", "ids": sorted(pending.values())})
        return prog

    def _compute(self, prog, ns, label):
        ns = round(ns * self.stretch)
        if ns > 0:
            prog.append({"op": "compute", "ns": ns, "label": label})

    def _forward(self, prog, rank, it, lo, hi, pending, tag="fwd"):
        for row in range(lo, hi):
            layer = self.layers[row]
            if row in pending:
                prog.append({"op": "wait", "ids": [pending.pop(row)]})
            self._compute(prog, layer.fwd_ns, f"it{it}.L{row}.{tag}")
            self._coll(prog, rank, it, row, tag, layer.fwd, True, layer.update_ns)

    def _backward(self, prog, rank, it, lo, hi, pending):
        for row in range(hi - 1, lo - 1, -1):
            layer = self.layers[row]
            if self.w.policy == "DATA":
                self._compute(prog, layer.wg_ns, f"it{it}.L{row}.wg")
                pending_id = self._coll(prog, rank, it, row, "wg", layer.wg, False,
                                        layer.update_ns)
                if pending_id:
                    pending[row] = pending_id
                if row > 0:
                    self._compute(prog, layer.ig_ns, f"it{it}.L{row}.ig")
                    self._coll(prog, rank, it, row, "ig", layer.ig, True, layer.update_ns)
                continue
            if row in self.initiates:
                start = max([c for c in self.checkpoints if lo <= c <= row], default=lo)
                self._forward(prog, rank, it, start, row, {}, tag="rfwd")
            self._compute(prog, layer.ig_ns, f"it{it}.L{row}.ig")
            self._coll(prog, rank, it, row, "ig", layer.ig, True, layer.update_ns)
            self._compute(prog, layer.wg_ns, f"it{it}.L{row}.wg")
            pending_id = self._coll(prog, rank, it, row, "wg", layer.wg, False, layer.update_ns)
            if pending_id:
                pending[row] = pending_id

    def _pipeline(self, prog, rank, it, pending):
        """One iteration of a stage: prefix forward, the blocks 1F1B, suffix forward and
        backward, prefix backward (module docstring)."""
        lay = self.layout
        pre = (0, len(lay.prefix))
        suf = (lay.suffix[0], lay.suffix[-1] + 1) if lay.suffix else None
        self._forward(prog, rank, it, *pre, pending)
        self._one_f_one_b(prog, rank, it, pending)
        if suf:
            self._forward(prog, rank, it, *suf, pending)
            self._backward(prog, rank, it, *suf, pending)
        self._backward(prog, rank, it, *pre, pending)

    def _one_f_one_b(self, prog, rank, it, pending):
        pp = self.w.parallel["pp"]
        segs = [(b[0], b[-1] + 1) for b in self.layout.blocks]
        m_count = len(segs)
        p = rank // self.stage
        warm = min(pp - p - 1, m_count)
        order = [("F", m) for m in range(warm)]
        for i in range(m_count - warm):
            order += [("F", warm + i), ("B", i)]
        order += [("B", m) for m in range(m_count - warm, m_count)]
        prev, nxt = rank - self.stage, rank + self.stage
        for what, m in order:
            lo, hi = segs[m]
            if what == "F":
                if p > 0:
                    self._p2p(prog, "recv", f"it{it}.mb{m}.act.{prev}>{rank}", rank, prev)
                self._forward(prog, rank, it, lo, hi, pending)
                if p < pp - 1:
                    self._p2p(prog, "send", f"it{it}.mb{m}.act.{rank}>{nxt}", rank, nxt)
            else:
                if p < pp - 1:
                    self._p2p(prog, "recv", f"it{it}.mb{m}.grad.{nxt}>{rank}", rank, nxt)
                self._backward(prog, rank, it, lo, hi, pending)
                if p > 0:
                    self._p2p(prog, "send", f"it{it}.mb{m}.grad.{rank}>{prev}", rank, prev)

    def _p2p(self, prog, op, pid, rank, peer):
        size = self.w.parallel["pp_comm"]
        scaled = max(1, round(size / self.scale)) if size else 0
        prog.append({"op": op, "id": pid, "peer": peer, "bytes": scaled})
        if op == "send":
            s = self.summary["PP"]
            s["collectives"] += 1
            s["bytes"] += size
            s["scaled_bytes"] += scaled
            fabric = self.placement[rank].host != self.placement[peer].host
            s["fabric" if fabric else "local"] += 1
            s["fabric_bytes"] += scaled if fabric else 0

    def _coll(self, prog, rank, it, row, tag, coll, blocking, update_ns):
        """Append the collective's op (shared by its members); return its id or None."""
        if coll is None:
            return None
        kind, group, size = coll
        gi, members = self.index[group][rank]
        skipped = self.summary["skipped"]
        first = rank == members[0]
        if self.w.policy == "DATA" and tag != "wg":
            skipped["policy"] += first
            return None
        if len(members) < 2 or size == 0:
            skipped["single_member" if len(members) < 2 else "zero_bytes"] += first
            return None
        if tag in ("fwd", "rfwd") and self.w.policy == SUPPORTED[0]:
            size = max(size, SIMAI_MIN_FWD_BYTES)
        cid = f"it{it}.L{row}.{tag}.{group}{gi}"
        op = self.ops.get(cid)
        if op is None:
            op = self.ops[cid] = self._make(cid, kind, group, members, size, blocking,
                                            update_ns, f"L{row}.{tag}.{group}")
        prog.append(op)
        return cid

    def _make(self, cid, kind, group, members, size, blocking, update_ns, key):
        pl = self.placement
        ring = sorted(members, key=lambda m: (self.host_order[pl[m].host], pl[m].nic_index, m))
        eps = {}
        for m in ring:
            eps.setdefault((pl[m].host, pl[m].nic.port), []).append(m)
        counts = [len(v) for v in eps.values()]
        fabric = len({pl[m].host for m in ring}) > 1
        scaled = max(1, round(size / self.scale))
        nbytes, shared = scaled, [len(ring)]
        if fabric:
            nbytes, shared = max(1, round(fabric_size(kind, scaled, counts))), counts
            chunk = nbytes / len(eps)
            self.chunks.append(chunk)
            if chunk < MIN_CHUNK_FRAMES * self.mtu:
                self.latency_bound.add(key)
            if len(eps) > len({h for h, _ in eps}):
                self.summary["intra_host_network"] += 1
        nvlink = local_bytes(kind, scaled, shared) * 8 / self.nvlink * 1e9
        op = {"op": "coll", "id": cid, "kind": kind, "group": group, "members": ring,
              "bytes": nbytes, "blocking": blocking,
              "local_ns": round(nvlink + update_ns * self.stretch), "fabric": fabric}
        s = self.summary[group]
        s["collectives"] += 1
        s["bytes"] += size
        s["scaled_bytes"] += scaled
        s["fabric" if fabric else "local"] += 1
        s["fabric_bytes"] += nbytes if fabric else 0
        return op
