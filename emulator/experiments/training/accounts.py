"""Where the rank that ended a training job last spent its time (pure): per row and phase.

The rank's op records (``traffic.jobs.program``) run back to back from the
end of the calibration (``hops.prologue_end``) to the job's end, so every
nanosecond of its timeline is in exactly one record, and every record is
charged to exactly one cell (iteration, row of the workload file, phase):

- a compute op to the row and phase of its ``label`` (``it<k>.L<row>.<phase>``;
  a replayed forward, ``rfwd``, to the row's forward, as SimAI counts it);
- a collective (``it<k>.L<row>.<phase>.<group><i>``) to its own cell: the
  time the rank was held (exposed; 0 for a non-blocking one), the time from
  the rank issuing it to its end (SimAI's "total comm"), its real bytes
  (the file's size) and the collective's own time (from its last member's
  arrival to its end) for the bandwidths;
- a wait to the collective it waited for last (the one that ended last);
- a pipeline send or receive (``it<k>.mb<m>.act|grad``) to the ``pipeline``
  row: activations in the forward column, gradients in the input-gradient
  column (SimAI's file has no row for them; pp > 1 only).

Anything else (no label, an unknown id) goes to ``other_ns``, which the
reports print so a gap shows.  So the compute and exposed columns add up to
the rank's time, and SUM's compute is what the file's rows say, once per
row and iteration, times r/s.
"""

import re
import statistics
from dataclasses import dataclass, field

from emulator.experiments.training.hops import prologue_end
from emulator.experiments.training.job import SIMAI_MIN_FWD_BYTES, SUPPORTED
from traffic.ranks.collectives import BUSBW_FACTOR

PHASES = ("fwd", "wg", "ig")            # SimAI's column order
PIPELINE = "pipeline"
FIELDS = ("compute", "exposed", "total", "bytes", "time", "bus")
_LABEL = re.compile(r"^it(\d+)\.L(\d+)\.(r?fwd|ig|wg)(?:\.|$)")
_P2P = re.compile(r"^it(\d+)\.mb\d+\.(act|grad)\.")
GB = 2 ** 30                            # SimAI's GBps: bytes / 2^30 per second


@dataclass
class Cell:
    """One (iteration, row, phase): ns emulated, bytes real; ``bus``: bytes x busbw factor."""

    compute: int = 0
    exposed: int = 0
    total: int = 0
    bytes: int = 0
    time: int = 0
    bus: float = 0.0

    def add(self, other):
        for f in FIELDS:
            setattr(self, f, getattr(self, f) + getattr(other, f))


@dataclass
class Accounts:
    """The critical rank's time, cell by cell (module docstring)."""

    rank: int
    start_ns: int                # the end of the calibration
    end_ns: int                  # the rank's (and the job's) end
    iterations: int
    cells: dict = field(default_factory=dict)     # (it, row, phase) -> Cell
    other_ns: int = 0

    def cell(self, it, row, phase):
        return self.cells.setdefault((it, row, phase), Cell())

    def rows(self, names):
        """Row keys in report order: the file's rows, then ``pipeline`` if it was used."""
        keys = list(range(len(names)))
        return keys + ([PIPELINE] if any(k[1] == PIPELINE for k in self.cells) else [])


def account(job, result):
    """``Accounts`` of the rank that ended the job last."""
    last = max(result["ranks"], key=lambda r: r["end_ns"] or 0)
    coll = {c["id"]: c for c in result["collectives"]}
    start = prologue_end(result)
    acc = Accounts(last["rank"], start, last["end_ns"] or start, job.options.iterations)
    for rec in last["ops"]:
        if rec.get("end_ns") is None or rec["start_ns"] < start:
            continue
        span = rec["end_ns"] - rec["start_ns"]
        if rec["op"] == "compute":
            m = _LABEL.match(rec.get("label") or "")
            if not m:
                acc.other_ns += span
                continue
            acc.cell(int(m[1]), int(m[2]), _phase(m[3])).compute += span
            continue
        ids = [rec["id"]] if "id" in rec else list(rec.get("ids", ()))
        cid = max(ids, key=lambda i: coll.get(i, {}).get("end_ns") or 0) if ids else ""
        where = _where(cid)
        if where is None:
            acc.other_ns += span
            continue
        c = acc.cell(*where)
        c.exposed += span
        if rec["op"] == "wait":
            continue
        inst = coll.get(cid, {})
        if rec.get("done_ns") is not None:     # a receive whose transfer ended before
            c.total += max(0, rec["done_ns"] - rec["start_ns"])     # it: 0
        real = _real_bytes(job, where)
        c.bytes += real
        if inst.get("time_s"):
            c.time += round(inst["time_s"] * 1e9)
            factor = 1.0 if inst["kind"] == "p2p" else \
                BUSBW_FACTOR[inst["kind"]](len(inst["members"]))
            c.bus += real * factor
    return acc


def _phase(tag):
    return "fwd" if tag.endswith("fwd") else tag


def _where(cid):
    m = _LABEL.match(cid)
    if m:
        return int(m[1]), int(m[2]), _phase(m[3])
    m = _P2P.match(cid)
    if m:
        return int(m[1]), PIPELINE, "fwd" if m[2] == "act" else "ig"
    return None


def _real_bytes(job, where):
    """The file's size of the collective (SimAI's 4096-byte forward floor applied), the
    pipeline's ``pp_comm`` for a transfer."""
    _, row, phase = where
    if row == PIPELINE:
        return job.workload.parallel["pp_comm"]
    coll = job.workload.layers[row].phase(phase)[1]
    if coll is None:
        return 0
    size = coll.bytes
    if phase == "fwd" and job.workload.policy == SUPPORTED[0]:
        size = max(size, SIMAI_MIN_FWD_BYTES)
    return size


def totals(acc):
    """{(row, phase): Cell} summed over the iterations."""
    out = {}
    for (_, row, phase), c in acc.cells.items():
        out.setdefault((row, phase), Cell()).add(c)
    return out


def medians(acc):
    """{(row, phase): {field: the median over iterations}} (a missing cell counts 0), and
    the same of each iteration's sums over the rows (``"SUM"``)."""
    its = range(acc.iterations)
    keys = {(row, phase) for (_, row, phase) in acc.cells}
    out = {}
    for key in keys:
        cells = [acc.cells.get((it, *key), Cell()) for it in its]
        out[key] = {f: statistics.median(getattr(c, f) for c in cells) for f in FIELDS}
    for phase in PHASES:
        sums = []
        for it in its:
            s = Cell()
            for (i, _, ph), c in acc.cells.items():
                if i == it and ph == phase:
                    s.add(c)
            sums.append(s)
        out[("SUM", phase)] = {f: statistics.median(getattr(c, f) for c in sums)
                               for f in FIELDS}
    return out


def summed(cells):
    """One Cell adding ``cells``."""
    out = Cell()
    for c in cells:
        out.add(c)
    return out


def bandwidths(cell, stretch, time_field="time"):
    """(algbw, busbw) in real-equivalent GB/s (SimAI's 2^30) of a cell's collectives: their
    real bytes over their time (``time``: the collectives' own; ``total``: from the rank
    issuing them, SimAI's "total comm"), divided by r/s; (0, 0) without one."""
    t = getattr(cell, time_field)
    if not t:
        return 0.0, 0.0
    seconds = t / 1e9 / stretch
    return cell.bytes / seconds / GB, cell.bus / seconds / GB
