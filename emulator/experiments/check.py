"""Checks a controller app can be held to, on a running fabric (like Faucet's test library).

Model.  Every check is a plain function taking a ``Session`` and returning a
``Result`` (``ok``, a one-line ``detail``, ``data`` for assertions), so it is
usable from pytest (``assert check.reachability(s).ok``) and from the command
line (``python -m emulator check``, which prints ``PASS``/``FAIL`` per check
and exits 1 if any failed).  Everything is measured on the real fabric:

* ``reachability``: every ordered host pair answers a ping (retried a few
  rounds: a check, not a convergence wait);
* ``flow_path``: N UDP datagrams with one exact 5-tuple are sent from a host's
  namespace to a sink in the destination's; the switch ports whose TX packet
  counters moved by >= 90% of N, walked hop by hop from the source's switch,
  are the path (which uplinks, which spine).  Nothing else may send meanwhile;
* ``cut_loss``: a probe of several RoCEv2 flows (the traffic engine's
  ``send``/``recv``) runs while one link is cut (both veth ends set down over
  netlink) and the link is restored afterwards.  The probe pair is chosen so
  that flows cross the link (measured with counters first).  The loss window of
  a flow is its lost packets / its packet rate; the check passes when the worst
  flow's window is within ``max_loss_ms``.
"""

import json
import os
import select
import sys
import time
from dataclasses import dataclass, field

from emulator.dataplane.faults import nic_of
from emulator.dataplane.observe.reach import ping_round
from emulator.dataplane.session import REPO, Session, write_json
from emulator.dataplane.system.netlink import ns_sockets
from emulator.dataplane.system.proc import PIPE, Child, TimedOut, attempt
from emulator.errors import ConfigError, RunFailed
from emulator.experiments.measure.watch import Watch
from emulator.experiments.spec.fabric import add_fabric_args
from emulator.experiments.spec.options import add_control_args
from emulator.fabric import addressing
from emulator.fabric.addressing import home_leaf
from emulator.fabric.routing.addresses import next_hop_mac
from emulator.report import files as reports
from traffic.roce.frames import udp_sport

ROCE_PORT = 4791

# A UDP sink: prints "ready" once bound, then the number of datagrams it got
# (stops at N or after an idle timeout).  Binding also stops ICMP errors.
SINK = """import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.settimeout(float(sys.argv[3]))
print("ready", flush=True)
n, want = 0, int(sys.argv[2])
try:
    while n < want:
        s.recv(4096)
        n += 1
except socket.timeout:
    pass
print(n, flush=True)
"""
# Sends N datagrams per source port, paced in small bursts so no shaper drops.
SENDER = """import socket, sys, time
src, dst, dport, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for sport in map(int, sys.argv[5:]):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, sport))
    for i in range(n):
        s.sendto(b"fabric-lab-check" + bytes(48), (dst, dport))
        if i % 16 == 15:
            time.sleep(0.002)
    s.close()
"""


@dataclass
class Result:
    name: str
    ok: bool
    detail: str
    data: dict = field(default_factory=dict)

    def line(self):
        return f"{'PASS' if self.ok else 'FAIL'} {self.name}: {self.detail}"

    def as_dict(self):
        return {"check": self.name, "ok": self.ok, "detail": self.detail, "data": self.data}


# ---- reachability --------------------------------------------------------------

def reachability(session, rounds=3):
    """Every ordered host pair answers a ping (failed pairs retried ``rounds`` times)."""
    names = [h["name"] for h in session.topo["hosts"]]
    todo = {(a, b) for a in names for b in names if a != b}
    total = len(todo)
    for _ in range(rounds):
        todo -= ping_round(session.net, sorted(todo))
        if not todo:
            break
    shown = ", ".join(f"{a}->{b}" for a, b in sorted(todo)[:6])
    detail = f"{total - len(todo)}/{total} host pairs answer" + (f"; not: {shown}" if todo else "")
    return Result("reachability", not todo, detail,
                  {"pairs": total, "unreachable": sorted(todo)})


# ---- path of one flow -----------------------------------------------------------

def _host(topo, name):
    for h in topo["hosts"]:
        if h["name"] == name:
            return h
    raise ConfigError("check", f"unknown host {name!r}")


def _in_ns(session, host, script, *args):
    return ["mnexec", "-a", str(session.net.hosts[host].pid), sys.executable, "-c", script,
            *map(str, args)]


def send_udp(session, src, dst, sports, packets, dport=ROCE_PORT, timeout=30):
    """Send ``packets`` datagrams per source port src->dst into a sink.

    Returns (per-interface TX packet deltas, datagrams the sink received).
    """
    topo = session.topo
    src_ip, dst_ip = _host(topo, src)["ip"], _host(topo, dst)["ip"]
    want = packets * len(sports)
    sink = Child.start(_in_ns(session, dst, SINK, dport, want, 1.0), f"UDP sink in {dst}",
                       stdout=PIPE, stderr=PIPE, text=True)
    try:
        if not select.select([sink.stdout], [], [], 30)[0] or \
                sink.stdout.readline().strip() != "ready":      # the sink is bound
            raise RunFailed(f"UDP sink in {dst} did not start: {sink.stderr.read().strip()}")
        before = session.net.intf_counters()
        r = attempt(_in_ns(session, src, SENDER, src_ip, dst_ip, dport, packets, *sports),
                    timeout=timeout)
        if r.returncode != 0:
            raise RunFailed(f"UDP sender in {src} exited {r.returncode}: {r.stderr.strip()}")
        out, err = sink.communicate(timeout=timeout)
        after = session.net.intf_counters()
    except TimedOut:
        raise RunFailed(f"UDP probe {src}->{dst} did not finish in {timeout}s")
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait(timeout=10)
        sink.stdout.close()
        sink.stderr.close()
    if sink.returncode != 0:
        raise RunFailed(f"UDP sink in {dst} exited {sink.returncode}: {err.strip()}")
    deltas = {i: after[i][2] - before[i][2] for i in before
              if before[i] is not None and after.get(i) is not None}
    return deltas, int(out.split()[-1])


def walk(topo, src, deltas, threshold):
    """Hops from ``src``'s switch along ports whose TX moved >= threshold."""
    by_name = {sw["name"]: sw for sw in topo["switches"]}
    node, prev, hops = _host(topo, src)["ports"][0]["switch"], src, []
    for _ in range(len(by_name) + 1):
        moved = [p for p in by_name[node]["ports"]
                 if deltas.get(p["intf"], 0) >= threshold and p["peer"] != prev]
        if not moved:
            return hops, f"packets stopped at {node}"
        p = max(moved, key=lambda q: deltas[q["intf"]])
        hops.append({"switch": node, "port": p["port"], "peer": p["peer"],
                     "tx_packets": deltas[p["intf"]]})
        if p["peer_kind"] == "host":
            return hops, None
        prev, node = node, p["peer"]
    return hops, "loop: more hops than switches"


def flow_path(session, src, dst, sport, packets=200, dport=ROCE_PORT):
    """Which ports a UDP flow src:sport -> dst:dport takes, read from counters."""
    deltas, got = send_udp(session, src, dst, [sport], packets, dport=dport)
    threshold = max(1, int(packets * 0.9))
    hops, problem = walk(session.topo, src, deltas, threshold)
    path = [src] + [h["switch"] for h in hops] + ([hops[-1]["peer"]] if hops else [])
    text = " -> ".join([src] + [f"{h['switch']}:eth{h['port']}" for h in hops]
                       + ([hops[-1]["peer"]] if hops and not problem else []))
    ok = problem is None and path[-1] == dst and got >= threshold
    detail = f"{text} ({got}/{packets} delivered)"
    if problem:
        detail += f"; {problem}"
    elif path[-1] != dst:
        detail += f"; delivered to {path[-1]}, not {dst}"
    name = f"path {src}->{dst} udp {sport}->{dport}"
    return Result(name, ok, detail, {"path": path, "hops": hops, "received": got,
                                     "sent": packets})


# ---- a link cut under a probe -----------------------------------------------------

def parse_link(text, topo):
    """``leaf1-spine1`` (or ``leaf1:spine1``) -> [(switch, port entry) per switch end]."""
    sep = ":" if ":" in text else "-"
    a, _, b = text.partition(sep)
    nic = nic_of(topo)
    switches = {s["name"]: s for s in topo["switches"]}
    for x, y in ((nic.get(a, a), nic.get(b, b)), (nic.get(b, b), nic.get(a, a))):
        if x in switches:
            for p in switches[x]["ports"]:
                if p["peer"] == y:
                    ends = [(x, p)]
                    if y in switches:
                        ends.append((y, next(q for q in switches[y]["ports"]
                                             if q["port"] == p["peer_port"])))
                    return ends
    raise ConfigError("--cut", f"{text!r}: no link between {a!r} and {b!r} "
                               "(write it as NODE-NODE, e.g. leaf1-spine1)")


def set_link(ends, state, net):
    """Set both switch-side interfaces of a link up or down (netlink, in the
    namespaces of their switches' Open vSwitch)."""
    with ns_sockets() as sock:
        for sw, p in ends:
            ipr = sock(net.switch_netns(sw))
            idx = ipr.link_lookup(ifname=p["intf"])
            if not idx:
                raise RunFailed(f"interface {p['intf']} is gone")
            ipr.link("set", index=idx[0], state=state)


def probe_sports(qps, first_qpn=0x100):
    """The UDP source ports of the traffic engine's flows (traffic.roce.frames.udp_sport)."""
    return [udp_sport(q, q) for q in range(first_qpn, first_qpn + qps)]


def choose_probe(session, ends, qps, packets=40):
    """(src, dst, flows crossing the link): the host pair whose probe crosses most."""
    topo = session.topo
    names = {n for n, _ in ends} | {p["peer"] for _, p in ends}
    hosts = topo["hosts"]
    # hosts next to the link: a bonded host hangs from its NIC switch and its ToRs
    near = [h for h in hosts if names & ({p["switch"] for p in h["ports"]} | {
        m["switch"] for m in h.get("bond", {}).get("members", [])})] or hosts
    link_intfs = [p["intf"] for _, p in ends]
    best = None
    for src in near[:2]:
        for dst in [h for h in hosts if home_leaf(h) != home_leaf(src)]:
            deltas, _ = send_udp(session, src["name"], dst["name"], probe_sports(qps), packets)
            crossing = round(sum(deltas.get(i, 0) for i in link_intfs) / packets)
            if best is None or crossing > best[2]:
                best = (src["name"], dst["name"], crossing)
            if crossing >= qps / 2:
                return best
    return best


def _finish(p, timeout, what):
    try:
        out, err = p.communicate(timeout=timeout)
    except TimedOut:
        p.kill()
        p.communicate(timeout=10)
        raise RunFailed(f"{what} did not finish within {timeout:.0f}s")
    if p.returncode != 0:
        raise RunFailed(f"{what} exited {p.returncode}: {(err or b'').decode()[-300:].strip()}")


def cut_loss(session, link, probe=None, qps=8, pps=250, before=1.5, after=3.0,
             max_loss_ms=100.0, frame_len=256):
    """Cut ``link`` under a ``qps``-flow probe at ``pps`` per flow; worst loss window."""
    topo, net = session.topo, session.net
    ends = parse_link(link, topo)
    if probe:
        src, dst = probe
        crossing = None
    else:
        src, dst, crossing = choose_probe(session, ends, qps)
        if not crossing:
            return Result(f"cut {link}", False, "no probe flow crosses this link: nothing "
                          "to measure (is the link on any path?)", {"crossing": 0})
    s, d = _host(topo, src), _host(topo, dst)
    work = os.path.join(session.dir, "check")
    os.makedirs(work, exist_ok=True)
    tag = f"{link.replace(':', '-')}-{time.monotonic_ns()}"
    ready, rx_out, tx_out = (os.path.join(work, f"{tag}.{x}") for x in ("ready", "recv", "send"))
    py = [sys.executable, "-m", "traffic"]
    duration = before + after
    recv = net.popen_in(dst, py + ["recv", "--intf", d["ports"][0]["port"], "--idle", "1.0",
                                   "--deadline", str(duration + 20), "--no-timeline",
                                   "--ready-file", ready, "--out", rx_out], cwd=REPO)
    send = None
    cut = False
    watch = Watch(session)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(ready):
            if recv.poll() is not None or time.monotonic() > deadline:
                raise RunFailed(f"probe receiver in {dst} did not start")
            time.sleep(0.02)
        watch.start()
        send = net.popen_in(src, py + [
            "send", "--intf", s["ports"][0]["port"], "--src-ip", s["ip"], "--dst-ip", d["ip"],
            "--dst-mac", next_hop_mac(s["ports"][0], d["ports"][0]), "--qps", str(qps),
            "--pps", str(pps * qps),
            "--duration", str(duration), "--frame-len", str(frame_len), "--out", tx_out],
            cwd=REPO)
        # Wait for the probe to flow (the sender takes a moment to start), then
        # the cut is scheduled on the clock: ``before`` s into the flowing probe.
        src_intf = next(p["intf"] for sw in topo["switches"] for p in sw["ports"]
                        if p["peer"] == src)
        base = net.intf_counters()[src_intf][1]
        deadline = time.monotonic() + 20
        while net.intf_counters()[src_intf][1] - base < qps:
            if send.poll() is not None or time.monotonic() > deadline:
                raise RunFailed(f"probe sender in {src} sent nothing "
                                f"(exit status {send.poll()})")
            time.sleep(0.005)
        t_start = time.monotonic()
        while time.monotonic() < t_start + before:
            if send.poll() is not None:
                raise RunFailed(f"probe sender in {src} exited {send.returncode} early")
            time.sleep(0.01)
        set_link(ends, "down", net)
        cut = True
        _finish(send, duration + 30, f"probe sender in {src}")
        _finish(recv, 40, f"probe receiver in {dst}")
        watch.stop()
    finally:
        if cut:
            set_link(ends, "up", net)
        for p in (send, recv):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    with open(tx_out) as f:
        sent = json.load(f)["per_flow"]
    with open(rx_out) as f:
        received = {fl["flow"]: fl for fl in json.load(f)["flows"]}
    flows = []
    for key, n_sent in sorted(sent.items()):
        got = received.get(key, {})
        lost = max(0, n_sent - got.get("received_packets", 0))
        rate = n_sent / duration if duration else 0
        flows.append({"flow": key, "sent": n_sent, "received": got.get("received_packets", 0),
                      "lost": lost, "loss_ms": round(lost / rate * 1000, 1) if rate else None,
                      "longest_disruption_ms": got.get("longest_disruption_ms", 0)})
    worst = max((f["loss_ms"] or 0) for f in flows) if flows else None
    fid = watch.verdict(sum(sent.values()), lost=sum(f["lost"] for f in flows),
                        faulted={f"{sw}->{p['peer']}" for sw, p in ends})
    hit = sum(1 for f in flows if f["lost"])
    ok = bool(flows) and worst <= max_loss_ms
    crossed = f"{crossing} crossed it before the cut, " if crossing is not None else ""
    detail = (f"probe {src}->{dst}, {len(flows)} flows x {pps} pps ({crossed}{hit} lost "
              f"packets): worst loss window {worst:.1f} ms (limit {max_loss_ms:g} ms), "
              f"{sum(f['lost'] for f in flows)} packets lost; {fid['verdict']}")
    if fid["verdict"] != "faithful":
        ok = False
        detail += f" ({'; '.join(fid['reasons'])})"
    return Result(f"cut {link}", ok, detail,
                  {"src": src, "dst": dst, "crossing": crossing, "worst_loss_ms": worst,
                   "max_loss_ms": max_loss_ms, "flows": flows, "before_s": before,
                   "after_s": after, "fidelity": fid})


# ---- command line -----------------------------------------------------------------

def add_arguments(p):
    """``emulator check``'s options."""
    add_fabric_args(p)
    p.add_argument("--controller", default="builtin",
                   help="builtin (default), app:PATH.py or remote:HOST:PORT")
    add_control_args(p)
    p.add_argument("--reachability", action="store_true",
                   help="all-pairs ping (the default when no other check is given)")
    p.add_argument("--path", action="append", default=[], metavar="SRC:DST:SPORT",
                   help="the path of UDP SRC:SPORT -> DST:4791, e.g. h1:h5:49152; repeatable")
    p.add_argument("--cut", action="append", default=[], metavar="LINK",
                   help="cut LINK (e.g. leaf1-spine1) under a probe; repeatable")
    p.add_argument("--max-loss-ms", type=float, default=100.0,
                   help="--cut passes when the worst probe flow lost at most this (ms)")
    p.add_argument("--reach-timeout", type=float, default=30.0,
                   help="seconds the fabric may take to become reachable")
    p.add_argument("--datapath", choices=("auto", "kernel", "user"), default="auto")
    p.add_argument("--results", default="results", metavar="DIR")


def parse_path(text):
    parts = text.split(":")
    if len(parts) != 3 or not parts[2].isdigit() or not 0 < int(parts[2]) < 65536:
        raise ConfigError("--path", f"{text!r} is not SRC:DST:UDP_SPORT (e.g. h1:h5:49152)")
    return parts[0], parts[1], int(parts[2])


def run_checks(session, args):
    """The checks ``args`` asks for, in order; a list of Results."""
    results = []
    if args.reachability or not (args.path or args.cut):
        results.append(reachability(session))
    for text in args.path:
        src, dst, sport = parse_path(text)
        results.append(flow_path(session, src, dst, sport))
    for link in args.cut:
        results.append(cut_loss(session, link, max_loss_ms=args.max_loss_ms))
    return results


def main(spec, args, out=print):
    """``emulator check``: build, check, print PASS/FAIL lines; 0 if all passed."""
    # Bad arguments fail before anything is built.
    plan = addressing.plan(spec.fabric)
    for text in args.path:
        src, dst, _ = parse_path(text)
        _host(plan, src), _host(plan, dst)
    for link in args.cut:
        parse_link(link, plan)
    if spec.controller.startswith("app:") and not os.path.isfile(spec.controller[4:]):
        raise ConfigError("--controller", f"{spec.controller[4:]}: no such app file")
    results = []
    session = Session(spec, progress=lambda m: out(f"... {m}"))
    try:
        with session:
            results = run_checks(session, args)
            for r in results:
                out(r.line())
    except RunFailed as e:
        if "unreachable" not in str(e):
            raise
        results.append(Result("reachability", False, f"the fabric never became reachable: {e}"))
        out(results[-1].line())
    finally:
        if getattr(session, "dir", None):
            session.results["checks"] = [r.as_dict() for r in results]
            if session.results.get("reachability"):
                reports.write(session)
            write_json(os.path.join(session.dir, "results.json"), session.results)
    problems = session.results.get("controller", {}).get("problems")
    if problems:
        results.append(Result("controller log", False, f"{len(problems)} problem line(s): "
                              + problems[0][:200]))
        out(results[-1].line())
    failed = sum(1 for r in results if not r.ok)
    out(f"{len(results) - failed}/{len(results)} checks passed; results in "
        f"{getattr(session, 'dir', '-')}")
    return 1 if failed or not results else 0
