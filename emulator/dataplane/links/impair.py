"""Link impairments from the fabric file, applied once the fabric is reachable.

Model.  A link of the fabric file may carry, from the start of the run:

* ``loss: 2%``: that share of frames leaving each switch end of the link is
  dropped (nftables egress, as a gray failure: no carrier loss).  On a
  host's link only the switch end drops (frames toward the host): a host's
  namespace has no nftables table of the run.
* ``state: down``: the link is cut (carrier down at both ends); the
  controller routes around it before the traffic starts.
* ``pfc_storm: h1`` (a lossless fabric): that end pauses the other forever,
  a NIC with a stuck receive pipeline (dataplane.lossless.pfc);
* ``delay: 5ms`` / ``jitter: 1ms``: netem under the link's shaper, on a
  kernel that has netem.  Without it (this project's machines) the run stops
  before anything is built, with an error naming the missing module.

The reachability check runs on the whole fabric first (it proves the
fabric works), then the impairments go on and stay until teardown.  A
fabric's drops on an impaired link are that link's own (the fidelity verdict
charges them to it, not to the emulator).  Parallel links between the same
two nodes: the impairment goes on the first of them.
"""

from emulator.dataplane.runstate import tag_of_name
from emulator.dataplane.system import tc
from emulator.errors import EnvironmentProblem


def impaired(topo):
    """[(link name for the injector, plan link)] of the links with impairments."""
    out = []
    for lk in topo["links"]:
        if lk.get("impair"):
            out.append((f"{lk['a'].split(':')[0]}:{lk['b'].split(':')[0]}", lk))
    return out


def fault_names(topo):
    """Link directions ('a->b', both ways) whose drops are an impairment's."""
    names = set()
    for _, lk in impaired(topo):
        a, b = lk["a"].split(":")[0], lk["b"].split(":")[0]
        names |= {f"{a}->{b}", f"{b}->{a}"}
    return names


def require_netem(fabric):
    """EnvironmentProblem if the fabric asks for delay/jitter and the kernel has no netem."""
    where = [f"{lk.a}-{lk.b}" for lk in fabric.links if lk.delay_s is not None]
    if not where:
        return
    missing = tc.netem_missing()
    if missing is not None:
        raise EnvironmentProblem(
            f"links {', '.join(where)} ask for delay/jitter, which needs the kernel's netem "
            f"qdisc (module sch_netem), and this kernel has none ({missing}): "
            "remove delay/jitter from the fabric file or run on a kernel with sch_netem")


def apply(session, injector, progress=lambda m: None):
    """Put every impairment of the session's fabric on; returns what was done."""
    done = []
    for name, lk in impaired(session.topo):
        imp = lk["impair"]
        if imp.get("delay_s") is not None:
            _netem(session, name, imp, injector)
            done.append(f"{name}: delay {imp['delay_s'] * 1e3:g} ms"
                        + (f" jitter {imp['jitter_s'] * 1e3:g} ms" if imp.get("jitter_s")
                           else ""))
        if imp.get("loss_pct") is not None:
            ends = injector.ends(name, "both")
            switch_sides = [side for side, (_, ifname) in zip("ab", ends)
                            if tag_of_name(ifname) is not None]
            side = "both" if len(switch_sides) == 2 else switch_sides[0]
            injector.loss_start(name, imp["loss_pct"], side, keep=True)
            done.append(f"{name}: loss {imp['loss_pct']:g} % ({side})")
        if imp.get("state") == "down":
            injector.link_down(name)
            done.append(f"{name}: down")
        if imp.get("pfc_storm"):
            a, b = (lk[k].split(":")[0] for k in ("a", "b"))
            storming = imp["pfc_storm"]
            ev = injector.pfc_storm(f"{storming}-{b if storming == a else a}", True)
            done.append(f"{name}: PFC storm from {ev['end']}")
    for line in done:
        progress(f"impairment {line}")
    return done


def _netem(session, name, imp, injector):
    """netem as the child of each end's shaper (TBF handle 1:)."""
    args = ["delay", f"{imp['delay_s'] * 1e6:.0f}us"]
    if imp.get("jitter_s"):
        args += [f"{imp['jitter_s'] * 1e6:.0f}us"]
    for netns, ifname in injector.ends(name, "both"):
        tc.add_netem(netns, ifname, args)
