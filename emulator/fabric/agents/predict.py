"""A drill's controller convergence under a switch-agent model, computed before it runs.

Model.  The controller's convergence after a fault is the time from the
fault to the last barrier reply of its repair push (the drill's measure,
``measure/convergence.py``).  It is the sum of:

* detection: the fault -> the controller reading the first PORT_STATUS on
  the ideal agent (the modelled loss of signal, ``--detect``, then Open
  vSwitch noticing and telling): ``Calibration.detection_ms``;
* the port event: the model's ``event_ms`` + ``latency_ms`` of the first
  switch at the fault to tell (the smallest of its ends');
* the controller's compute and sends: ``compute_ms`` and ``send_ms`` of the
  ideal agent's repair push;
* the push: every touched switch's changes (``Change``, the repair the
  controller's policy computes offline) delivered at once, each costing what
  the model says on a table holding what the switch held before the fault,
  then the controller's barriers one switch after another (dpid order), each
  answered when its switch's agent is done with it, plus what Open vSwitch
  and the controller's turn take per barrier on the ideal agent
  (``barrier_ms``, per switch);
* the tail: what the ideal agent's convergence had beyond its repair push
  (the other end's PORT_STATUS, read after the push, and its empty push).

Nothing of the run being predicted enters: ``Calibration`` comes from a
separate run of the same drill on the ideal agent (through the proxy, every
delay 0), the repair from the policy, the rest from the model.
"""

import copy
from dataclasses import asdict, dataclass

from emulator.fabric.agents.model import BARRIER, CHANGE, OTHER, Agent, Params, Table


@dataclass(frozen=True)
class Calibration:
    """Medians over the ideal agent's repeats (ms)."""

    detection_ms: float      # fault -> the first PORT_STATUS read by the controller
    compute_ms: float        # the repair push's recomputation
    send_ms: float           # its diffs sent
    barrier_ms: float        # per touched switch: its barrier's round trip and the turn
    tail_ms: float           # convergence after the repair push's last barrier reply
    repeats: int = 0

    def as_dict(self):
        return asdict(self)


def wire_messages(n, bundle_min):
    """OpenFlow messages a diff of ``n`` changes is sent as (a bundle adds its open
    and commit)."""
    return n + 2 if n >= bundle_min else n


def occupancy(changes):
    """A Table holding what ``changes`` (an installation) put in it."""
    t = Table()
    for c in changes:
        t.apply(c)
    return t


def push_ms(models, repair, tables, cal, bundle_min, t_push=0.0, t_sent=None):
    """ms at which the last barrier reply of the push reaches the controller.

    ``models``: {dpid: Params or None}; ``repair``: {dpid: [Change, ...]} in the
    order the controller sends them; ``tables``: {dpid: Table} before the push
    (copied, not changed); the diffs leave at ``t_push`` and the first barrier at
    ``t_sent`` (ms)."""
    t_sent = t_push if t_sent is None else t_sent
    agents = {}
    for dpid in sorted(repair):
        a = Agent(models.get(dpid) or Params(), copy.deepcopy(tables.get(dpid, Table())))
        msgs = repair[dpid]
        bundled = wire_messages(len(msgs), bundle_min) > len(msgs)
        if bundled:
            a.to_switch(t_push / 1e3, OTHER)
        for c in msgs:
            a.to_switch(t_push / 1e3, CHANGE, ops=[c])
        if bundled:
            a.to_switch(t_push / 1e3, OTHER)
        agents[dpid] = a
    t = t_sent / 1e3
    for dpid in sorted(agents):
        a = agents[dpid]
        answered = a.to_switch(t, BARRIER)
        t = a.to_controller(answered + cal.barrier_ms / 1e3, OTHER)
    return t * 1e3


def convergence(models, repair, tables, cal, first_to_tell, bundle_min):
    """The prediction and its parts (ms).  ``first_to_tell``: the Params (None:
    ideal) of the switches at the fault's ends; the first PORT_STATUS read is
    the one the model delays least."""
    event = min((p.event_ms + p.latency_ms if p else 0.0) for p in first_to_tell) \
        if first_to_tell else 0.0
    t_push = cal.detection_ms + event + cal.compute_ms
    t_sent = t_push + cal.send_ms
    done = push_ms(models, repair, tables, cal, bundle_min, t_push, t_sent)
    total = done + cal.tail_ms
    changes = {d: len(m) for d, m in repair.items()}
    return {"detection_ms": round(cal.detection_ms, 3), "port_event_ms": round(event, 3),
            "compute_ms": round(cal.compute_ms, 3), "send_ms": round(cal.send_ms, 3),
            "push_ms": round(done - t_sent, 3), "tail_ms": round(cal.tail_ms, 3),
            "predicted_ms": round(total, 3), "switches": len(repair),
            "changes": sum(changes.values()), "max_changes": max(changes.values(), default=0)}
