"""Several jobs and background flows in one job-engine document, and back (pure).

Model.  One engine process serves every job of a shared run
(``traffic.jobs``): the merged document has every endpoint once (a host's
NIC, in order of first use), every job's ranks one after another, then the
background flows' ranks (``daemons``: cut off when the jobs end).  A job's
ops keep their meaning with three changes: every instance id is prefixed
with the job's name and a slash (``a/it0.L3.fwd.TP0``: the engine counts
each flow's bytes per such owner), member and peer ranks are shifted by the
job's first rank, and after the hop calibration's barrier an ``until`` holds
the job until its start offset.

``alone(doc, owner)`` is the same document with every other owner's
programs emptied: the same endpoints in the same order, so the same QP
numbers and UDP source ports, hence the same ECMP paths, as together (the
baseline of a slowdown).  ``split(result, owner)`` cuts the engine's result
back into one owner's, as a single job's engine would have written it (ids
without the prefix, ranks from 0, the endpoints it used), so the single
job's documents, EndToEnd.csv and hop calibration apply unchanged.
"""

from traffic.jobs.config import owner_of

SEP = "/"


def endpoint_of(placement):
    return (placement.host, placement.nic.port)


class Merger:
    """Builds the merged document: ``add_job``, ``add_flow``, then ``document``."""

    def __init__(self):
        self.endpoints = []            # [(host, port)]
        self.rates = {}                # (host, port) -> rate_bps
        self.ranks, self.programs, self.daemons = [], [], []
        self.owners = {}               # name -> {"kind", "ranks": [global ranks]}

    def endpoint(self, host, port, rate_bps):
        key = (host, port)
        if key not in self.rates:
            self.endpoints.append(key)
            self.rates[key] = rate_bps
        return self.endpoints.index(key)

    def add_job(self, name, job_doc, placement, calibration, start_ns=0):
        """A training job: ``job_doc`` (``training.job.job_document``), its ``placement``
        and its calibration ops (``training.hops.calibration``)."""
        base = len(self.ranks)
        eps = job_doc["endpoints"]
        local = [self.endpoint(e["host"], e["port"], e["rate_bps"]) for e in eps]
        self.owners[name] = {"kind": "job", "ranks": list(range(base, base + len(placement)))}
        for r, prog in enumerate(job_doc["programs"]):
            self.ranks.append(local[job_doc["ranks"][r]])
            ops = [rename(op, name, base) for op in calibration[r]]
            if start_ns:
                ops.append({"op": "until", "ns": int(start_ns)})
            ops += [rename(op, name, base) for op in prog]
            self.programs.append(ops)

    def add_flow(self, name, kind, pairs):
        """A background flow: ``pairs`` [(src (host, port, rate), dst (...), transfers
        [(t_ns, bytes)])]: per pair a sending and a receiving daemon rank."""
        ranks = []
        for p, (src, dst, transfers) in enumerate(pairs):
            a, b = len(self.ranks), len(self.ranks) + 1
            self.ranks += [self.endpoint(*src), self.endpoint(*dst)]
            send, recv = [], []
            for k, (t_ns, nbytes) in enumerate(transfers):
                cid = f"{name}{SEP}p{p}.{k}"
                send += [{"op": "until", "ns": int(t_ns)},
                         {"op": "send", "id": cid, "peer": b, "bytes": int(nbytes)}]
                recv.append({"op": "recv", "id": cid, "peer": a, "bytes": int(nbytes)})
            self.programs += [send, recv]
            self.daemons += [a, b]
            ranks += [a, b]
        self.owners[name] = {"kind": kind, "ranks": ranks}

    def document(self):
        """{"endpoints": [{"host", "port", "rate_bps"}], "ranks", "programs", "daemons"}
        (the caller adds each endpoint's namespace and addresses) and ``owners``."""
        return {"endpoints": [{"host": h, "port": p, "rate_bps": self.rates[(h, p)]}
                              for h, p in self.endpoints],
                "ranks": list(self.ranks), "programs": self.programs,
                "daemons": list(self.daemons), "owners": self.owners}


def rename(op, owner, base):
    """``op`` of a job's program in the merged document (module docstring)."""
    op = dict(op)
    if "id" in op:
        op["id"] = f"{owner}{SEP}{op['id']}"
    if "ids" in op:
        op["ids"] = [f"{owner}{SEP}{i}" for i in op["ids"]]
    if "members" in op:
        op["members"] = [base + m for m in op["members"]]
    if "peer" in op:
        op["peer"] = base + op["peer"]
    return op


def alone(doc, owner):
    """``doc`` with only ``owner``'s programs (module docstring); daemons that no
    longer run anything are dropped from ``daemons``."""
    keep = set(doc["owners"][owner]["ranks"])
    progs = [p if r in keep else [] for r, p in enumerate(doc["programs"])]
    return dict(doc, programs=progs, daemons=[r for r in doc["daemons"] if r in keep])


def strip(cid, owner):
    return cid[len(owner) + len(SEP):] if cid.startswith(owner + SEP) else cid


def split(result, owner, ranks):
    """The engine's ``result`` as ``owner``'s own (module docstring); ``ranks``: its
    global rank indices in order."""
    index = {g: i for i, g in enumerate(ranks)}
    rows = []
    for c in result["collectives"]:
        if owner_of(c["id"]) != owner:
            continue
        c = dict(c, id=strip(c["id"], owner), members=[index[m] for m in c["members"]])
        rows.append(c)
    out_ranks, names = [], []
    for g in ranks:
        r = result["ranks"][g]
        ops = []
        for rec in r["ops"]:
            rec = dict(rec)
            if "id" in rec:
                rec["id"] = strip(rec["id"], owner)
            if "ids" in rec:
                rec["ids"] = [strip(i, owner) for i in rec["ids"]]
            ops.append(rec)
        out_ranks.append(dict(r, rank=index[g], ops=ops))
        names.append(r["endpoint"])
    used = set(names)
    eps = [e for e in result["endpoints"] if e["name"] in used]
    job = dict(result["job"], ranks=len(ranks), endpoints=len(eps), instances=len(rows),
               wrong=sum(c.get("wrong") or 0 for c in rows),
               failed_qps=[q for q in result["job"]["failed_qps"] if q["endpoint"] in used],
               end_ns=max((r["end_ns"] for r in out_ranks), default=0))
    return {"job": job, "collectives": rows, "ranks": out_ranks, "endpoints": eps,
            "engine": result["engine"]}
