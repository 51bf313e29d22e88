"""Whose bytes are on a link: each job's and each background flow's share (pure).

Model.  Two counts meet.  The switches count, per link, the RoCEv2 bytes that
crossed it per (source, destination) host address, data and control frames
apart (``dataplane.observe.flows``: the switches' per-port counters by flow).
The job engine counts what every NIC sent per flow (QP) and owner
(``traffic.jobs``: an instance id's prefix names its job or background flow).
A pair of NICs' data bytes on a link are split among the owners in the
shares the sending NIC counted for that pair (``counted``): exact when a
pair carries one owner's flows, as it does when jobs share no host.  This
holds under every load balancing: the counters are where the frames went.

Under per-flow hashing (ECMP: one UDP source port per QP) a second,
independent account exists: each flow's path traced from its source port
(``traced``: every byte a flow sent crossed every link of its path).  The
two are held against each other (``agreement``), and both against the
links' own interface counters (``measured``): what neither explains is
ARP, BFD and the like (``unattributed``), the RoCE ACKs and CNPs being
counted apart (``control``).

``uplinks`` lists the inter-switch links by their bytes, each with its
owners' shares and the jobs with at least ``SHARED_MIN`` of it: a link
that two or more jobs cross is *shared*.
"""

from emulator.experiments.measure.paths import path_links

SHARED_MIN = 0.01          # a job with at least 1 % of a link's bytes is on it
TOP = 8                    # the hottest links listed
OTHER = "other"            # RoCE bytes of a pair whose NIC counted nothing (none expected)


def flow_keys(endpoints_result):
    """{(src endpoint, dst endpoint, qp)} of every flow that sent anything."""
    return {(i, f["peer_index"], f["qp"]) for i, e in enumerate(endpoints_result)
            for f in e.get("tx_flows", ())}


def pair_owners(endpoints_result):
    """{(src endpoint, dst endpoint): {owner: bytes sent}} of the NICs' flows."""
    out = {}
    for i, e in enumerate(endpoints_result):
        for f in e.get("tx_flows", ()):
            row = out.setdefault((i, f["peer_index"]), {})
            row[f["owner"]] = row.get(f["owner"], 0) + f["bytes"]
    return out


def counted(counts, endpoint_of_ip, pairs):
    """({link: {owner: bytes}}, {link: control bytes}) from the links' per-flow counts
    ({link: {(src ip, dst ip): Count}}); ``endpoint_of_ip``: {ip: endpoint index};
    ``pairs``: ``pair_owners``.  Bytes of a pair that sent nothing counted go to
    ``OTHER``."""
    out, control = {}, {}
    for link, flows in counts.items():
        row = out.setdefault(link, {})
        for (src, dst), c in flows.items():
            control[link] = control.get(link, 0) + c.control_bytes
            if not c.data_bytes:
                continue
            owners = pairs.get((endpoint_of_ip.get(src), endpoint_of_ip.get(dst))) or {}
            total = sum(owners.values())
            if not total:
                row[OTHER] = row.get(OTHER, 0) + c.data_bytes
                continue
            for owner, n in owners.items():
                row[owner] = row.get(owner, 0) + round(c.data_bytes * n / total)
    return out, control


def agreement(traced_att, counted_att, links):
    """Per link of ``links``, the largest difference between the two accounts of an
    owner's bytes over the link's counted bytes (0: they agree)."""
    out = {}
    for link in links:
        a, b = traced_att.get(link, {}), counted_att.get(link, {})
        base = max(sum(b.values()), 1)
        out[link] = round(max((abs(a.get(o, 0) - b.get(o, 0)) for o in set(a) | set(b)),
                              default=0) / base, 4)
    return out


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


def uplinks(attributed, measured, topo, kinds, rates, seconds, attributable=True, top=TOP,
            control=None):
    """The ``top`` inter-switch links by bytes (module docstring): each with its
    measured bytes, utilisation over ``seconds``, owners' bytes and shares (None
    when not ``attributable``), the jobs on it, its RoCE control bytes (``control``)
    and what neither explains."""
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
            ctl = (control or {}).get(link, 0)
            row["control_bytes"] = ctl
            row["unattributed_bytes"] = max(0, total - sum(owners.values()) - ctl)
        rows.append(row)
    rows.sort(key=lambda r: (-r["bytes"], r["link"]))
    return rows[:top], rows


def shared_links(rows):
    """The links two or more jobs put bytes on, hottest first."""
    return [r["link"] for r in rows if len(r.get("jobs") or ()) >= 2]


def crowding(rows, owner):
    """(k, link): how many times longer ``owner``'s bytes take to cross its links when
    they are shared fairly than alone, and the link that sets it.  Alone, a job's
    communication is set by its busiest link (its own bytes there, P).  Shared
    fairly, its n_l - 1 co-owners of link l take at most their own bytes and at most
    the job's share each, so its bytes there are through after min(link's bytes,
    n_l x its own) byte times; k is the largest of those over P.  Links ``owner``
    has a share of at least ``SHARED_MIN`` count; k = 1 on links of its own, 2 where
    one other owner put as many bytes, and a job whose flowlets touch a crowded link
    with a few of its bytes (adaptive routing) is not made k times slower by it.
    (None, None) when it is on no link."""
    mine = []
    for r in rows:
        owners = r.get("owners") or {}
        own, total = owners.get(owner, 0), sum(owners.values())
        if own and own / max(r["bytes"], total, 1) >= SHARED_MIN:
            n = sum(1 for b in owners.values() if b)
            mine.append((min(total, n * own), own, r["link"]))
    if not mine:
        return None, None
    peak = max(own for _, own, _ in mine)
    worst = max(mine, key=lambda m: m[0])           # the first of equals
    return round(worst[0] / peak, 4), worst[2]


def fair_share_slowdown(k, alone_s, compute_s):
    """The slowdown fair sharing predicts for a job whose exposed communication
    (``alone_s`` - ``compute_s`` per iteration) all meets the others on its most crowded
    link (``crowding``'s k): (compute + k x communication) / alone.  An estimate from
    the link counts and the job alone, not from the together run's iteration times."""
    if k is None or not alone_s:
        return None
    comm = max(alone_s - compute_s, 0.0)
    return round((min(compute_s, alone_s) + k * comm) / alone_s, 4)


def beside_jobs(rows, kinds):
    """{background owner: [{"link", "bytes", "jobs"}]}: the inter-switch links each
    background flow put bytes on that a job is on too (a job's share at least
    ``SHARED_MIN``), its bytes there, hottest first."""
    out = {}
    for r in rows:
        for owner, n in (r.get("owners") or {}).items():
            if kinds.get(owner, "job") != "job" and n and r.get("jobs"):
                out.setdefault(owner, []).append({"link": r["link"], "bytes": n,
                                                  "jobs": r["jobs"]})
    return out


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
