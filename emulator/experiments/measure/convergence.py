"""Waiting on the control plane: a condition, the controller's view of a restore, and
how long the controller took to converge after a fault (its CONVERGED log lines).
"""

import time

from emulator.dataplane.session import converged_events
from emulator.errors import RunFailed
from lab.modes import Failover


def wait_for(cond, timeout, what, procs=None):
    deadline = time.monotonic() + timeout
    while not cond():
        for name, (p, _) in (procs or {}).items():
            if p.poll() is not None:
                raise RunFailed(f"{what}: process in {name} exited {p.returncode}")
        if time.monotonic() > deadline:
            raise RunFailed(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def ports_down(converged):
    """{(dpid, port)} whose latest port event in the controller's log is a down."""
    latest = {}
    for ev in converged:
        if ev.get("event") == "port" and "up" in ev:
            latest[(ev["dpid"], ev["port"])] = ev["up"]
    return {k for k, up in latest.items() if not up}


def wait_restored(s, mode, t_restore_ns, timeout=60, kind=None):
    """After a repeat: the controller acknowledged the restore (modes that listen).

    Restored means no port is down in the controller's view and, unless the
    restore was the end of a loss (``kind`` ``loss_stop``: a BFD session may
    have come back up before it, or never gone down), a port-up or a switch's
    connect pushed after the restore.
    """
    if mode == Failover.NONE or t_restore_ns is None or s.controller is None:
        return
    t0 = t_restore_ns / 1e9

    def done():
        evs = s.controller.converged()
        if ports_down(evs):
            return False
        return kind == "loss_stop" or any(
            ev.get("t_event", 0) >= t0 and (ev.get("up") or ev.get("event") == "connect")
            for ev in evs)
    wait_for(done, timeout, "the controller to converge on the restore")


def controller_convergence(log_text, t_fault, t_restore):
    """ms from the fault to the last port-down push acknowledged, and to the first event."""
    t0 = t_fault / 1e9
    end = t_restore / 1e9 if t_restore is not None else float("inf")
    done, first, last = [], [], None
    for ev in converged_events(log_text):
        if ev.get("event") == "port" and not ev.get("up") and t0 <= ev["t_event"] < end:
            done.append(ev["t_done"])
            first.append(ev["t_event"])
            if last is None or ev.get("sent", 0) > last.get("sent", 0):
                last = ev          # the push that carried the repair
    if not done:
        return None
    out = {"convergence_ms": round((max(done) - t0) * 1e3, 3),
           "first_port_status_ms": round((min(first) - t0) * 1e3, 3),
           # from the first switch telling the controller (the detection) to the last push
           "after_detection_ms": round((max(done) - min(first)) * 1e3, 3),
           "port_events": len(done)}
    # where the repair push's time went (controller/osken_app.py push), when it says
    out.update({k: last[k] for k in ("compute_ms", "send_ms", "barrier_ms", "bytes", "sent")
                if k in last})
    # the repair push: how many switches it waited on, when its last barrier came back
    out.update(touched=len(last.get("switches", [])),
               push_done_ms=round((last["t_done"] - t0) * 1e3, 3))
    return out
