"""The run report: versions and command in results.json, pictures, and report.md.

Model.  ``write(session)`` is called once at the end of a run, before
``results.json`` is written; it adds to ``session.results``

* ``command``: the exact command line (``shlex``-quoted, the interpreter first)
  and ``versions``: python, Open vSwitch (as the session recorded it in
  ``versions``, from ``ovs-vsctl --version``), os-ken, scapy, Mininet and the
  kernel;

and writes into the run's results directory

* ``fabric.png``: the fabric, tiers as rows (hosts at the bottom, then leaves,
  spines, superspines), one edge per link;
* ``uplinks.png`` when the default mix ran: Mbit/s per leaf uplink (the ECMP
  spread); ``busbw.png`` when a collective ran: busbw against message size;
  ``window.png`` when it ran over UET with NSCC: each PDC's congestion window
  against time (the traces the collective report kept);
* ``report.md``: the tables and pictures together, readable on GitHub.

Plotting uses matplotlib's Agg backend (no display).  A failure to draw is
reported in the report and never fails the run: the measurements are in
results.json regardless.
"""

import math
import os
import platform
import shlex
import sys
from importlib import metadata

from emulator.report import bgp as bgp_report
from emulator.report.summary import adaptive_text, fidelity_lines, layout_text, pfc_text
from emulator.report.training import training_lines

TIER_ROW = {"host": 0, "nic": 0.5, "leaf": 1, "spine": 2, "superspine": 3}


def versions(recorded=None):
    """Versions of everything a result depends on (``None`` where unknown);
    ``recorded``: what the run recorded (``results["versions"]``: Open vSwitch's)."""
    out = {"python": platform.python_version(), "kernel": platform.release(),
           "openvswitch": (recorded or {}).get("openvswitch")}
    for dist in ("os-ken", "scapy", "mininet", "networkx", "matplotlib"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def command_line(argv=None):
    argv = sys.argv if argv is None else argv
    head = [sys.executable, "-m", "emulator"] if argv and argv[0].endswith("__main__.py") \
        else [sys.executable, argv[0]] if argv else [sys.executable]
    return shlex.join(head + list(argv[1:]))


def pyplot():
    """matplotlib's pyplot on the Agg backend, imported when a picture is drawn (not
    at start: importing it writes a config directory, which a run need not have)."""
    import matplotlib  # optional: only pictures need it
    matplotlib.use("Agg")              # no display on a lab machine or in CI
    import matplotlib.pyplot as plt
    return plt


def grouped(topo):
    """{switch: group} of a dragonfly (every switch in a pod, links between pods), else None."""
    pod = {sw["name"]: sw.get("pod") for sw in topo["switches"]}
    if not pod or None in pod.values():
        return None
    ends = [(lk["a"].split(":")[0], lk["b"].split(":")[0]) for lk in topo["links"]]
    if not any(a in pod and b in pod and pod[a] != pod[b] for a, b in ends):
        return None
    return pod


def group_layout(topo, pod):
    """{node: (x, y)}: groups around a circle, each group's switches on a small
    arc (spines inside leaves), a switch's hosts just outside it."""
    groups = sorted(set(pod.values()))
    members = {g: [n for n in pod if pod[n] == g] for g in groups}
    pos = {}
    for gi, g in enumerate(groups):
        centre = 2 * math.pi * gi / len(groups)
        names = members[g]
        for j, name in enumerate(names):
            spread = 0.9 * math.pi / len(groups)
            angle = centre + spread * ((j + 0.5) / len(names) - 0.5)
            radius = 3.0 if any(sw["name"] == name and sw["tier"] >= 2
                                for sw in topo["switches"]) else 4.0
            pos[name] = (radius * math.cos(angle), radius * math.sin(angle))
    for h in topo["hosts"]:
        leaf = h["ports"][0]["switch"]
        x, y = pos[leaf]
        mine = [o["name"] for o in topo["hosts"] if o["ports"][0]["switch"] == leaf]
        k = mine.index(h["name"])
        angle = math.atan2(y, x) + 0.06 * (k - (len(mine) - 1) / 2)
        pos[h["name"]] = (5.0 * math.cos(angle), 5.0 * math.sin(angle))
    return pos


def layout(topo):
    """{node: (x, y)}: one row per tier, nodes spread evenly over [0, 1]
    (a dragonfly: its groups around a circle, ``group_layout``)."""
    pod = grouped(topo)
    if pod is not None:
        return group_layout(topo, pod)
    rows = {}
    for sw in topo["switches"]:
        rows.setdefault(TIER_ROW.get(sw["kind"], sw["tier"]), []).append(sw["name"])
    rows.setdefault(0, []).extend(h["name"] for h in topo["hosts"])
    pos = {}
    for y, names in rows.items():
        for i, name in enumerate(names):
            pos[name] = ((i + 0.5) / len(names), float(y))
    return pos


def fabric_png(topo, path):
    import networkx as nx
    plt = pyplot()
    g = nx.Graph()
    g.add_nodes_from(h["name"] for h in topo["hosts"])
    g.add_nodes_from(sw["name"] for sw in topo["switches"])
    g.add_edges_from((lk["a"].split(":")[0], lk["b"].split(":")[0]) for lk in topo["links"])
    pos = layout(topo)
    kind = {h["name"]: "host" for h in topo["hosts"]}
    kind.update({sw["name"]: sw["kind"] for sw in topo["switches"]})
    colours = {"host": "#9ecae1", "nic": "#c6dbef", "leaf": "#a1d99b", "spine": "#fdae6b",
               "superspine": "#bcbddc"}
    if grouped(topo) is not None:
        fig, ax = plt.subplots(figsize=(12, 12))
    else:
        width = max(6.0, 0.6 * max(sum(1 for p in pos.values() if p[1] == y)
                                   for y in {p[1] for p in pos.values()}))
        fig, ax = plt.subplots(figsize=(width, 1.6 * (1 + max(p[1] for p in pos.values()))))
    nx.draw_networkx_edges(g, pos, ax=ax, edge_color="#888888", width=0.8)
    nx.draw_networkx_nodes(g, pos, ax=ax, node_size=600,
                           node_color=[colours.get(kind[n], "#dddddd") for n in g.nodes])
    nx.draw_networkx_labels(g, pos, ax=ax, font_size=7)
    ax.set_title(f"{topo['fabric']} (run {topo['run']})")
    ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def uplinks_png(traffic, path):
    plt = pyplot()
    leaves = traffic["uplinks"]
    fig, ax = plt.subplots(figsize=(max(5, 1.5 * len(leaves)), 3.5))
    n = max(len(leaf["loads"]) for leaf in leaves)
    w = 0.8 / n
    for k in range(n):
        xs = [i + k * w for i, leaf in enumerate(leaves) if k < len(leaf["loads"])]
        ys = [leaf["loads"][k]["mbps"] for leaf in leaves if k < len(leaf["loads"])]
        ax.bar(xs, ys, width=w, label=f"uplink {k + 1}")
    ax.set_xticks([i + 0.4 - w / 2 for i in range(len(leaves))],
                  [leaf["leaf"] for leaf in leaves])
    ax.set_ylabel("Mbit/s")
    ax.set_title("per-uplink load (ECMP spread)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def busbw_png(coll, path):
    plt = pyplot()
    rows = coll["rows"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([r["size"] for r in rows], [r["busbw_Mbps"] for r in rows], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (Mbit/s)")
    ax.set_title(f"{coll['collective']} over {coll['nranks']} ranks")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def window_png(uet, path):
    """The NSCC windows of a UET collective (``report.uet_totals``' traces) in KB
    against ms from the first reported call."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, trace in sorted(uet["windows"].items()):
        if trace:
            ax.step([t for t, _ in trace], [w / 1024 for _, w in trace], where="post",
                    label=name, linewidth=0.8)
    ax.set_xlabel("ms from the first reported call")
    ax.set_ylabel("window (KB)")
    ax.set_title(f"NSCC windows (network RTT {uet.get('network_rtt_ms') or 0:.1f} ms)")
    if len(uet["windows"]) <= 8:
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def markdown(results, topo, pictures, summary_text=None):
    r = results
    out = [f"# Run {r['run']}: {r['fabric']}", "",
           f"- command: `{r.get('command_line', '')}`",
           f"- datapath: {r['datapath']['type']} ({r['datapath']['reason']})"
           + layout_text(r.get("layout")),
           f"- controller: {r.get('controller', {}).get('kind', '?')}"]
    v = r.get("versions", {})
    out.append("- versions: " + ", ".join(f"{k} {val}" for k, val in v.items()))
    t = r.get("timings", {})
    reach = r.get("reachability")
    if reach:
        out.append(f"- reachability: {reach['reachable']}/{reach['pairs']} host pairs, "
                   f"fully reachable {t.get('time_to_reachable_s', 0):.2f}s after start")
    out += ["", "## Fabric", ""]
    if "fabric.png" in pictures:
        out += ["![fabric](fabric.png)", ""]
    out.append(_md_table(("switch", "kind", "dpid", "ports"),
                         [(s["name"], s["kind"], s["dpid_hex"], len(s["ports"]))
                          for s in topo["switches"]]))
    if r.get("bgp"):
        out += bgp_report.markdown(r["bgp"])
    if r.get("lossless"):
        out += ["", "## Lossless fabric", "", "```", pfc_text(r["lossless"]), "```"]
    if r.get("adaptive"):
        out += ["", "## Adaptive routing in the switches", "", "```",
                adaptive_text(r["adaptive"]), "```"]
    traffic = r.get("traffic")
    fid = (traffic or r.get("collective") or r.get("training") or {}).get("fidelity")
    if fid is not None:
        out += ["", "## Fidelity", ""]
        if fid["verdict"] != "faithful":
            out += ["**EMULATOR-BOUND: the figures below describe this machine's limits, "
                    "not the fabric's behaviour.**", ""]
        out += ["```", *fidelity_lines(fid), "```"]
    if traffic:
        out += ["", "## Traffic", "", traffic["description"], "",
                f"sent {traffic['sent_packets']}, received {traffic['received_packets']}, "
                f"lost {traffic['dropped_packets']}, reordered "
                f"{traffic['reordered_packets']}", ""]
        if "uplinks.png" in pictures:
            out += ["![per-uplink load](uplinks.png)", ""]
        out.append(_md_table(("leaf", "uplink", "peer", "Mbit/s", "utilisation"),
                             [(leaf["leaf"], u["port"], u["peer"], u["mbps"],
                               u["utilisation"]) for leaf in traffic["uplinks"]
                              for u in leaf["loads"]]))
    coll = r.get("collective")
    if coll:
        out += ["", f"## {coll['collective']}", ""]
        if "busbw.png" in pictures:
            out += ["![busbw](busbw.png)", ""]
        out += ["```", coll["table"], "```"]
        if "window.png" in pictures:
            out += ["", "![NSCC windows](window.png)", ""]
    if r.get("training"):
        out += ["", "## Training job", "", "```", *training_lines(r["training"]), "```"]
    checks = r.get("checks")
    if checks:
        out += ["", "## Checks", "", _md_table(("check", "result", "detail"), [
            (c["check"], "PASS" if c["ok"] else "FAIL", c["detail"]) for c in checks])]
    caps = r.get("captures")
    if caps:
        out += ["", "## Captures", "", _md_table(("file", "packets"), [
            (f"[{name}]({name})", "?" if n is None else n) for name, n in sorted(caps.items())])]
    problems = r.get("controller", {}).get("problems")
    if problems:
        out += ["", "## Controller problems", "", "```", *problems[:20], "```"]
    if r.get("report_errors"):
        out += ["", "## Report errors", ""] + [f"- {e}" for e in r["report_errors"]]
    out.append("")
    return "\n".join(out)


def write(session):
    """Add command/versions to ``session.results``; write pictures and report.md."""
    r, topo, d = session.results, session.topo, session.dir
    r["command_line"] = command_line()
    r["versions"] = versions(r.get("versions"))
    pictures, errors = [], []
    jobs = [("fabric.png", lambda p: fabric_png(topo, p))]
    if r.get("traffic") and r["traffic"].get("uplinks"):
        jobs.append(("uplinks.png", lambda p: uplinks_png(r["traffic"], p)))
    if r.get("collective") and r["collective"].get("rows"):
        jobs.append(("busbw.png", lambda p: busbw_png(r["collective"], p)))
    if r.get("collective") and (r["collective"].get("uet") or {}).get("windows"):
        jobs.append(("window.png", lambda p: window_png(r["collective"]["uet"], p)))
    for name, draw in jobs:
        try:
            draw(os.path.join(d, name))
            pictures.append(name)
        except Exception as e:     # noqa: BLE001 - a picture never fails the run
            errors.append(f"{name}: {type(e).__name__}: {e}")
    if errors:
        r["report_errors"] = errors
    r["report"] = {"markdown": "report.md", "pictures": pictures}
    with open(os.path.join(d, "report.md"), "w", encoding="utf-8") as f:
        f.write(markdown(r, topo, pictures))
    return os.path.join(d, "report.md")
