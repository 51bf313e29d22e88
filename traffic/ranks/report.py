"""nccl-tests style report of collective results from the rank JSON files.

Model.  Each rank writes ``{"rank", "collective", "nranks", "link_bps",
"results": [{"size", "time_s", "bytes_sent", "bytes_received",
"chunks_missing", "chunks_corrupted"}]}``.  Per size, the reported time is
the slowest rank's (a collective ends when its last rank ends), each rank
timing from its own start; ``span_s`` is the call on one clock, from the first
rank's start to the last rank's end, and ``start_skew_s`` how far apart the
ranks started (ranks that start late find data already sent to them, which
their own time leaves out: an incast into a paused fabric).  #wrong sums
every rank's missing and corrupted chunks (nccl-tests counts wrong elements;
we count chunks, as we carry no data).  algbw = size / time, busbw = algbw x
2(n-1)/n (AllReduce) or (n-1)/n (the others); efficiency = busbw / link rate.

Bandwidths are printed in GB/s like nccl-tests AND in Mbit/s, since
emulated links run at tens of Mbit/s and GB/s would print 0.00.
"""

import json

from traffic.ranks.collectives import BUSBW_FACTOR, REDOP

TABLE_HEAD = ("#       size    count   type  redop  root   time(us)  algbw(GB/s)"
              "  busbw(GB/s)  algbw(Mb/s)  busbw(Mb/s)  effic  #wrong")


def bandwidths(collective, n, size, seconds, link_bps=None):
    """algbw/busbw of one call in GB/s (1e9 bytes/s, as nccl-tests) and Mbit/s."""
    alg = size / seconds if seconds > 0 else 0.0
    bus = alg * BUSBW_FACTOR[collective](n)
    out = {"algbw_GBps": alg / 1e9, "busbw_GBps": bus / 1e9,
           "algbw_Mbps": alg * 8 / 1e6, "busbw_Mbps": bus * 8 / 1e6}
    out["efficiency"] = bus * 8 / link_bps if link_bps else None
    return out


def combine(rank_results):
    """Merge the ranks' result dicts into one row per size."""
    if not rank_results:
        raise ValueError("no rank results")
    first = rank_results[0]
    coll, n = first["collective"], first["nranks"]
    link = first.get("link_bps")
    rows = []
    calls = min(len(r["results"]) for r in rank_results)    # an aborted job ran fewer
    for i, r0 in enumerate(first["results"][:calls]):
        per = [r["results"][i] for r in rank_results]
        t = max(p["time_s"] for p in per)
        wrong = sum(p["chunks_missing"] + p["chunks_corrupted"] for p in per)
        row = {"size": r0["size"], "count": r0["size"] // 4, "type": "float",
               "aborted": any(p.get("aborted") for p in per),
               "redop": REDOP[coll], "root": -1, "time_s": t, "wrong": wrong,
               "ranks_reporting": len(per)}
        row.update(bandwidths(coll, n, r0["size"], t, link))
        if all("t_start_ns" in p for p in per):
            first_ns = min(p["t_start_ns"] for p in per)
            row["span_s"] = max(p["t_start_ns"] - first_ns + p["time_s"] * 1e9
                                for p in per) / 1e9
            row["start_skew_s"] = (max(p["t_start_ns"] for p in per) - first_ns) / 1e9
        if all("transport" in p for p in per):
            row["transport"] = _sum_counts(p["transport"] for p in per)
            # the share of what the NICs sent that went again: goodput lost to the transport
            row["retransmitted_share"] = (sum(p.get("retransmitted_bytes", 0) for p in per)
                                          / max(1, sum(p["bytes_sent"] for p in per)))
        rows.append(row)
    out = {"collective": coll, "nranks": n, "link_bps": link, "rows": rows}
    if all("transport" in r for r in rank_results):
        out["transport"] = _sum_counts(r["transport"] for r in rank_results)
        out["rc"] = first.get("rc")
        out["failed_qps"] = [dict(q, rank=r.get("name") or r["rank"])
                             for r in rank_results for q in r.get("failed_qps", [])]
    if all("uet" in r for r in rank_results):
        out["uet"] = uet_totals(rank_results)
    return out


WINDOWS_KEPT = 16      # NSCC window traces a report keeps (every one is in the rank files)


def uet_totals(docs):
    """What the ranks' UET summaries (``stack.uet_summary``) add up to: EVs retired,
    the last retirement (ms from the first reported call), freezes, the settings, and
    up to ``WINDOWS_KEPT`` window traces named ``"h1->h2 pdc0"`` (the PDCs that
    changed their window most often first)."""
    names = {d["rank"]: d.get("name") or str(d["rank"]) for d in docs}
    u0 = docs[0]["uet"]
    last = [d["uet"]["last_retired_ms"] for d in docs if d["uet"].get("last_retired_ms")
            is not None]
    traces = []
    for d in docs:
        for key, trace in d["uet"].get("windows", {}).items():
            peer, _, q = key.partition(":")
            peer = names.get(int(peer), peer) if peer.isdigit() else peer
            traces.append((f"{names[d['rank']]}->{peer} pdc{q}", trace))
    traces.sort(key=lambda kv: -len(kv[1]))
    return {"evs_retired": sum(d["uet"].get("evs_retired", 0) for d in docs),
            "last_retired_ms": max(last, default=None),
            "ev_freezes": sum(d["uet"].get("ev_freezes", 0) for d in docs),
            **{k: u0.get(k) for k in ("ev_policy", "ev_set", "cc", "network_rtt_ms")},
            "windows": dict(sorted(traces[:WINDOWS_KEPT]))}


def _sum_counts(docs):
    """{key: sum} over counter documents (a key missing from one counts 0 there)."""
    out = {}
    for d in docs:
        for k, v in d.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
    return out


def transport_line(tr, failed="-"):
    """The nccl-tests table's transport line: RC's retransmissions, NAKs, timeouts; UET's
    by cause, its out-of-order placements and the EVs its senders retired."""
    if "retransmitted_by_trim" in tr and tr.get("pdcs_opened"):
        return (f"# transport uet: {tr['retransmitted_packets']} packets retransmitted "
                f"({tr['retransmitted_by_nack']} by NACK, {tr['retransmitted_by_trim']} by "
                f"trim, {tr['retransmitted_by_timeout']} by timeout), "
                f"{tr.get('placed_out_of_order', 0)} placed out of order, "
                f"{tr.get('trimmed_received', 0)} trimmed received, {tr.get('evs_retired', 0)} "
                f"EVs retired (all calls, warm-up included); PDCs failed: {failed}")
    return (f"# transport rc: {tr['retransmitted_packets']} packets "
            f"retransmitted, {tr['naks_sent']} NAKs, {tr['timeouts']} timeouts "
            f"(all calls, warm-up included); QPs out of retries: {failed}")


def table(report):
    """The nccl-tests-like text table of ``combine``'s result."""
    lines = [f"# {report['collective']}  nranks {report['nranks']}  link "
             f"{(report['link_bps'] or 0) / 1e6:g} Mbit/s  (out-of-place)", TABLE_HEAD]
    for r in report["rows"]:
        eff = f"{r['efficiency']:6.3f}" if r["efficiency"] is not None else "     -"
        lines.append(
            f"{r['size']:12d} {r['count']:8d} {r['type']:>6s} {r['redop']:>6s}"
            f" {r['root']:5d} {r['time_s'] * 1e6:10.1f} {r['algbw_GBps']:12.4f}"
            f" {r['busbw_GBps']:12.4f} {r['algbw_Mbps']:12.2f} {r['busbw_Mbps']:12.2f}"
            f" {eff} {r['wrong']:7d}")
    skewed = [r for r in report["rows"] if r.get("start_skew_s", 0) > 0.1 * r["time_s"]]
    for r in skewed:
        lines.append(f"# size {r['size']}: the ranks started {r['start_skew_s'] * 1e3:.0f} ms "
                     f"apart; from the first start to the last end {r['span_s'] * 1e3:.1f} ms "
                     "(one clock)")
    tr = report.get("transport")
    if tr:
        failed = ", ".join(f"{q['rank']}->{q['peer']} qp{q['qp']}"
                           for q in report.get("failed_qps", [])) or "none"
        lines.append(transport_line(tr, failed))
    u = report.get("uet")
    if u:
        last = "" if u["last_retired_ms"] is None else \
            f", the last {u['last_retired_ms']:.0f} ms after the first reported call began"
        lines.append(f"# uet: {u['cc']}, EV policy {u['ev_policy']} over {u['ev_set']} values; "
                     f"{u['evs_retired']} EVs retired{last}, {u['ev_freezes']} freezes")
    return "\n".join(lines)


def load(paths):
    """Read rank result files."""
    out = []
    for p in paths:
        with open(p) as f:
            out.append(json.load(f))
    return sorted(out, key=lambda r: r["rank"])
