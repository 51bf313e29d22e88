"""The text of a shared run: each job's iterations and slowdown, the background
flows, the hottest uplinks with their owners' shares (pure)."""


def _f(v, fmt="{:.3f}"):
    return "-" if v is None else fmt.format(v)


def lines(doc):
    """The summary lines of a ``shared`` document (``launch.run_shared``)."""
    verdicts = ", ".join(doc.get("verdicts") or [doc["fidelity"]["verdict"]])
    out = [f"# shared cluster: {len(doc['jobs'])} jobs, {len(doc['background'])} background "
           f"flow(s); verdicts (together{', then each alone' if doc['baseline'] else ''}): "
           f"{verdicts}"]
    out += [f"  note: {n}" for n in doc.get("notes", ())]
    out.append(f"{'job':10s} {'ranks':>5s} {'placement':9s} {'leaves':24s} "
               f"{'together s':>10s} {'contended':>9s} {'alone s':>8s} {'slowdown':>8s} "
               f"{'retx MB':>8s} {'#wrong':>6s} {'crowd k':>7s} {'fair-share':>10s}")
    for j in doc["jobs"]:
        busy = f"{sum(j['contended'])}/{len(j['contended'])}"
        out.append(f"{j['name']:10s} {j['ranks']:5d} {j['placement']:9s} "
                   f"{','.join(j['leaves']):24s} {j['iteration_s']:10.3f} {busy:>9s} "
                   f"{_f(j.get('alone_s')):>8s} {_f(j.get('slowdown')):>8s} "
                   f"{j['retransmitted_bytes'] / 1e6:8.3f} {j['wrong']:6d} "
                   f"{_f(j.get('crowding'), '{:.2f}'):>7s} "
                   f"{_f(j.get('fair_share_slowdown')):>10s}")
    if doc["background"]:
        out.append(f"{'flow':10s} {'kind':10s} {'class':11s} {'pairs':>5s} "
                   f"{'offered Mb/s':>12s} {'achieved':>8s} {'loss':>7s} {'transfers':>9s} "
                   f"{'late s max':>10s}")
        for f in doc["background"]:
            out.append(f"{f['name']:10s} {f['kind']:10s} {f['class']:11s} {f['pairs']:5d} "
                       f"{f['offered_Mbps']:12.3f} {f['achieved_Mbps']:8.3f} "
                       f"{f['loss']:7.2%} {f['transfers']:9d} {_f(f['late_s_max']):>10s}")
    if any(j.get("fair_share_slowdown") for j in doc["jobs"]):
        out.append("crowd k: how many times longer the job's bytes take to cross its "
                   "links shared fairly than alone; fair-share: the slowdown that "
                   "predicts, all its exposed communication meeting the others")
    out += uplink_lines(doc)
    return out


def uplink_lines(doc):
    rows = doc.get("uplinks") or []
    if not rows:
        return []
    out = [f"hottest uplinks (bytes over the together run; shares from "
           f"{doc.get('shares_from') or 'traced paths'})" if doc["attributable"] else
           "hottest uplinks (bytes over the together run; no per-flow shares: flows "
           "change paths under this load balancing)"]
    for r in rows:
        share = ""
        if r.get("share"):
            share = "  " + ", ".join(f"{o} {s:.0%}" for o, s in r["share"].items()
                                     if s >= 0.005)
            rest = r["unattributed_bytes"] + r.get("control_bytes", 0)
            if rest:
                share += f", ACK/CNP/other {rest / max(r['bytes'], 1):.0%}"
        out.append(f"  {r['link']:18s} {r['bytes'] / 1e6:9.3f} MB "
                   f"{_f(r['utilisation'], '{:.0%}'):>5s}{share}")
    for owner, links in (doc.get("background_beside_jobs") or {}).items():
        total = sum(x["bytes"] for x in links)
        out.append(f"{owner} beside the jobs: {total / 1e6:.3f} MB on {len(links)} link(s) "
                   "they use: " + ", ".join(f"{x['link']} {x['bytes'] / 1e6:.2f} MB "
                                            f"({'+'.join(x['jobs'])})" for x in links[:4]))
    agree = doc.get("traced_agreement")
    if agree:
        out.append(f"  traced paths against the switches' counters: largest difference "
                   f"{max(agree.values()):.1%} of a link's bytes")
    if doc.get("shared_links") is not None:
        out.append("links two or more jobs share: "
                   + (", ".join(doc["shared_links"]) or "none"))
    return out
