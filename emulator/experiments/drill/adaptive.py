"""Drills under the switches' own adaptive routing (``--lb dlb|packet``).

Paths.  Under ``dlb`` a flow's uplink is its flowlet's, chosen by the leaf's
data plane, not the ECMP hash ``ofproto/trace`` follows: just before the fault
(``drill_traffic.repeat``'s ``before``) the leaf's flowlet slot of every probe
flow is read, and the flow's path is traced on from the switch behind that
uplink.  Under ``packet`` a flow has no one path: the hash's stays.

Local and remote.  A crossing flow whose dead link leaves the switch that
decides for it (leaving leaf1 towards spine1) is *local*: its own switch skips
the dead uplink at the next packet once the detection model says so.  A flow
that reaches the dead link from the far side (spine1 towards leaf1) is
*remote*: only a remote switch could avoid it, and nothing tells that one.
The summary splits the loss windows that way.

Reaction.  The stage timestamps, per dead port, the first decision that went
elsewhere (``evac_ns``); beside the cut's time and the detection's, that is
the data plane's reaction: from carrier loss to the first frame on another
uplink.
"""

from emulator.experiments.measure.paths import crosses, link_ends, trace_path
from emulator.experiments.measure.stats import stats
from emulator.experiments.spec import scenario
from lab.modes import LB
from traffic.roce.frames import udp_sport


class Watch:
    """The drill's view of the adaptive stage of session ``s``: probe flows
    ``pairs`` (as ``path_pairs``) with their ECMP ``paths``."""

    def __init__(self, s, pairs, paths):
        self.s = s
        self.stage = s.adaptive
        self.base = dict(paths)
        self.flows = {}
        for src, dst, first, qpns in pairs:
            hp, dp = src["ports"][0], dst["ports"][0]
            for q, qpn in enumerate(qpns):
                self.flows[f"{hp['ip']}#{first + q}"] = (src["name"], hp, dp,
                                                         udp_sport(qpn, qpn))
        self.seen = {}

    def snapshot(self):
        """Each probe flow's uplink at its first switch, as its flowlet has it now."""
        if self.stage.mode != LB.DLB:
            return
        self.seen = {k: self.stage.flowlet_port(hp["switch"], hp["ip"], dp["ip"], sport)
                     for k, (_, hp, dp, sport) in self.flows.items()}

    def paths(self, events):
        """({flow: path}, {flow: crosses}) as the data plane had them at the fault."""
        out = {}
        for k, path in self.base.items():
            port = self.seen.get(k)
            if port is None:
                out[k] = path
                continue
            name, hp, dp, sport = self.flows[k]
            out[k] = trace_path(self.s.topo, name, hp, dp, sport, self.s.net, first=port)
        return out, {k: crosses(p, events, self.s.topo) for k, p in out.items()}

    def reaction(self, evs):
        """Per dead port of this repeat: detection and the data plane's reaction."""
        cut = next((e for e in evs if e.get("detect")), None)
        if cut is None:
            return []
        entries = self.stage.entries()
        out = []
        for name in cut["detect"]["ports"]:
            e, down = entries.get(name), self.stage.downs.get(name)
            if e is None or down is None:
                continue               # not a candidate of any route here
            r = {"port": name, "detect_ms": round((down - cut["t_cut_ns"]) / 1e6, 3)}
            lost = next((c for c in self.stage.cuts if c["port"] == name
                         and c["down_ns"] == down), None)
            if lost:                 # its frames lost: decided before the cut, or after
                r["lost_before_cut_frames"] = lost["before_cut_frames"]
                r["lost_in_detection_frames"] = lost["in_detection_frames"]
                r["rescued_frames"] = lost["rescued_frames"]
                r["lost_at_egress_frames"] = lost["egress_frames"]
            if e["evac_ns"] >= down:
                r["reaction_ms"] = round((e["evac_ns"] - down) / 1e6, 3)
                r["first_elsewhere_after_cut_ms"] = round((e["evac_ns"] - cut["t_cut_ns"])
                                                          / 1e6, 3)
            out.append(r)
        f = self.stage.follower
        pushed = [e for e in (f.events if f else ()) if e["withdrawn"]
                  and e["t_ns"] >= cut["t_cut_ns"]]
        if pushed and out:           # the control plane's repair reached the stage
            out[0]["withdrawn_after_cut_ms"] = round((pushed[0]["t_ns"] - cut["t_cut_ns"])
                                                     / 1e6, 3)
        return out


def is_local(path, events, topo):
    """A crossing flow whose first switch is an end of a faulted link, and which
    leaves it by that link (its own switch decides: it can skip it)."""
    if len(path) < 2:
        return False
    leaf, port = path[1].rsplit(":", 1)
    return any((leaf, port) in link_ends(ev.target, topo) for ev in events
               if ev.action not in ("crash", "recover", scenario.CONTROLLER))


def split(repeats, events, topo):
    """The summary's ``adaptive`` part: loss windows of local and remote crossing
    flows, and the data plane's reactions."""
    local, remote, after = [], [], []
    for r in repeats:
        mine = []
        for f in r["flows"].values():
            if f["crosses"] and f.get("path"):
                (mine if is_local(f["path"], events, topo) else remote).append(f)
        local += [f["loss_window_ms"] for f in mine]
        before = sum(x.get("lost_before_cut_frames", 0) for x in r.get("adaptive", []))
        if mine and any("lost_before_cut_frames" in x for x in r.get("adaptive", [])):
            lost = sum(f["fault_lost_packets"] for f in mine)
            ms_per = sum(f["loss_window_ms"] for f in mine) / lost if lost else 0
            after.append(round(max(0, lost - before) * ms_per / len(mine), 3))
    remote = [f["loss_window_ms"] for f in remote]
    react = [x for r in repeats for x in r.get("adaptive", []) if "reaction_ms" in x]
    per_cut = ("reaction_ms", "first_elsewhere_after_cut_ms", "detect_ms",
               "withdrawn_after_cut_ms", "lost_before_cut_frames", "lost_at_egress_frames",
               "lost_in_detection_frames", "rescued_frames")
    return {"local_loss_window_ms": stats(local), "remote_loss_window_ms": stats(remote),
            **{k: stats([x[k] for x in react if k in x]) for k in per_cut},
            "local_after_cut_ms": stats(after)}


def lines(results):
    """The drill's printout of the adaptive stage, per mode that has it."""
    out = []
    for r in results:
        a = r["summary"].get("adaptive")
        if not a:
            continue

        def med(key):
            st = a[key]
            return "-" if not st else f"{st['median']:.2f} (max {st['max']:.2f}, n {st['n']})"
        out.append(f"[{r['mode']}] data-plane adaptive routing: loss window ms, flows whose "
                   f"own switch decides {med('local_loss_window_ms')}; flows only a remote "
                   f"switch could save {med('remote_loss_window_ms')}")
        out.append(f"[{r['mode']}] reaction to carrier loss: detection {med('detect_ms')} ms, "
                   f"then the first frame on another uplink after {med('reaction_ms')} ms "
                   f"(from the cut: {med('first_elsewhere_after_cut_ms')} ms)")
        if a.get("lost_before_cut_frames"):
            out.append(f"[{r['mode']}] of those flows' frames lost at the dead uplink, "
                       f"decided before the cut (still in Open vSwitch's backlog when the "
                       f"link went): {med('lost_before_cut_frames')}; their loss window "
                       f"without them: {med('local_after_cut_ms')} ms")
        if a.get("lost_at_egress_frames"):
            out.append(f"[{r['mode']}] frames lost at the dead uplink (every flow's): at its "
                       f"egress (its queue at the cut, or sent to it before the detection) "
                       f"{med('lost_at_egress_frames')}; decided towards it during the "
                       f"detection {med('lost_in_detection_frames')}")
        if a.get("rescued_frames"):
            out.append(f"[{r['mode']}] frames rescued at the dead uplink's egress (decided "
                       f"before the detection, reaching it after: sent on by another "
                       f"uplink): {med('rescued_frames')}")
        if a.get("withdrawn_after_cut_ms"):
            out.append(f"[{r['mode']}] the control plane's repair withdrew the dead path's "
                       f"candidates at the remote switches {med('withdrawn_after_cut_ms')} "
                       "ms after the cut")
    return out
