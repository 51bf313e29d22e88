"""The controller's whole desired state and a fault's repair, pure (no os-ken, no I/O).

What the running controller (``osken_app``) installs for a liveness set is
the policy's state (``policy.desired_state``) with load balancing's flows
(``lb.augment``) and a dragonfly's routing (``dragonfly.augment``) on top;
``desired`` composes them in that order, once, for both.  ``repair`` is
what a push sends when liveness changes: per switch, the diff the policy's
``diff`` orders, and whether it goes as a bundle (``BUNDLE_MIN`` messages or
more), so a drill can compute a fault's repair offline, before it runs:
``python -m controller.state`` reads {"topology": ..., "down": [[dpid, port]]}
on stdin and writes the repair and the healthy flows as JSON (``offline``).
"""

import json
import sys

from . import dragonfly, lb, policy
from .topology import from_dict

BUNDLE_MIN = 64               # a switch's diff this long goes as one bundle


def desired(topo, live, modes):
    """{dpid: SwitchState} for liveness ``live`` under ``modes`` (topology.Modes)."""
    return dragonfly.augment(topo, live, lb.augment(topo, policy.desired_state(
        topo, live, modes.failover), modes.lb), modes.routing)


def repair(topo, old_live, new_live, modes):
    """{dpid: [messages]} a push from ``old_live`` to ``new_live`` sends, in the
    controller's order; switches with nothing to change left out."""
    old = desired(topo, frozenset(old_live), modes)
    new = desired(topo, frozenset(new_live), modes)
    out = {}
    for dpid in sorted(new):
        msgs = policy.diff(old[dpid], new[dpid])
        if msgs:
            out[dpid] = msgs
    return out


def entry(msg):
    """[op, table (None: a group), priority, key] of one message, JSON-ready."""
    table = getattr(msg, "table", None)
    return [msg.command, table, getattr(msg, "priority", 0), repr(msg.key)]


def offline(doc):
    """What a drill predicts from (``python -m controller.state``): for ``doc``
    {"topology": topology.json's document, "down": [[dpid, port], ...]}, the
    repair per switch and each switch's flows before it, as ``entry`` lists."""
    topo = from_dict(doc["topology"])
    live = frozenset(topo.all_ports())
    down = {(int(d), int(p)) for d, p in doc["down"]}
    healthy = desired(topo, live, topo.modes)
    return {"repair": {str(d): [entry(m) for m in msgs]
                       for d, msgs in repair(topo, live, live - down, topo.modes).items()},
            "flows": {str(d): [entry(f) for f in sorted(st.flows, key=lambda f: -f.priority)]
                      for d, st in healthy.items()},
            "bundle_min": BUNDLE_MIN}


def main():
    """``python -m controller.state``: ``offline`` of the JSON document on stdin."""
    json.dump(offline(json.load(sys.stdin)), sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
