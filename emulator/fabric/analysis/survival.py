"""Which host pairs keep a path after a fault: the fabric's own model, from the plan.

Pure: a plan and the dead links and switches in, the surviving pairs out
(used by the drills' and tests' expectations, ``dataplane.faults``).
"""


def _egress(host, ip):
    """(host port doc, source IP) a ping from ``host`` to ``ip`` leaves by (its routes)."""
    for r in host.get("routes", []):
        if r["dst"].split("/")[0] == ip:
            return next(p for p in host["ports"] if p["port"] == r["dev"]), r["src"]
    return host["ports"][0], host["ports"][0]["ip"]


def surviving_pairs(topo, dead_links=(), dead_switches=()):
    """{(src host, dst host port IP)} that still have a path both ways after a fault.

    ``dead_links``: ``(switch, port number)`` ends of cut links (either end
    names the link); ``dead_switches``: crashed switch names.  The model is
    the fabric's: switches forward, a bonded host's NIC switch and every host
    are endpoints only (never transit); a host sends to an address through
    the port its routes name (multi-plane: the NIC of that rail), else its
    first port, and the reply comes back the same way.  A pair survives when
    both directions have a path over live links and live switches.
    """
    import networkx as nx
    dead_links = {(s, int(p)) for s, p in dead_links}
    dead_switches = set(dead_switches)
    sw = {s["name"]: s for s in topo["switches"]}
    transit = {n for n, s in sw.items() if s["kind"] != "nic" and n not in dead_switches}
    g = nx.MultiGraph()
    g.add_nodes_from(n for n in sw if n not in dead_switches)
    for s in topo["switches"]:
        for p in s["ports"]:
            if (p["peer_kind"] == "host" or p["peer"] not in sw
                    or (s["name"], p["port"]) in dead_links
                    or (p["peer"], p["peer_port"]) in dead_links
                    or {s["name"], p["peer"]} & dead_switches
                    or s["name"] > p["peer"]):
                continue
            g.add_edge(s["name"], p["peer"], key=(p["port"], p["peer_port"]))

    def attached(port):
        """The live switch a host port hangs from, or None."""
        s = port["switch"]
        ok = s not in dead_switches and (s, port["switch_port"]) not in dead_links
        return s if ok else None

    def path(a, b):
        if a is None or b is None:
            return False
        if a == b:
            return True
        return nx.has_path(g.subgraph(transit | {a, b}), a, b)

    by_ip = {p["ip"]: (h, p) for h in topo["hosts"] for p in h["ports"]}
    out = set()
    for src in topo["hosts"]:
        for dst in topo["hosts"]:
            if dst is src:
                continue
            for dport in dst["ports"]:
                sport, src_ip = _egress(src, dport["ip"])
                back, _ = _egress(dst, src_ip)
                if (path(attached(sport), attached(dport))
                        and path(attached(back), attached(by_ip[src_ip][1]))):
                    out.add((src["name"], dport["ip"]))
    return out
