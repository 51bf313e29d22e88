"""Where the routed data plane's budget goes: the sender, the routers, the shaping, eBPF.

    sudo .venv/bin/python bench/bench_routed_cost.py [--repeats 3] [--paths 3,1] [--turns a,d]

One routed fabric, the one ``emulator calibrate --control bgp`` builds (2
leaves, 1 spine, 2 hosts per leaf, 10 Gbit/s links, FRR), and the method of
``calibrate`` for every searched row: one stream of RoCEv2 frames of 4170
bytes from the Python traffic engine, the rate found by doubling and
bisection (``budget.search``), a trial passing when nothing was lost, the
fidelity verdict is faithful and p99 latency stayed within 5 ms
(``calibrate._trial``).  Paths: 3 routers (h1 -> leaf1 -> spine1 -> leaf2 ->
h3) and 1 router (h1 -> leaf1 -> h2).  The fabric is taken apart layer by
layer, so each row is the one below it plus one thing:

  a. the sender alone: the same engine stream over one veth pair from h1's
     namespace into h2's (no router, no shaper), its receiver on the far end;
  b. bare kernel forwarding: the routers with every TBF (host NICs and router
     ports) and every eBPF program removed;
  c. + the TBFs as the fabric installs them (``links.shaping``);
  d. + the eBPF programs the fabric attached: the full routed data plane, as
     ``calibrate --control bgp`` measures it.  The bench lists what is
     attached (tc filters of kind bpf, XDP) on every router and host port; when
     nothing is, c and d are one state and are measured once (printed as d);
  e. the method of the bare kernel-forwarding figure in docs (PLATFORM facts):
     one C sender (``bench/udp_blast.c``: UDP datagrams of the same frame size,
     sendmmsg in batches of 32, as fast as it can, pinned to one core) for
     ``BLAST_S`` s; the rate that reached the destination host's port (its
     rx counter), with TBFs (state d) and bare (state b).  No loss or latency
     criterion: it is a saturation rate, not a faithful one.

  f. (``--turns d,f``) d with receive packet steering on every router port
     (``rps_cpus``: every CPU), which lets the kernel forward a frame on
     another CPU than the one that received it.

``--turns a,d`` (or d,f, a,d,f) measures only those rows, one search each
per repeat and path, the rows taking turns, so that a busy spell of the host
falls on all of them.

Order otherwise: a, then d (and e with TBFs), then the programs are removed (c), then
the shapers (b, e bare); each searched row ``--repeats`` searches per path,
the paths taking turns, medians printed with every search's figure.  Run it
alone under the machine lock; it takes about 12 minutes.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.dataplane.session import Session  # noqa: E402 (after the path)
from emulator.experiments import calibrate as cal  # noqa: E402
from emulator.experiments.measure import budget  # noqa: E402
from emulator.experiments.measure.fidelity import STEAL_WARN  # noqa: E402
from emulator.experiments.workloads.mix import measure, netns_of  # noqa: E402
from emulator.fabric.routing.addresses import next_hop_mac  # noqa: E402
from emulator.fabric.runspec import RunSpec  # noqa: E402
from lab.modes import Control  # noqa: E402
from traffic.roce.frames import frame_len_for_mtu  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BLAST_S = 3.0
BLAST_PORT = 4791
ETH_IP_UDP = 14 + 20 + 8
PATHS = {"3": ("h1", "h3"), "1": ("h1", "h2")}
SINK_MACS = ("02:42:42:00:00:01", "02:42:42:00:00:02")


# ----- pure: what is attached, the arithmetic -----------------------------------------------

def udp_payload(frame_len):
    """The UDP payload of a datagram whose Ethernet frame is ``frame_len`` bytes."""
    if frame_len <= ETH_IP_UDP:
        raise ValueError(f"a {frame_len}-byte frame has no room for a UDP payload")
    return frame_len - ETH_IP_UDP


def bpf_filters(tc_json):
    """The eBPF programs among ``tc -j filter show`` output (empty text: none)."""
    return [f.get("options", {}).get("bpf_name", "?") for f in json.loads(tc_json or "[]")
            if f.get("kind") == "bpf"]


def xdp_program(ip_json):
    """The XDP program attached per ``ip -j -d link show dev X`` output, or None."""
    links = json.loads(ip_json or "[]")
    xdp = links[0].get("xdp") if links else None
    if not xdp:
        return None
    prog = xdp.get("prog") or {}
    return prog.get("name") or str(prog.get("id", "attached"))


def root_qdisc(tc_json):
    """The kind of the root qdisc per ``tc -j qdisc show dev X`` output ("none": none)."""
    for q in json.loads(tc_json or "[]"):
        if q.get("root"):
            return q["kind"]
    return "none"


def rx_packets(ip_json):
    """The received-packets counter per ``ip -j -s link show dev X`` output."""
    return json.loads(ip_json)[0]["stats64"]["rx"]["packets"]


def blast_rate(rx_before, rx_after, sent, seconds):
    """(received kpps, sent kpps) of one blast."""
    if seconds <= 0:
        raise ValueError("a blast of no time")
    return (rx_after - rx_before) / seconds / 1e3, sent / seconds / 1e3


def per_cpu(stat_text):
    """{cpuN: (busy jiffies, softirq jiffies, total jiffies)} from /proc/stat text."""
    out = {}
    for line in stat_text.splitlines():
        name, *vals = line.split()
        if name.startswith("cpu") and name != "cpu":
            v = [int(x) for x in vals[:8]]      # user nice system idle iowait irq softirq steal
            out[name] = (sum(v) - v[3] - v[4], v[6], sum(v))
    return out


def cpu_shares(before, after):
    """{cpuN: (busy share, softirq share)} between two ``per_cpu`` readings."""
    shares = {}
    for name in sorted(after):
        b, a = before[name], after[name]
        total = max(a[2] - b[2], 1)
        shares[name] = ((a[0] - b[0]) / total, (a[1] - b[1]) / total)
    return shares


# ----- the fabric's namespaces ----------------------------------------------------------------

def run_in(netns, *cmd, check=True, timeout=30):
    """``cmd`` in network namespace ``netns`` (a /proc path); its stdout."""
    r = subprocess.run(["nsenter", f"--net={netns}", *cmd], capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} in {netns}: {r.stderr.strip()}")
    return r.stdout


def ports(s):
    """[(netns, ifname, 'router'|'host')] of every port of the fabric."""
    out = []
    for sw in s.topo["switches"]:
        ns = f"/proc/{s.net.switches[sw['name']].pid}/ns/net"
        out += [(ns, p["intf"], "router") for p in sw["ports"]]
    for h in s.topo["hosts"]:
        ns = f"/proc/{s.net.hosts[h['name']].pid}/ns/net"
        out += [(ns, p["port"], "host") for p in h["ports"]]
    return out


def inventory(s):
    """{ifname: (kind, root qdisc, [eBPF programs])} of every port."""
    seen = {}
    for ns, ifname, kind in ports(s):
        progs = []
        for hook in ("ingress", "egress"):
            progs += bpf_filters(run_in(ns, "tc", "-j", "filter", "show", "dev", ifname, hook,
                                        check=False))
        xdp = xdp_program(run_in(ns, "ip", "-j", "-d", "link", "show", "dev", ifname))
        progs += [f"xdp:{xdp}"] if xdp else []
        seen[ifname] = (kind, root_qdisc(run_in(ns, "tc", "-j", "qdisc", "show", "dev", ifname)),
                        progs)
    return seen


def strip_programs(s, seen):
    for ns, ifname, _ in ports(s):
        if seen[ifname][2]:
            run_in(ns, "tc", "qdisc", "del", "dev", ifname, "clsact", check=False)
            run_in(ns, "ip", "link", "set", "dev", ifname, "xdp", "off", check=False)


def strip_shapers(s):
    for ns, ifname, _ in ports(s):
        run_in(ns, "tc", "qdisc", "del", "dev", ifname, "root", check=False)


def set_rps(s, on):
    """Receive packet steering on every router port: every CPU of the machine (``on``) or
    none (the kernel's default: a frame is forwarded on the CPU that received it)."""
    mask = format((1 << (os.cpu_count() or 1)) - 1, "x") if on else "0"
    for sw in s.topo["switches"]:
        for p in sw["ports"]:
            with open(f"{s.net.sysfs(sw['name'])}/class/net/{p['intf']}/queues/rx-0/rps_cpus",
                      "w") as f:
                f.write(mask)


def sink_pair(s):
    """Row a's veth pair: ``blast0`` in h1's namespace, ``blast1`` in h2's (h2's address,
    the fabric's MTU); (src, dst) host entries for ``calibrate._trial``."""
    hosts = {h["name"]: h for h in s.topo["hosts"]}
    h1, h2 = hosts["h1"], hosts["h2"]
    ns1 = f"/proc/{s.net.hosts['h1'].pid}/ns/net"
    ns2 = f"/proc/{s.net.hosts['h2'].pid}/ns/net"
    mtu = json.loads(run_in(ns1, "ip", "-j", "link", "show", "dev",
                            h1["ports"][0]["port"]))[0]["mtu"]
    run_in(ns1, "ip", "link", "add", "blast0", "mtu", str(mtu), "address", SINK_MACS[0],
           "type", "veth", "peer", "name", "blast1", "mtu", str(mtu), "address", SINK_MACS[1],
           "netns", str(s.net.hosts["h2"].pid))
    run_in(ns1, "ip", "link", "set", "blast0", "up")
    run_in(ns2, "ip", "addr", "add", f"{h2['ports'][0]['ip']}/32", "dev", "blast1")
    run_in(ns2, "ip", "link", "set", "blast1", "up")
    src = {"name": "h1", "ports": [{"port": "blast0", "mac": SINK_MACS[0],
                                    "ip": h1["ports"][0]["ip"]}]}
    dst = {"name": "h2", "ports": [{"port": "blast1", "mac": SINK_MACS[1],
                                    "ip": h2["ports"][0]["ip"]}]}
    return src, dst


# ----- the measurements ------------------------------------------------------------------------

def one_trial(s, src, dst, rate, frame_len, log):
    """One trial of ``calibrate`` (its plan and criteria), logged with where frames went:
    the emulation drops by place and the engine's CPU share; (ok, steal)."""
    sport, dport = src["ports"][0], dst["ports"][0]
    plan = {"duration": cal.TRIAL_S, "frame_len": frame_len, "idle": 0.3,
            "streams": [{"name": src["name"], "netns": netns_of(s.net, src["name"]),
                         "intf": sport["port"], "src_mac": sport["mac"],
                         "src_ip": sport["ip"], "dst_mac": next_hop_mac(sport, dport),
                         "dst_ip": dport["ip"], "rate_bps": rate, "qps": 4}],
            "receivers": [{"name": dst["name"], "netns": netns_of(s.net, dst["name"]),
                           "intf": dport["port"]}]}
    with open("/proc/stat") as f:
        before = per_cpu(f.read())
    res, doc = measure(s, plan, name=f"cost-{int(rate)}")
    with open("/proc/stat") as f:
        shares = cpu_shares(before, per_cpu(f.read()))
    sent, received = res["engine"]["sent_packets"], res["engine"]["received_packets"]
    ok = budget.trial_ok(sent, received, doc, cal.LATENCY_LIMIT_MS, cal.LATENCY_QUANTILE)
    steal = doc["cpu"].get("machine_steal") or 0.0
    lat = doc.get("latency_ms") or {}
    where = {k: v for k, v in doc["emulation_drops"].items()
             if k != "total" and (sum(v.values()) if isinstance(v, dict) else v)}
    log(f"    {rate / 1e6:8.1f} Mbit/s {sent / cal.TRIAL_S / 1e3:6.1f} kpps lost "
        f"{sent - received:6d} p99 {lat.get('p99')} ms emulation drops {where or 0} "
        f"engine {res['engine']['cpu_s'] / max(res['window_s'], 1e-9):.0%} of a core, "
        + " ".join(f"{c} {b:.0%} busy ({si:.0%} softirq)" for c, (b, si) in shares.items())
        + f" steal {steal:.0%} -> "
        f"{'ok' if ok else '; '.join([doc['verdict']] + doc['reasons'])}")
    return ok, steal


def searches(s, pairs, frame_len, repeats, log):
    """{label: [pps of each search]}: ``repeats`` searches per (src, dst) pair, taking turns."""
    found = {label: [] for label in pairs}
    for n in range(repeats):
        for label, (src, dst) in pairs.items():
            log(f"  {label}, search {n + 1} of {repeats}")

            def trial(rate, src=src, dst=dst):
                return one_trial(s, src, dst, rate, frame_len, log)
            best, _ = budget.search(budget.unless_stolen(trial, STEAL_WARN),
                                    start_bps=100e6, max_bps=20e9)
            found[label].append(best / (frame_len * 8))
    return found


def blasts(s, binary, paths, frame_len, repeats, log):
    """{label: [received pps]} of ``repeats`` blasts per path (row e)."""
    hosts = {h["name"]: h for h in s.topo["hosts"]}
    got = {}
    for label, (a, b) in paths.items():
        src_ns = f"/proc/{s.net.hosts[a].pid}/ns/net"
        dst_ns = f"/proc/{s.net.hosts[b].pid}/ns/net"
        dport = hosts[b]["ports"][0]
        got[label] = []
        for _ in range(repeats):
            before = rx_packets(run_in(dst_ns, "ip", "-j", "-s", "link", "show", "dev",
                                       dport["port"]))
            out = run_in(src_ns, "taskset", "-c", "1", binary, dport["ip"], str(BLAST_PORT),
                         str(udp_payload(frame_len)), str(BLAST_S), timeout=BLAST_S + 30)
            after = rx_packets(run_in(dst_ns, "ip", "-j", "-s", "link", "show", "dev",
                                      dport["port"]))
            words = out.split()
            rx, tx = blast_rate(before, after, int(words[1]), float(words[3]))
            log(f"    {label}: sent {tx:.1f} kpps, received {rx:.1f} kpps")
            got[label].append(rx * 1e3)
    return got


def turns(s, rows, pairs, frame_len, repeats, log):
    """Rows among a, d and f (d with RPS on every router port), one search each per repeat
    and path, the rows taking turns (a busy spell of the host falls on all of them)."""
    sink = sink_pair(s) if "a" in rows else None
    found = {row: {} for row in rows}
    for _ in range(repeats):
        for row in rows:
            set_rps(s, row == "f")
            log(NAMES[row])
            these = {"no router": sink} if row == "a" else pairs
            for label, pps in searches(s, these, frame_len, 1, log).items():
                found[row].setdefault(label, []).extend(pps)
    set_rps(s, False)
    return found


def compile_blaster(where):
    binary = os.path.join(where, "udp_blast")
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", binary,
                    os.path.join(HERE, "udp_blast.c")], check=True, timeout=60)
    return binary


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--paths", default="3,1", help="router counts, of 3 and 1")
    ap.add_argument("--mtu", type=int, default=4096)
    ap.add_argument("--results", default="results")
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--turns", help="only these rows of a, d and f (d with RPS on every "
                                    "router port), taking turns: e.g. a,d")
    a = ap.parse_args()
    if a.repeats < 1 or not set(a.paths.split(",")) <= set(PATHS):
        sys.exit("error: --repeats at least 1, --paths of 3 and 1")
    if a.turns and not set(a.turns.split(",")) <= {"a", "d", "f"}:
        sys.exit(f"error: --turns {a.turns}: rows of a, d and f (e.g. a,d)")
    frame_len = frame_len_for_mtu(a.mtu)
    fabric = cal.calibration_fabric()
    spec = RunSpec(fabric, fabric_source={"calibration": True}, mtu=a.mtu, results=a.results,
                   control=Control.BGP)
    rows, found_programs = {}, {}
    with tempfile.TemporaryDirectory() as tmp, \
            Session(spec, progress=lambda m: print(f"... {m}", flush=True)) as s:
        binary = compile_blaster(tmp)
        hosts = {h["name"]: h for h in s.topo["hosts"]}
        pairs = {f"{n} router{'s' if n != '1' else ''}": (hosts[PATHS[n][0]], hosts[PATHS[n][1]])
                 for n in a.paths.split(",")}
        paths = {label: (src["name"], dst["name"]) for label, (src, dst) in pairs.items()}
        log = lambda m: print(m, flush=True)    # noqa: E731
        cal.wait_quiet(log)
        if a.turns:
            rows = turns(s, a.turns.split(","), pairs, frame_len, a.repeats, log)
            report(rows, frame_len, a.repeats, None)
            dump(a.json, frame_len, a.repeats, rows, None)
            return
        log("a. the sender alone: one veth pair, h1 -> h2, no router, no shaper")
        rows["a"] = searches(s, {"no router": sink_pair(s)}, frame_len, a.repeats, log)
        seen = inventory(s)
        found_programs = {i: progs for i, (_, _, progs) in seen.items() if progs}
        shaped = sorted({q for _, q, _ in seen.values()})
        log(f"attached: root qdiscs {shaped}; eBPF programs on {len(found_programs)} of "
            f"{len(seen)} ports {found_programs or ''}")
        log("d. the full routed data plane (as calibrate --control bgp)")
        rows["d"] = searches(s, pairs, frame_len, a.repeats, log)
        log("e. one C sender (sendmmsg), as fast as it goes, with the TBFs")
        rows["e+tbf"] = blasts(s, binary, paths, frame_len, a.repeats, log)
        if found_programs:
            strip_programs(s, seen)
            log("c. the eBPF programs removed")
            rows["c"] = searches(s, pairs, frame_len, a.repeats, log)
        strip_shapers(s)
        left = {q for _, q, _ in inventory(s).values()}
        log(f"b. bare kernel forwarding: every TBF removed too (root qdiscs now {sorted(left)})")
        rows["b"] = searches(s, pairs, frame_len, a.repeats, log)
        log("e. one C sender (sendmmsg), as fast as it goes, bare")
        rows["e"] = blasts(s, binary, paths, frame_len, a.repeats, log)
    report(rows, frame_len, a.repeats, found_programs)
    dump(a.json, frame_len, a.repeats, rows, found_programs)


def dump(path, frame_len, repeats, rows, programs):
    if path:
        with open(path, "w") as f:
            json.dump({"frame_len": frame_len, "repeats": repeats, "rows": rows,
                       "ebpf_programs": programs}, f, indent=1)


NAMES = {"a": "a. sender alone (veth pair, no router)",
         "b": "b. routers, no TBF, no eBPF",
         "c": "c. + TBF per port",
         "d": "d. + eBPF: full (calibrate)",
         "e+tbf": "e. C sendmmsg sender, TBFs, saturation",
         "e": "e. C sendmmsg sender, bare, saturation",
         "f": "f. d + RPS on every router port"}


def report(rows, frame_len, repeats, programs):
    print(f"\n{frame_len}-byte frames; kpps = median of {repeats} (every figure in brackets)")
    if "c" not in rows and "b" in rows:
        print("c = d: the fabric attached no eBPF program to any port (measured once, as d)")
    d3 = statistics.median(rows.get("d", {}).get("3 routers", [0])) or None
    for key in ("a", "b", "c", "d", "e+tbf", "e", "f"):
        if key not in rows:
            continue
        for label, pps in rows[key].items():
            med = statistics.median(pps)
            ratio = f"{med / d3:5.2f}x d" if d3 and label == "3 routers" else ""
            print(f"{NAMES[key]:<42} {label:<10} {med / 1e3:7.1f} kpps "
                  f"{med * frame_len * 8 / 1e9:5.2f} Gbit/s  {ratio:<9}"
                  f"[{', '.join(f'{x / 1e3:.1f}' for x in pps)}]")


if __name__ == "__main__":
    main()
