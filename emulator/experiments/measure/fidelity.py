"""Is a measurement the network's, or the emulator's?  (pure: no I/O)

Every command that measures traffic ends with one verdict:

- **faithful**: the emulated links limited the traffic.  Frames were lost
  only where a link's own egress queue overflowed (network drops, named by
  link), and no frame waited longer than the queues on its path can hold.
- **emulator-bound**: the machine limited it.  Frames were lost outside the
  links' queues (OVS's port sockets, its send path, the kernel's backlog,
  the receivers' sockets), a sender fell behind its schedule, or frames
  were delayed beyond what the queues can cause (hidden queueing in socket
  buffers while a CPU was busy).  Frames that vanished where no counter
  looks, with no fault injected, are the emulator's too (``uncounted``):
  Open vSwitch drops a frame without counting it when its one send socket is
  full, which deep queues across the fabric can make it (a frame waiting in
  a switch port's shaper holds about twice its size of that buffer).  The figures of such a run describe this
  machine, not the fabric: the verdict says why and what to change.

The inputs are the counter deltas of ``dataplane.observe.counters.delta``, the
traffic engine's own report (``traffic.engine``) and the fabric's queue
bound.  Thresholds are parameters with defaults that a unit test pins.
"""

# An emulation drop rate below this is noise a figure can carry (1 in 10,000).
EMULATION_DROP_LIMIT = 1e-4
# Latency above the path's queue bound by more than this is not the links'.
LATENCY_SLACK_MS = 5.0
OVS_CPU_WARN = 0.85
MACHINE_BUSY_WARN = 0.95
# below it, a completion time still carries some of the CPU's delay: UET's AllReduce
# gave 0.924 at 93 % busy and 0.964 at half the rate, 81 % (docs/fidelity.md)
MACHINE_BUSY_NEAR = 0.90
# The hypervisor running other work on this VM's CPUs (steal time) stalls the
# emulator's forwarding: a few % already adds ms of latency (docs/fidelity.md).
STEAL_WARN = 0.05
# ... or this much in one 100 ms window (a stall of tens of ms: a sender falls behind).
STEAL_WINDOW_WARN = 0.10
# ... and from this share a completion time (a collective) is the host's.
STEAL_TIMING_LIMIT = 0.10


def stolen_window(windows):
    """Whether the hypervisor took STEAL_WINDOW_WARN or more in one CPU window."""
    return bool(windows) and (windows.get("max_steal") or 0) >= STEAL_WINDOW_WARN


def queue_bound_ms(topo, queue_ms):
    """The most queueing delay a frame can see: every egress queue on the longest path.

    A path crosses 2 x (highest tier) links (up and down), plus the NIC
    switch's queue at each end for dual-homed hosts; each queue holds
    ``queue_ms`` at its link's rate.
    """
    tiers = max((sw["tier"] for sw in topo["switches"] if sw.get("kind") != "nic"), default=1)
    links = 2 * tiers
    if any(sw.get("kind") == "nic" for sw in topo["switches"]):
        links += 2
    return links * queue_ms


def network_drops(by_queue, lost):
    """Frames the links lost, by link: ``lost`` split in proportion to queue drops.

    A TBF counts a drop each time a frame is refused, and OVS, refused
    (ENOBUFS), tries the same frame again: the queue counters tell *where*
    frames were lost, the receivers' exact count tells *how many*.
    """
    events = sum(by_queue.values())
    if lost is None or not events:
        return dict(by_queue)
    out, left = {}, lost
    names = sorted(by_queue, key=by_queue.get, reverse=True)
    for i, name in enumerate(names):
        share = left if i == len(names) - 1 else round(lost * by_queue[name] / events)
        share = min(share, left)
        out[name] = share
        left -= share
    return out


def verdict(sent, counters, engine=None, latency=None, bound_ms=None,
            drop_limit=EMULATION_DROP_LIMIT, slack_ms=LATENCY_SLACK_MS, frame_len=None,
            lost=None, timing=False, faulted=(), fault_drops=None):
    """The fidelity document of one measurement.

    ``sent``: packets the traffic sent; ``counters``: a counters delta;
    ``engine``: the traffic engine's ``engine`` section (None for traffic it
    did not send); ``latency``: {"p99", "max", ...} in ms of the received
    frames; ``bound_ms``: ``queue_bound_ms`` of the fabric; ``lost``: frames
    sent and never received (exact, from the receivers), when known;
    ``timing``: the measurement is a completion time (a collective), so a
    saturated machine makes it emulator-bound by itself; ``faulted``: link
    names ('leaf1->spine1') a fault took down: what OVS could not send or
    read there is the fault's doing, the network's; ``fault_drops``: of those,
    {counter key: {link: n}} the ones counted while a fault had that link down
    (a soak's windows): the rest are the emulator's.
    """
    engine = engine or {}
    faulted = set(faulted)
    at_fault, left = {}, {}
    for key in ("ovs_socket_drops", "ovs_tx_drops"):
        left[key] = {}
        for link, n in (counters.get(key) or {}).items():
            mine = 0 if link not in faulted else n if fault_drops is None \
                else min(n, (fault_drops.get(key) or {}).get(link, 0))
            if mine:
                at_fault[link] = at_fault.get(link, 0) + mine
            if n - mine:
                left[key][link] = n - mine
    emu = {
        "ovs_port_sockets": left["ovs_socket_drops"],
        "ovs_send": left["ovs_tx_drops"],
        "kernel_backlog": counters.get("softnet_drops") or 0,
        "receiver_sockets": engine.get("socket_drops", 0),
        "sender_behind_schedule": engine.get("skipped_packets", 0),
        "pause_late": sum((counters.get("pause_late_drops") or {}).values()),
    }
    emu_total = (sum(emu["ovs_port_sockets"].values()) + sum(emu["ovs_send"].values())
                 + emu["kernel_backlog"] + emu["receiver_sockets"] + emu["pause_late"]
                 + emu["sender_behind_schedule"])
    queue_events = dict(counters.get("network_drops") or {})
    for link, n in at_fault.items():         # a downed link's drops: where the fault is
        queue_events[link] = queue_events.get(link, 0) + n
    lost_in_net = None
    if lost is not None:     # what the emulator lost on the way is not the links'
        lost_in_net = max(lost - (emu_total - emu["sender_behind_schedule"]), 0)
    net = network_drops(queue_events, lost_in_net)
    emu["uncounted"] = 0
    if lost_in_net and not net:              # lost where no queue counts ...
        if faulted:                          # ... a fault's (nftables) drop
            net = {", ".join(sorted(faulted)): lost_in_net}
        else:                                # ... or inside Open vSwitch (see below)
            emu["uncounted"] = lost_in_net
            emu_total += lost_in_net
    reasons, warnings, remedies = [], [], []
    # the frames the traffic should have carried: sent, plus those a sender skipped
    base = max(sent + emu["sender_behind_schedule"], 1)
    if emu_total > drop_limit * base:
        where = [k for k, v in emu.items() if (sum(v.values()) if isinstance(v, dict) else v)]
        reasons.append(f"{emu_total} of {base} frames ({100 * emu_total / base:.2f} %) lost "
                       f"or never sent outside the links' queues ({', '.join(where)})")
        bigger = ", or bigger frames (--mtu 4096)" if frame_len and frame_len < 4000 else ""
        if emu["pause_late"]:
            remedies.append("the lossless fabric's pause model reacted later than the headroom "
                            "covers (ingress drops, pause_late): lower the load or stop other "
                            "work on the machine")
        if emu["uncounted"]:
            remedies.append("shallower queues (--queue-ms): frames queued across the fabric "
                            "exceeded Open vSwitch's send buffer (net.core.wmem_default when "
                            "it started; setup.sh sets it)")
        remedies.append("offer less load: lower the link rates (-P host_rate=..., "
                        f"-P uplink_rate=...) or use fewer hosts{bigger}")
    elif emu_total:
        warnings.append(f"{emu_total} emulation drops, below {drop_limit:.2%} of the "
                        "frames sent")
    lat = latency or {}
    if bound_ms is not None and lat.get("p99") is not None:
        limit = bound_ms + slack_ms
        if lat["p99"] > limit:
            reasons.append(f"p99 one-way latency {lat['p99']:.1f} ms exceeds the "
                           f"{bound_ms:g} ms the queues on a path can hold: frames waited "
                           "in the emulator, not in the links")
            remedies.append("the machine is saturated: lower the load or stop other work")
        elif lat.get("max") is not None and lat["max"] > limit:
            warnings.append(f"max latency {lat['max']:.1f} ms exceeds the {bound_ms:g} ms "
                            "queue bound (p99 is within it): a scheduling stall")
    stalls = engine.get("stalls") or []
    if stalls:
        warnings.append(f"the traffic engine's loop stalled {len(stalls)} time(s) for more "
                        f"than 10 ms (longest {max(ms for _, ms in stalls):.0f} ms)")
    late = engine.get("late_packets", 0)
    if late > 0.01 * base:
        warnings.append(f"{late} packets ({100 * late / base:.1f} %) left later than their "
                        "schedule allows")
    cpu = counters.get("ovs_cpu")
    if cpu is not None and cpu >= OVS_CPU_WARN:
        warnings.append(f"ovs-vswitchd used {cpu:.0%} of a core: near the userspace "
                        "datapath's budget (see `emulator calibrate`)")
    busy = counters.get("machine_busy")
    if busy is not None and busy >= MACHINE_BUSY_WARN:
        if timing:
            reasons.append(f"the machine was {busy:.0%} busy: a completion time measured "
                           "on a saturated machine is the CPU's, not the links'")
            remedies.append("fewer ranks or lower link rates (-P host_rate=...)")
        else:
            warnings.append(f"the machine was {busy:.0%} busy")
    elif busy is not None and timing and busy >= MACHINE_BUSY_NEAR:
        warnings.append(f"the machine was {busy:.0%} busy, near saturation: a completion "
                        "time then carries some of the CPU's delay (a windowed, "
                        "ACK-clocked transport's most)")
    win = counters.get("cpu_windows")
    if win and win["saturated"] and not (busy is not None and busy >= MACHINE_BUSY_WARN):
        warnings.append(f"the machine was saturated (>= {win['saturated_at']:.0%} busy) in "
                        f"{win['saturated']} of {win['windows']} {win['window_ms']} ms windows "
                        f"(longest {win['longest_saturated_ms']} ms): what happened then "
                        "carries the CPU's delay")
    steal = counters.get("machine_steal")
    if steal is not None and timing and steal >= STEAL_TIMING_LIMIT:
        reasons.append(f"the hypervisor took {steal:.0%} of this machine's CPU time "
                       "(steal): a completion time measured while other guests ran is "
                       "the host's, not the links'")
        remedies.insert(0, "run again when the host's other guests are quieter "
                        "(steal, above), or on a machine of its own")
    elif (steal is not None and steal >= STEAL_WARN) or stolen_window(win):
        warnings.append(f"the hypervisor took {steal or 0:.0%} of this machine's CPU time "
                        f"(steal; up to {(win or {}).get('max_steal') or 0:.0%} in a "
                        "100 ms window): the virtual machine stalled, which adds latency "
                        "the links did not cause")
        if reasons:
            remedies.insert(0, "run again when the host's other guests are quieter "
                            "(steal, above), or on a machine of its own")
    doc = {
        "verdict": "emulator-bound" if reasons else "faithful",
        "reasons": reasons,
        "warnings": warnings,
        "remedy": "; ".join(dict.fromkeys(remedies)) or None,
        "sent_packets": sent,
        "network_drops": {"total": sum(net.values()), "by_link": net,
                          "queue_drop_events": queue_events},
        "emulation_drops": dict(emu, total=emu_total),
        "latency_ms": lat or None,
        "queue_bound_ms": bound_ms,
        "cpu": {"ovs_vswitchd": cpu, "machine_busy": busy, "machine_steal": steal,
                "windows": win,
                "cpus": counters.get("cpus"),
                "traffic_engine": engine.get("cpu_share"),
                "engine_us_per_packet": engine.get("cpu_us_per_packet")},
    }
    return doc


def spurious_downs(doc, links, late=None):
    """``doc`` (a verdict) made emulator-bound when ports of links no fault touched went
    down meanwhile (``links``: their names): with BFD on, a session that misses three
    intervals goes down, and Open vSwitch, whose main thread forwards every port and
    holds back the BFD packets meanwhile, sent none that long -- the machine, not the
    link.  ``late``: what its log said of BFD sent late (``bfd.LateSends.read``)."""
    if not links:
        return doc
    why = "BFD missed its peer for three intervals while Open vSwitch's main thread was stalled"
    if late and late.get("late_sends"):
        why += (f" (its log: {late['late_sends']} control packets sent late, up to "
                f"{late['max_ms']} ms after due)")
    doc = dict(doc, verdict="emulator-bound",
               reasons=list(doc.get("reasons", [])) + [
                   f"links no fault touched went down ({', '.join(sorted(links))}): " + why],
               spurious_port_downs=sorted(links))
    remedy = ("offer less probe load (--pps, --qps) or a longer BFD interval (--bfd)")
    doc["remedy"] = "; ".join(x for x in (remedy, doc.get("remedy")) if x)
    return doc
