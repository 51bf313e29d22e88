"""Whose bytes are on a link: each job's and each background flow's share (pure).

Model.  The job engine counts what every NIC sent per flow (QP) and owner
(``traffic.jobs``: an instance id's prefix names its job or background
flow).  A flow's path is traced from its UDP source port (its QP number:
``traffic.ranks.config.qpn`` of its endpoints, QP and the run's job seed),
so under per-flow hashing (ECMP: ``entropy qp`` and switches that choose by
the header) every byte a flow sent crossed every link of its path.  Joining
the two gives each link's bytes per owner (``attribute``).  The links'
own counters (``measured``: their interfaces' transmitted bytes over the
run) are held against that: what is left over is RoCE ACKs and CNPs (the
responders' control frames are not counted per flow), ARP and the like
(``unattributed``).  Under adaptive routing (the switches move flowlets) or
per-packet and per-flowlet entropy a flow has no one path: the links'
totals are given, the shares are not (``attributable``).

``uplinks`` lists the inter-switch links by their bytes, each with its
owners' shares and the jobs with at least ``SHARED_MIN`` of it: a link
that two or more jobs cross is *shared*.
"""

from emulator.experiments.measure.paths import path_links

SHARED_MIN = 0.01          # a job with at least 1 % of a link's bytes is on it
TOP = 8                    # the hottest links listed


def flow_keys(endpoints_result):
    """{(src endpoint, dst endpoint, qp)} of every flow that sent anything."""
    return {(i, f["peer_index"], f["qp"]) for i, e in enumerate(endpoints_result)
            for f in e.get("tx_flows", ())}


def attribute(endpoints_result, paths, topo):
    """{link: {owner: bytes}} from the NICs' per-flow counters and ``paths`` ({(src,
    dst, qp): traced path}); flows without a path are under the key None."""
    out = {}
    for i, e in enumerate(endpoints_result):
        for f in e.get("tx_flows", ()):
            path = paths.get((i, f["peer_index"], f["qp"]))
            for link in (path_links(path, topo) if path else [None]):
                row = out.setdefault(link, {})
                row[f["owner"]] = row.get(f["owner"], 0) + f["bytes"]
    return out


def uplinks(attributed, measured, topo, kinds, rates, seconds, attributable=True, top=TOP):
    """The ``top`` inter-switch links by bytes (module docstring): each with its
    measured bytes, utilisation over ``seconds``, owners' bytes and shares (None
    when not ``attributable``), the jobs on it, and what the flows do not explain."""
    switches = {sw["name"] for sw in topo["switches"]}
    names = set()
    for link in list(measured) + [k for k in attributed if k]:
        a, _, b = link.partition("->")
        if a in switches and b in switches:
            names.add(link)
    rows = []
    for link in names:
        owners = attributed.get(link, {})
        total = measured.get(link)
        if total is None:
            total = sum(owners.values())
        row = {"link": link, "bytes": total,
               "utilisation": round(total * 8 / seconds / rates[link], 4)
               if seconds and rates.get(link) else None}
        if attributable:
            base = max(total, sum(owners.values()), 1)
            row["owners"] = {o: n for o, n in sorted(owners.items(), key=lambda x: -x[1])}
            row["share"] = {o: round(n / base, 4) for o, n in row["owners"].items()}
            row["jobs"] = sorted(o for o, n in owners.items()
                                 if kinds.get(o) == "job" and n / base >= SHARED_MIN)
            row["unattributed_bytes"] = max(0, total - sum(owners.values()))
        rows.append(row)
    rows.sort(key=lambda r: (-r["bytes"], r["link"]))
    return rows[:top], rows


def shared_links(rows):
    """The links two or more jobs put bytes on, hottest first."""
    return [r["link"] for r in rows if len(r.get("jobs") or ()) >= 2]


def by_kind(row, kinds):
    """A link's share per kind of owner (each job by name; background by its kind)."""
    out = {}
    for owner, share in (row.get("share") or {}).items():
        kind = kinds.get(owner, "other")
        key = owner if kind == "job" else f"{kind}:{owner}"
        out[key] = out.get(key, 0) + share
    return out


def link_rates(topo):
    """{'a->b': rate_bps} of every switch port's link."""
    return {f"{sw['name']}->{p['peer']}": p["rate_bps"] for sw in topo["switches"]
            for p in sw["ports"]}


def measured_bytes(before, after, topo):
    """{'a->b': bytes sent} of every switch port between two ``intf_counters`` readings."""
    out = {}
    for sw in topo["switches"]:
        for p in sw["ports"]:
            a, b = before.get(p["intf"]), after.get(p["intf"])
            if a is not None and b is not None:
                out[f"{sw['name']}->{p['peer']}"] = b[0] - a[0]
    return out
