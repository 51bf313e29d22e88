"""The network part of one collective instance (or one send/recv pair) of a job.

Model.  ``NetRun`` runs ``collectives.schedule(kind, e, i, bytes)`` for each
of the instance's ``e`` endpoints (position i in its ring), with the
instance's tag in every frame, exactly as a rank runs one call
(``Rank.run_size``), only on NICs it shares with other instances:

- a step's sends are queued on its NIC once the receives it depends on are
  complete or timed out (``step_timeout_ns`` after the step was released),
  so a lost chunk costs a timeout, not a hang; a chunk completing later
  still counts;
- the instance ends when every receive is complete and (RC) everything its
  endpoints sent is acknowledged (each QP's cumulative ACK past the last PSN
  the instance used on it), or when everything was sent, every pending
  deadline passed and nothing of it arrived for two step timeouts: what is
  still incomplete then is missing (``#wrong``).

Its end is the last arrival of its data or its ACKs (kernel stamps), not
the moment the engine looked.  A NIC here is anything with ``out``
(``outbound.Outbound``), ``enqueue``, ``complete``, ``done`` (tag -> the
(step, peer) of chunks completed since the last look), ``corrupt``,
``unsent``, ``last_rx``, ``last_ack``, ``rc`` and ``step_timeout_ns``
(``job_nic.JobNic``; the unit tests use a fake).
"""

from traffic.ranks.collectives import Step, Transfer, schedule
from traffic.ranks.outbound import qp_key


class _Part:
    """One endpoint's share of an instance."""

    __slots__ = ("nic", "steps", "released", "deadline", "ok", "unblocked", "pending",
                 "last_psn", "got", "due")

    def __init__(self, nic, steps):
        self.nic, self.steps = nic, steps
        self.released = 0
        self.deadline = {}       # step -> when its receives time out
        self.ok, self.unblocked, self.pending = set(), set(), set()
        self.last_psn = {}       # (peer, qp) -> the last PSN this instance used on it
        self.got = set()         # (step, peer) of the chunks complete at this endpoint
        self.due = None          # the first deadline of a pending step not yet timed out

    def timeouts(self, now):
        """Unblock the pending steps whose receives timed out; True if one did."""
        if self.due is None or now < self.due:
            return False
        late = [k for k in self.pending if k not in self.unblocked and now >= self.deadline[k]]
        self.unblocked.update(late)          # timed out: their dependents go anyway
        self.due = min((self.deadline[k] for k in self.pending if k not in self.unblocked),
                       default=None)
        return bool(late)


def steps_of(inst):
    """Per endpoint of ``inst`` (in ring order), its steps with peers as endpoint indices."""
    eps = inst.endpoints
    if inst.kind == "p2p":
        src, dst = eps
        return [[Step(0, (Transfer(dst, 0, inst.nbytes),), ())],
                [Step(0, (), (Transfer(src, 0, inst.nbytes),))]]

    def mapped(ts):
        return tuple(Transfer(eps[t.peer], t.chunk, t.nbytes) for t in ts)
    return [[Step(st.index, mapped(st.sends), mapped(st.recvs), st.after)
             for st in schedule(inst.kind, len(eps), pos, inst.nbytes)]
            for pos in range(len(eps))]


class NetRun:
    """The network part of ``inst`` (``job_config.Instance``) over ``nics``."""

    def __init__(self, inst, nics, now):
        self.inst, self.tag = inst, inst.tag
        self.parts = [_Part(nics[ep], steps) for ep, steps in zip(inst.endpoints,
                                                                 steps_of(inst))]
        self.start = now
        self.end = None
        self.quiet, self.wake = False, None   # only an arrival or ``wake`` can move it
        self.end_idle = 2 * max((p.nic.step_timeout_ns(t.nbytes) for p in self.parts
                                 for st in p.steps for t in st.recvs), default=0)

    def poll(self, now):
        """Release what may go, time out what is late; True once the instance ended.

        Cheap when nothing happened: the NIC lists the chunks it completed per tag
        (``done``), so a pass looks only at what arrived and at the deadlines."""
        tag = self.tag
        if self.quiet and (self.wake is None or now < self.wake) \
                and not any(tag in p.nic.done for p in self.parts):
            return False
        self.quiet = False
        for p in self.parts:
            nic = p.nic
            new = nic.done.pop(tag, None)
            if new:
                p.got.update(new)
                got = p.got
                for k in [k for k in p.pending
                          if all((k, t.peer) in got for t in p.steps[k].recvs)]:
                    p.pending.discard(k)
                    p.ok.add(k)
                    p.unblocked.add(k)
            p.timeouts(now)
            steps = p.steps
            while p.released < len(steps) and all(d in p.unblocked
                                                   for d in steps[p.released].after):
                k = p.released
                st = steps[k]
                for t in st.sends:
                    packets = nic.out.packets(tag, k, t.peer, t.nbytes)
                    nic.enqueue(tag, packets)
                    for x in packets:
                        p.last_psn[qp_key(x)] = x[1]
                p.released += 1
                if not st.recvs:                # nothing to wait for
                    p.ok.add(k)
                    p.unblocked.add(k)
                    continue
                if all((k, t.peer) in p.got for t in st.recvs):
                    p.ok.add(k)                 # arrived before the step was released
                    p.unblocked.add(k)
                    continue
                d = p.deadline[k] = now + nic.step_timeout_ns(max(t.nbytes for t in st.recvs))
                p.pending.add(k)
                if p.due is None or d < p.due:
                    p.due = d
        if any(p.released < len(p.steps) for p in self.parts):
            self.quiet, self.wake = True, self.next_timer()
            return False
        if any(p.pending for p in self.parts):
            give_up = self._give_up()
            if now < give_up:
                self.quiet, self.wake = True, min(give_up, self.next_timer())
                return False
            if self._sending():
                return False
            self.end = now
            return True
        if self._sending():
            return False
        self.end = self._last_event(now)
        return True

    def next_timer(self):
        """When ``poll`` may have something to do without an arrival (ns), or None."""
        due = [p.due for p in self.parts if p.due is not None]
        if all(p.released == len(p.steps) for p in self.parts) and \
                any(p.pending for p in self.parts):
            due.append(self._give_up())
        return min(due, default=None)

    def _give_up(self):
        last = max([self.start] + [p.nic.last_rx.get(self.tag, 0) for p in self.parts])
        return max([last + self.end_idle] + [p.deadline[k] for p in self.parts
                                             for k in p.pending])

    def _sending(self):
        """Some packet of the instance is not yet sent, or (RC) not yet acknowledged."""
        for p in self.parts:
            nic = p.nic
            if nic.unsent.get(self.tag, 0) > 0:
                return True
            if nic.rc is not None and any(not nic.rc.acked_through(key, psn)
                                          for key, psn in p.last_psn.items()):
                return True
        return False

    def _last_event(self, now):
        """The last arrival of the instance's data, or of an ACK at a NIC it sent on."""
        seen = [p.nic.last_rx.get(self.tag) for p in self.parts]
        seen += [p.nic.last_ack for p in self.parts if p.last_psn and p.nic.rc is not None]
        seen = [t for t in seen if t is not None and t >= self.start]
        return min(max(seen), now) if seen else now

    def wrong(self):
        """(chunks missing, steps with corrupted packets), as a rank counts them."""
        missing = corrupted = 0
        for p in self.parts:
            for k, st in enumerate(p.steps):
                if k in p.ok:
                    continue
                if p.nic.corrupt.get((self.tag, k)):
                    corrupted += 1
                    continue
                missing += sum(1 for t in st.recvs if not p.nic.complete(self.tag, k, t.peer))
        return missing, corrupted
