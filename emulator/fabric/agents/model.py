"""The switch-agent timing model: how long a switch's control plane takes (pure).

Model.  Between the controller and each switch sits the switch's OpenFlow
agent (the CPU, its software and the ASIC's table-programming path).  It is
described by named parameters (``Params``):

* ``latency_ms``: the control channel, each way;
* ``processing_ms``: per OpenFlow message the agent handles (every message
  but echoes, which only cross the channel);
* ``table_rate``: rule insertions per second into the table as it is (same
  priority as its neighbours, nothing to move); 0: no limit;
* ``modify_factor``: a modification (a flow's or a group's) costs this many
  insertions; a deletion or a group's addition costs one;
* ``shift_ms`` and ``shift_order``: the table's dependence on priority and
  occupancy.  A TCAM keeps its rules in priority order, so an insertion
  moves every resident rule on one side of the new rule's priority:
  ``lower`` (the resident rules of lower priority move: inserting in
  increasing priority order is the slow order), ``higher`` (decreasing order
  is slow) or ``other`` (any differing priority moves).  Each moved rule
  costs ``shift_ms``; an insertion among rules of its own priority moves
  none, so the same-priority rate does not depend on occupancy;
* ``event_ms``: from the port's state change (after carrier detection) to
  the PORT_STATUS leaving the switch;
* ``early_barrier``: the agent answers a barrier when it reads it, before
  the changes ahead of it are installed;
* ``dp_lag_ms``: a change reaches the data plane this long after the agent
  acknowledged it (a barrier behind it is answered without waiting for it).

Messages are handled one at a time, in the order they arrive (``Agent``): a
large push takes as long as its changes cost.  Messages toward the
controller leave in order too.  The agent keeps its table's priorities
(``Table``) from the changes it saw, so the cost of an insertion depends on
what was installed before it.  ``scaled`` multiplies every time (a job
drill's stretched clock).  ``Agent`` is arithmetic on times given to it
(seconds of any clock): the proxy (emulator/dataplane/ovs/agent_proxy.py)
asks it when to deliver each message.
"""

import bisect
from collections import namedtuple
from dataclasses import asdict, dataclass, replace

# OpenFlow message kinds the model tells apart (the proxy classifies them).
CHANGE, BARRIER, ECHO, PORT_STATUS, OTHER = "change", "barrier", "echo", "port_status", "other"
# what a change does to a table
ADD, MODIFY, DELETE = "add", "modify", "delete"
SHIFT_ORDERS = ("lower", "higher", "other")

# one table change: ``table`` None for a group (no priority order), ``key``
# what identifies the entry (table, priority, match; or the group id)
Change = namedtuple("Change", "op table priority key")


@dataclass(frozen=True)
class Params:
    latency_ms: float = 0.0      # control channel, each way
    processing_ms: float = 0.0   # per message the agent handles
    table_rate: float = 0.0      # insertions per second, nothing to move; 0: no limit
    event_ms: float = 0.0        # port change -> PORT_STATUS leaves the switch
    early_barrier: bool = False  # barrier answered before the changes ahead of it are in
    modify_factor: float = 1.0   # a modification costs this many insertions
    shift_ms: float = 0.0        # per resident rule an insertion moves
    shift_order: str = "lower"   # which resident rules move: lower | higher | other priority
    dp_lag_ms: float = 0.0       # acknowledged change -> in the data plane

    def scaled(self, factor):
        """Every time ``factor`` times as long (the rate that much lower)."""
        return replace(self, latency_ms=self.latency_ms * factor,
                       processing_ms=self.processing_ms * factor,
                       event_ms=self.event_ms * factor, shift_ms=self.shift_ms * factor,
                       dp_lag_ms=self.dp_lag_ms * factor,
                       table_rate=self.table_rate / factor if self.table_rate else 0.0)

    def change_ms(self, op=ADD, moved=0):
        """ms one table change takes: an insertion moving ``moved`` resident rules,
        a modification, a deletion."""
        base = 1e3 / self.table_rate if self.table_rate else 0.0
        if op == MODIFY:
            return base * self.modify_factor
        if op == ADD:
            return base + self.shift_ms * moved
        return base

    def text(self):
        extra = []
        if self.modify_factor != 1.0:
            extra.append(f"a modification costs {self.modify_factor:g} insertions")
        if self.shift_ms:
            extra.append(f"{self.shift_ms:g} ms per {self.shift_order}-priority rule an "
                         f"insertion moves")
        if self.dp_lag_ms:
            extra.append(f"data plane {self.dp_lag_ms:g} ms behind")
        return (f"channel {self.latency_ms:g} ms each way, {self.processing_ms:g} ms per "
                f"message, {self.table_rate:g} insertions/s"
                + "".join(f", {e}" for e in extra)
                + f", port events after {self.event_ms:g} ms, barrier replies "
                  f"{'early' if self.early_barrier else 'after installation'}")

    def as_dict(self):
        return asdict(self)


class Table:
    """A switch's flow tables as the agent saw them: each table's rule priorities
    (sorted), each entry's priority by key."""

    def __init__(self):
        self.prios = {}       # table -> sorted list of priorities
        self.keys = {}        # key -> (table, priority)

    def __len__(self):
        return len(self.keys)

    def moved(self, table, priority, order):
        """How many resident rules an insertion at ``priority`` moves."""
        ps = self.prios.get(table, [])
        lo, hi = bisect.bisect_left(ps, priority), bisect.bisect_right(ps, priority)
        if order == "lower":
            return lo
        if order == "higher":
            return len(ps) - hi
        return len(ps) - (hi - lo)

    def apply(self, change, order="lower"):
        """Apply ``change``; returns (op as it acts, resident rules it moves).  An
        insertion of a key already there replaces it: a modification."""
        op, table, prio, key = change
        if table is None:                         # a group: no order to keep
            return op, 0
        if op == ADD:
            if key in self.keys:
                return MODIFY, 0
            moved = self.moved(table, prio, order)
            bisect.insort(self.prios.setdefault(table, []), prio)
            self.keys[key] = (table, prio)
            return ADD, moved
        if op == DELETE and key in self.keys:
            t, p = self.keys.pop(key)
            ps = self.prios[t]
            del ps[bisect.bisect_left(ps, p)]
        return op, 0


def cost_ms(params, table, changes):
    """ms ``changes`` take on a table in the state ``table`` (which they update)."""
    total = 0.0
    for c in changes:
        op, moved = table.apply(c, params.shift_order)
        total += params.change_ms(op, moved)
    return total


class Agent:
    """One switch's agent: when each message is delivered (pure; times in seconds)."""

    def __init__(self, params, table=None):
        self.p = params
        self.table = table if table is not None else Table()
        self.busy_until = float("-inf")   # when the message being handled is done
        self.last_up = float("-inf")      # when the last message to the controller left

    def to_switch(self, t, kind, changes=0, ops=None):
        """A message from the controller reaching the channel at ``t``: the time the
        switch acts on it (its changes installed; a barrier: answered).  ``ops``:
        its changes (``Change``), else ``changes`` insertions that move nothing."""
        p = self.p
        arrive = t + p.latency_ms / 1e3
        if kind == ECHO:
            return arrive
        if kind == BARRIER and p.early_barrier:
            return arrive + p.processing_ms / 1e3
        if ops is not None:
            work = cost_ms(p, self.table, ops)
        else:
            work = changes * p.change_ms()
        start = max(arrive, self.busy_until)
        self.busy_until = start + (p.processing_ms + work) / 1e3
        if kind == CHANGE and p.dp_lag_ms:
            return self.busy_until + p.dp_lag_ms / 1e3
        return self.busy_until

    def to_controller(self, t, kind):
        """A message the switch emits at ``t``: when it reaches the controller
        (in order; a port status after the modelled event latency)."""
        extra = self.p.event_ms if kind == PORT_STATUS else 0.0
        self.last_up = max(t + (extra + self.p.latency_ms) / 1e3, self.last_up)
        return self.last_up


def predict_port_status(params):
    """ms the model adds between the switch noticing a port change and the controller
    reading it."""
    return params.event_ms + params.latency_ms
