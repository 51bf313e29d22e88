"""Human-readable text: the fabric (``show``) and a run's summary."""

from emulator.fabric import lossless, units
from emulator.fabric.presets import oversubscription
from emulator.fabric.units import format_rate
from emulator.report import bgp as bgp_report
from emulator.report.training import training_lines
from lab.modes import LB, FlowControl


def _table(rows, header):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*map(str, r)) for r in rows]
    return "\n".join("  " + line for line in lines)


def describe_fabric(fabric, topo):
    kinds = {}
    for n in fabric.nodes:
        kinds[n.kind] = kinds.get(n.kind, 0) + 1
    out = [f"fabric {fabric.name}: " + ", ".join(f"{v} {k}{'s' if v > 1 else ''}"
                                                 for k, v in kinds.items())
           + f", {len(fabric.links)} links"]
    if fabric.params:
        out.append("  preset parameters: " + ", ".join(
            f"{k}={format_rate(v) if k.endswith('rate') else v}" for k, v in fabric.params))
    leaves = [n.name for n in fabric.switches if n.kind == "leaf" and fabric.uplinks(n.name)]
    if leaves:
        ratios = sorted({round(oversubscription(fabric, leaf), 3) for leaf in leaves})
        out.append("  leaf oversubscription (down:up): "
                   + ", ".join(f"{r:g}:1" for r in ratios))
    out.append("\nswitches:")
    rows = []
    for sw in topo["switches"]:
        ups = sum(1 for p in sw["ports"] if p["peer_kind"] != "host"
                  and _tier(p["peer_kind"]) > sw["tier"])
        rows.append((sw["name"], sw["kind"], sw["dpid_hex"], len(sw["ports"]), ups,
                     sw["hash_seed"]))
    out.append(_table(rows, ("name", "kind", "dpid", "ports", "uplinks", "hash seed")))
    out.append("\nhosts:")
    rows = [(h["name"], p["port"], p["ip"], p["mac"], f"{p['switch']}:eth{p['switch_port']}",
             format_rate(p["rate_bps"])) for h in topo["hosts"] for p in h["ports"]]
    out.append(_table(rows, ("host", "port", "ip", "mac", "attached to", "rate")))
    out.append("\nlinks:")
    rows = [(lk["a"], lk["b"], format_rate(lk["rate_bps"])) for lk in topo["links"]]
    out.append(_table(rows, ("a", "b", "rate")))
    if fabric.flow_control != FlowControl.NONE:
        out.append("\n" + lossless_text(topo, mode=fabric.flow_control,
                                         settings=dict(fabric.pfc)))
    return "\n".join(out)


def lossless_text(topo, roce_mtu=None, mode=FlowControl.PFC, settings=None):
    """The switch buffer thresholds of a lossless fabric, per link rate."""
    cfg = lossless.PfcConfig(mode=mode, **(settings or {}))
    frame = units.link_mtu(roce_mtu or units.ROCE_MTU) + 14
    rates = sorted({p["rate_bps"] for sw in topo["switches"] for p in sw["ports"]})
    rows = []
    for rate in rates:
        t = lossless.thresholds(rate, frame, cfg)
        ft = lossless.frame_time_s(rate, frame)
        rows.append((format_rate(rate), t["xoff"], t["xon"], t["headroom"], t["limit"],
                     f"{ft * 1e3:.3g} ms", f"{t['headroom'] / frame:.1f}"))
    what = "PFC" if mode == FlowControl.PFC else "credit-based, InfiniBand-style"
    return (f"lossless ({what}): RoCE data in priority {lossless.LOSSLESS_PRIORITY}, ACK/NAK/CNP "
            "and control frames above it; per ingress port (bytes, frames of "
            f"{frame} B):\n" + _table(rows, ("link rate", "xoff", "xon", "headroom", "limit",
                                              "frame time", "headroom frames"))
            + f"\n  headroom = {cfg.reaction_s * 1e3:g} ms of pause reaction at the link rate "
              "+ one frame in flight at each end; pause quanta "
              f"{cfg.quanta} x 512 bit times, refreshed at half; watchdog: detection "
              f"{cfg.wd_detect_s * 1e3:g} ms, restoration {cfg.wd_restore_s * 1e3:g} ms, poll "
              f"{cfg.wd_poll_s * 1e3:g} ms, action {cfg.wd_action} (docs/lossless.md)")


def _tier(kind):
    return {"host": 0, "leaf": 1, "spine": 2, "superspine": 3}.get(kind, 0)


def layout_text(layout):
    """', layout 2 (asked for): 2 Open vSwitch instances, 8 links between them'."""
    if not layout:
        return ""
    n = len(layout.get("instances") or {})
    where = (f"{n} Open vSwitch instances, {layout['crossing_links']} links between them"
             if n else "one Open vSwitch")
    return f", layout {layout['layout']} ({layout['why']}): {where}"


def servers_text(doc):
    """The lines of a run on several servers (``results["servers"]``), or []."""
    if not doc:
        return []
    parts = [f"{name} ({s['address']}) {len(s['nodes'])} nodes"
             for name, s in doc["servers"].items()]
    clocks = doc.get("clocks")
    return [f"servers: {'; '.join(parts)}; {doc['crossing_links']} links between them "
            f"(VXLAN), placement {doc['placement']}",
            "  one-way latency: " + doc["one_way_latency"]
            + (f"; clocks aligned within {clocks['error_ms']} ms" if clocks else "")]


def adaptive_text(doc):
    """The switches' adaptive routing (``results["adaptive"]``): decisions per
    switch, or ''."""
    if not doc:
        return ""
    how = (f"per flowlet, timer {doc['flowlet_frames']} frame times" if doc["mode"] == LB.DLB
           else "per packet, shortest local queue")
    lines = [f"adaptive routing in the switches ({doc['mode']}, {how}): {doc['frames']} "
             f"frames decided, {doc['flowlets']} flowlets started, {doc['moved']} moved"]
    for sw, s in sorted(doc.get("switches", {}).items()):
        ports = " ".join(f"{p}:{v['frames']}" for p, v in sorted(s["ports"].items(),
                                                                   key=lambda kv: int(kv[0])))
        react = [v["queue_reaction_ms"]["max"] for v in s["ports"].values()
                 if "queue_reaction_ms" in v]
        down = [v["down_reaction_ms"] for v in s["ports"].values() if "down_reaction_ms" in v]
        extra = (f"; hot port left within {max(react):.2f} ms" if react else "") + \
            (f"; dead port left {max(down):.2f} ms after detection" if down else "")
        lines.append(f"  {sw:<8} frames per port {ports}; flowlets {s['flowlets']}, moved "
                     f"{s['moved']}{extra}")
    return "\n".join(lines)


def pfc_text(doc):
    """One paragraph on a lossless run's PFC (``results["lossless"]``), or ''."""
    if not doc:
        return ""
    r = doc.get("reaction_frames") or {}
    t = next((v for k, v in (doc.get("thresholds") or {}).items() if k != "ports"), {})
    late = (f" ({doc['late_pause_drops']} of them the pause model's, too late: emulation "
            "drops)" if doc.get("late_pause_drops") else "")
    if doc.get("flow_control") == FlowControl.CREDIT:
        lines = [f"lossless (credit-based, priority {doc['lossless_priority']}): "
                 f"{doc['pauses']} credit stalls, longest {doc['longest_pause_s']:.3f} s; "
                 f"ingress drops {doc['ingress_drops']}{late}"]
    else:
        lines = [f"lossless (PFC, priority {doc['lossless_priority']}): {doc['pauses']} pauses "
                 f"({doc['pause_frames']} PFC frames); a port paused {doc['paused_s_max']:.3f} s "
                 f"in all at most, {doc.get('longest_pause_s', 0):.3f} s at once; ingress drops "
                 f"{doc['ingress_drops']}{late}"]
    if r.get("count"):
        stop = "credits ran out" if doc.get("flow_control") == FlowControl.CREDIT else "xoff crossed"
        lines.append(f"  pause reaction ({stop} -> upstream stopped): median "
                     f"{r['median']} / p95 {r.get('p95')} / max {r['max']} frame times over "
                     f"{r['count']} {'stalls' if stop != 'xoff crossed' else 'pauses'}; "
                     f"headroom used up to {doc['headroom_used_max']} of {t.get('headroom')} B")
    for st in doc.get("storms") or ():
        det, res = st["detected_after_s"], st["restored_after_stop_s"]
        lines.append(f"  storm by {st['end']} at {st['start']:.3f} s for "
                     f"{st['duration_s'] if st['duration_s'] is not None else '-'} s: "
                     + (f"watchdog on {st['queue']} after {det * 1e3:.0f} ms" if det is not None
                        else "no watchdog action")
                     + (f", restored {res * 1e3:.0f} ms after it stopped" if res is not None
                        else ""))
    for ev, t_s, port in doc.get("watchdog_events") or ():
        lines.append(f"  watchdog: {ev} on {port} at {t_s:.3f} s"
                     + (f" ({doc['watchdog_drops']} frames dropped while mitigating)"
                        if ev == "storm" and doc.get("watchdog_drops") else ""))
    for d in doc.get("deadlocks") or ():
        lines.append(f"  deadlock: paused queues in a cycle {' -> '.join(d['cycle'])} at "
                     f"{d['t']:.3f} s")
    if doc.get("gate_errors"):
        lines.append(f"  pause gate errors: {'; '.join(doc['gate_errors'][:3])}")
    return "\n".join(lines)


def summary(results, topo):
    r = results
    out = ["", f"== run {r['run']}: {r['fabric']} ==",
           f"datapath: {r['datapath']['type']} ({r['datapath']['reason']})"
           + layout_text(r.get("layout")),
           f"controller: {r.get('controller', {}).get('kind', '?')}"
           + (f", TLS on {r['controller']['listen']}" if r.get("controller", {}).get("tls")
              else "")] + servers_text(r.get("servers"))
    n_nic = sum(1 for s in topo["switches"] if s["kind"] == "nic")
    n_sw, n_h = len(topo["switches"]) - n_nic, len(topo["hosts"])
    nics = f" (dual-homed, {n_nic} NIC bridges)" if n_nic else ""
    t = r.get("timings", {})
    out.append(f"fabric: {n_sw} switches, {n_h} hosts{nics}, {len(topo['links'])} links; built in "
               f"{t.get('build_s', 0):.2f}s, fully reachable {t.get('time_to_reachable_s', 0):.2f}s"
               f" after start")
    reach = r.get("reachability")
    if reach:
        out.append(f"reachability: {reach['reachable']}/{reach['pairs']} host pairs "
                   f"({reach.get('checked', 'every host pair')}, ICMP echo, "
                   f"{reach['rounds']} round(s), {reach['wait_s']:.2f}s)")
    if r.get("bgp"):
        out.append(bgp_report.summary_line(r["bgp"]))
    if r.get("lossless"):
        out.append(pfc_text(r["lossless"]))
    if r.get("adaptive"):
        out.append(adaptive_text(r["adaptive"]))
    if r.get("impairments"):
        out.append("impairments from the fabric file, on after the reachability check: "
                   + "; ".join(r["impairments"]))
    traffic = r.get("traffic")
    if traffic:
        fid = traffic.get("fidelity")
        bound = fid is not None and fid["verdict"] != "faithful"
        out.append(f"\ntraffic: {traffic['description']}")
        out.append(f"  sent {traffic['sent_packets']} packets, received "
                   f"{traffic['received_packets']}, lost {traffic['dropped_packets']}, "
                   f"reordered {traffic['reordered_packets']}, "
                   f"disruptions {traffic['total_disruptions']}"
                   + ("  [EMULATOR-BOUND: not the network's behaviour]" if bound else ""))
        lat = traffic.get("latency_ms")
        if lat and lat.get("p50") is not None:
            out.append(f"  one-way latency p50 {lat['p50']} ms, p99 {lat['p99']} ms, "
                       f"max {lat['max']} ms")
        cp = traffic.get("cross_plane")
        if cp:
            out.append(f"  cross-plane: {cp['connections']} connections ({cp['flows']} flows), "
                       f"{cp['received_packets']}/{cp['sent_packets']} packets received; each "
                       "moved to the destination's rail inside the source host (NVLink hop) "
                       "and received on that rail's NIC")
        out.append("\nper-uplink load on each leaf while sending (ECMP spread over "
                   f"{traffic['window_s']:g}s):")
        rows = []
        for leaf in traffic["uplinks"]:
            loads = leaf["loads"]
            cells = " ".join(f"{u['port']}:{u['mbps']:6.2f}" for u in loads)
            rows.append((leaf["leaf"], cells, f"{leaf['max_over_mean']:.2f}"
                         if leaf["max_over_mean"] is not None else "-"))
        out.append(_table(rows, ("leaf", "uplink:Mbit/s", "max/mean")))
        if fid is not None:
            out.append("")
            out += fidelity_lines(fid)
    coll = r.get("collective")
    if coll:
        out.append(f"\n{coll['collective']} over {coll['nranks']} ranks "
                   f"(ring {coll['ring']}, {coll['qps']} QP per connection), "
                   "nccl-tests style; effic = busbw / link rate:")
        out.append(coll["table"])
        if coll.get("fidelity"):
            out.append("")
            out += fidelity_lines(coll["fidelity"])
    if r.get("training"):
        out.append("")
        out += training_lines(r["training"])
        if r["training"].get("fidelity"):
            out.append("")
            out += fidelity_lines(r["training"]["fidelity"])
    for b in r.get("background", []):
        if "error" in b:
            out.append(f"background {b.get('src')}->{b.get('dst')}: error: {b['error']}")
        else:
            extra = (f", lost {b['lost_percent']:.2f}%" if b["protocol"] == "UDP"
                     else f", {b.get('retransmits', 0)} retransmits")
            out.append(f"background {b['src']}->{b['dst']} {b['protocol']}: "
                       f"{b['bps'] / 1e6:.2f} Mbit/s{extra}")
    caps = r.get("captures")
    if caps:
        out.append("\ncaptures (pcap per interface, in the results directory):")
        out += [f"  {name}: {'?' if n is None else n} packets" for name, n in sorted(caps.items())]
    if "teardown_s" in t:
        out.append(f"\nteardown: {t['teardown_s']:.2f}s")
    out.append(f"results: {r['results_dir']}")
    return "\n".join(out)


def fidelity_lines(doc):
    """A fidelity verdict (experiments.fidelity) in a few lines, for a terminal or report.md."""
    if doc is None:
        return []
    head = doc["verdict"].upper()
    lines = [f"fidelity: {head}"]
    net = doc["network_drops"]
    emu = doc["emulation_drops"]
    lines.append(f"  network drops (link queues): {net['total']}"
                 + (f"  [{', '.join(f'{k} {v}' for k, v in sorted(net['by_link'].items()))}]"
                    if net["by_link"] else ""))
    lines.append(f"  emulation drops: {emu['total']} (OVS port sockets "
                 f"{sum(emu['ovs_port_sockets'].values())}, OVS send "
                 f"{sum(emu['ovs_send'].values())}, kernel backlog {emu['kernel_backlog']}, "
                 f"receivers {emu['receiver_sockets']}, senders behind schedule "
                 f"{emu['sender_behind_schedule']}, uncounted {emu.get('uncounted', 0)}"
                 + (f", lossless pauses too late {emu['pause_late']}" if emu.get("pause_late")
                    else "") + ")")
    lat = doc.get("latency_ms")
    if lat and lat.get("p99") is not None:
        lines.append(f"  one-way latency p50/p99/max {lat.get('p50')}/{lat.get('p99')}/"
                     f"{lat.get('max')} ms (queues on a path hold {doc['queue_bound_ms']:g} ms)")
    cpu = doc["cpu"]
    parts = []
    if cpu.get("ovs_vswitchd") is not None:
        parts.append(f"ovs-vswitchd {cpu['ovs_vswitchd']:.0%} of a core")
    if cpu.get("traffic_engine") is not None:
        parts.append(f"traffic {cpu['traffic_engine']:.0%} of a core")
    if cpu.get("machine_busy") is not None:
        parts.append(f"machine {cpu['machine_busy']:.0%} busy")
    win = cpu.get("windows")
    if win and win.get("saturated"):
        parts.append(f"saturated {win['saturated']}/{win['windows']} of its "
                     f"{win['window_ms']} ms windows")
    if cpu.get("machine_steal"):
        parts.append(f"hypervisor steal {cpu['machine_steal']:.0%}")
    if parts:
        lines.append("  cpu: " + ", ".join(parts))
    lines += [f"  why: {r}" for r in doc["reasons"]]
    lines += [f"  note: {w}" for w in doc["warnings"]]
    if doc.get("remedy"):
        lines.append(f"  remedy: {doc['remedy']}")
    if doc["verdict"] != "faithful":
        lines.append("  these figures describe this machine's limits, not the fabric's "
                     "behaviour")
    return lines


def cli_banner(session):
    lines = ["Mininet CLI on the fabric; switches are OVS bridges:"]
    for sw in session.topo["switches"]:
        lines.append(f"  {sw['name']:<10} bridge {sw['bridge']}  "
                     f"(ovs-ofctl -O OpenFlow15 dump-flows {sw['bridge']})")
    lines.append(f"topology: {session.topology_path}")
    lines.append("fabric commands: cut LINK, restore [LINK], flap LINK COUNT PERIOD, "
                 "loss LINK PERCENT, links [SECONDS], capture NODE[:PORT] | capture stop "
                 "('help cut' for more)")
    lines.append("type 'exit' or Ctrl-D to tear the fabric down")
    return "\n".join(lines)
