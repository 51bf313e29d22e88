"""The ranks' programs, op by op (pure: the caller passes the time; no sockets).

Model.  Every rank runs its ops in order on its own timeline.  ``compute``
keeps the rank busy for ``ns`` (a timer); ``until`` keeps it idle until its
timeline reaches ``ns`` (a start offset, a transfer on a schedule; at once
if it is past that already).  A ``coll`` (and each side of a
``send``/``recv`` pair) is an *instance* shared by its members: a member
reaching it *arrives*; the instance starts when the last member arrives (the
real synchronisation of a collective).  A blocking op holds its rank until the
instance ends; a non-blocking one lets the rank go on at once, and a later
``wait`` holds it until the instances it names have ended.  A ``send`` is
eager: its transfer starts when the sender reaches it, whether or not the
receiver has reached its ``recv`` yet (pipeline stages would deadlock on a
rendezvous), and holds the sender until delivered; a ``recv`` holds its rank
until the transfer has ended (at once if it already has).

An instance that needs the network is handed to the caller when it starts
(``advance`` returns it); the caller says when its network part ended
(``network_done``) and the instance ends ``local_ns`` later (its members'
NVLink hop).  Any other instance ends ``local_ns`` after it started.

Times are the ranks' own (the caller's ns since the job began): a rank
freed at t goes on from t, not from the moment the caller noticed, so the
op times do not carry the caller's wake-up granularity (the network part
does, by at most a tick; the caller reports that as lateness).  Each rank
keeps a record per op: ``start_ns`` (reached), ``end_ns`` (left); a
collective's record also has ``ready_ns`` (the instance started) and
``done_ns`` (it ended), so iteration times, compute on the critical path and
exposed communication can be read off.
"""


class Deadlock(RuntimeError):
    """No rank can go on and nothing is running: the programs wait on each other."""


class _State:
    """An instance at run time."""

    __slots__ = ("inst", "arrived", "start", "end", "launched", "net_end")

    def __init__(self, inst):
        self.inst = inst
        self.arrived = {}     # rank -> arrival time
        self.start = self.end = self.net_end = None
        self.launched = False


class JobProgram:
    """Runs ``programs`` (rank -> tuple of ``job_config.Op``) over ``instances``;
    ``daemons``: ranks whose programs need not finish (``finished``)."""

    def __init__(self, programs, instances, daemons=frozenset()):
        self.ops = programs
        self.daemons = frozenset(daemons)
        n = len(programs)
        self.st = {cid: _State(inst) for cid, inst in instances.items()}
        self.pc = [0] * n
        self.t = [0] * n                 # when each rank became free (its timeline)
        self.busy = [None] * n           # end of the rank's compute
        self.blocked = [None] * n        # the states a rank waits for
        self.records = [[] for _ in range(n)]
        self._launch = []
        self._dirty = True               # something may move (else only at ``_due``)
        self._due = None
        self.frozen = frozenset()        # ranks that take no further op (``freeze``)

    # -- what the caller does -------------------------------------------------------
    def advance(self, now):
        """Run every rank as far as it can at ``now``; returns the instances
        (``job_config.Instance``) whose network part is to start now.  Cheap
        when nothing is due: the engine calls it on every pass."""
        if not self._dirty and (self._due is None or now < self._due):
            return []
        moved = True
        while moved:
            moved = False
            for r in range(len(self.ops)):
                while r not in self.frozen and self._step(r, now):
                    moved = True
        out, self._launch = self._launch, []
        self._dirty = False
        self._due = self._next_timer()
        return out

    def freeze(self, ranks):
        """``ranks`` take no further op (daemons once the job is over: what they have
        running still ends)."""
        self.frozen = frozenset(ranks)
        self._dirty = True

    def network_done(self, cid, t):
        """The network part of ``cid`` ended at ``t``; it ends ``local_ns`` later."""
        s = self.st[cid]
        s.net_end = t
        s.end = t + s.inst.local_ns
        self._dirty = True

    def next_timer(self):
        """When a rank may go on next without the network (ns), or None."""
        return self._next_timer() if self._dirty else self._due

    def _next_timer(self):
        due = [b for r, b in enumerate(self.busy) if b is not None and r not in self.frozen]
        for r, waits in enumerate(self.blocked):
            if waits and r not in self.frozen and all(s.end is not None for s in waits):
                due.append(max(s.end for s in waits))
        return min(due, default=None)

    def finished(self):
        """Every rank is past its last op and every instance has ended; with daemons,
        every other rank is past its last op and every instance it is a member of
        has ended (the daemons' own may still run)."""
        if self.daemons:
            mine = [r for r in range(len(self.ops)) if r not in self.daemons]
            return all(self.pc[r] == len(self.ops[r]) and self.busy[r] is None
                       and not self.blocked[r] for r in mine) \
                and all(s.end is not None for s in self.st.values() if s.start is not None
                        and not set(s.inst.members) <= self.daemons)
        return all(pc == len(ops) for pc, ops in zip(self.pc, self.ops)) \
            and all(b is None for b in self.busy) and not any(self.blocked) \
            and all(s.end is not None for s in self.st.values() if s.start is not None)

    def check(self, now):
        """Raise ``Deadlock`` if nothing can happen any more (call after ``advance``)."""
        if any(b is not None for b in self.busy) or self.next_timer() is not None:
            return
        if any(s.launched and s.net_end is None for s in self.st.values()):
            return
        if self.finished():
            return
        stuck = []
        for r, waits in enumerate(self.blocked):
            if waits:
                names = ", ".join(f"{s.inst.id!r} (arrived {sorted(s.arrived)} of "
                                  f"{list(s.inst.members)})" for s in waits if s.end is None)
                stuck.append(f"rank {r} at op {self.pc[r] - 1} waits for {names}")
        never = [cid for cid, s in self.st.items() if s.arrived and s.start is None]
        # (a recv whose send never comes, a collective some member never reaches)
        if never:
            stuck.append(f"never started: {never}")
        raise Deadlock("; ".join(stuck) or "nothing left to run")

    def instance_times(self, cid):
        """(start, network end, end) of ``cid`` (None where it did not happen)."""
        s = self.st[cid]
        return s.start, s.net_end, s.end

    # -- inside -------------------------------------------------------------------------
    def _step(self, r, now):
        """One move of rank ``r`` at ``now``; False if it must wait."""
        if self.busy[r] is not None:
            if self.busy[r] > now:
                return False
            self.t[r] = self.busy[r]
            self.busy[r] = None
            self.records[r][-1]["end_ns"] = self.t[r]
            return True
        waits = self.blocked[r]
        if waits:
            if any(s.end is None for s in waits):
                return False
            end = max(s.end for s in waits)
            if end > now:
                return False
            self.t[r] = max(self.t[r], end)
            self.blocked[r] = None
            self.records[r][-1]["end_ns"] = self.t[r]
            return True
        if self.pc[r] == len(self.ops[r]):
            return False
        op = self.ops[r][self.pc[r]]
        self.pc[r] += 1
        rec = {"op": op.kind, "start_ns": self.t[r], "end_ns": None}
        self.records[r].append(rec)
        if op.kind == "compute":
            self.busy[r] = self.t[r] + op.ns
            if op.label:
                rec["label"] = op.label
            return True
        if op.kind == "until":
            self.busy[r] = max(self.t[r], op.ns)
            return True
        if op.kind == "wait":
            rec["ids"] = list(op.ids)
            self.blocked[r] = [self.st[cid] for cid in op.ids]
            return True
        rec["id"] = op.id
        s = self.st[op.id]
        s.arrived[r] = self.t[r]
        if op.kind == "send":
            self._start(s, self.t[r])           # eager: the receiver is not waited for
        elif op.kind == "coll" and len(s.arrived) == len(s.inst.members):
            self._start(s, max(s.arrived.values()))
        if op.blocking:
            self.blocked[r] = [s]
        else:
            rec["end_ns"] = self.t[r]
        return True

    def _start(self, s, t):
        s.start = t
        if s.inst.network:
            s.launched = True
            self._launch.append(s.inst)
        else:
            s.end = s.start + s.inst.local_ns

    def rank_records(self, r):
        """The op records of rank ``r``, collectives with their instance's times."""
        out = []
        for rec in self.records[r]:
            rec = dict(rec)
            if "id" in rec:
                s = self.st[rec["id"]]
                rec["ready_ns"], rec["done_ns"] = s.start, s.end
            out.append(rec)
        return out
