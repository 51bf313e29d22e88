"""``every_fault_reported``: the injector's own log against the soak's report.

The injector (``dataplane.faults.Injector``) writes one line per change it
made into faults.jsonl, stamped with its own clock.  drill.json has a row per
fault the soak says it injected, stamped with the soak's clock just before it
asked the injector.  Each row expects its changes in the log, in order (the
faults come one at a time):

    cut    link_down X, link_up X          crash  switch_crash S, switch_recover S
    flap   (link_down X, link_up X) x N    kill   controller_kill, controller_restart
    loss   loss_start X, loss_stop

``compare`` walks the rows and the log together (pure).  A row's first change
must be in the log within ``MATCH_MS`` of the row's time; a change that starts
a fault (link_down, loss_start, switch_crash, controller_kill) that no row
claims is a fault the report misses.  ``every_fault_reported`` holds when
every row has its change and every change its row; ``every_fault_repaired``
when every row's repair is logged too (the last row of an interrupted soak
may stop early, once its link is back up).
"""

MATCH_MS = 200.0        # the soak's time of a fault against the injector's, at most

STARTS = {"cut": "link_down", "flap": "link_down", "loss": "loss_start",
          "crash": "switch_crash", "kill": "controller_kill"}
ENDS = {"link_down": "link_up", "loss_start": "loss_stop", "switch_crash": "switch_recover",
        "controller_kill": "controller_restart"}
KNOWN = set(ENDS) | set(ENDS.values())


def expected(row):
    """[(log kind, target or None)] a row's fault leaves in the log (None: any target;
    ``loss_stop`` names the nftables table, not the link)."""
    start = STARTS[row["kind"]]
    target = row["target"]          # a kill's is the controller's, as the injector names it
    pair = [(start, target), (ENDS[start], None if start == "loss_start" else target)]
    if row["kind"] == "flap":
        return pair * int(row["params"]["count"])
    return pair


def _same(event, want):
    kind, target = want
    return event.get("kind") == kind and (target is None or event.get("target") == target)


def compare(rows, events, interrupted=False, match_ms=MATCH_MS):
    """The report's ``rows`` (each with kind, target, params, t_ns) against the
    injector's ``events`` (faults.jsonl, in order): {reported, repaired,
    logged_changes, rows, unreported: [log lines no row claims (at most 20)],
    unreported_total, unlogged: [row numbers (1-based)
    whose fault the log lacks], mistimed: [[row, ms]], unrepaired: [[row, what is
    missing]], max_offset_ms}."""
    log = [e for e in events if e.get("kind") in KNOWN]
    pos, unreported, unlogged, mistimed, unrepaired, offsets = 0, [], [], [], [], []
    for n, row in enumerate(rows, 1):
        seq = expected(row)
        j = next((j for j in range(pos, len(log)) if _same(log[j], seq[0])), None)
        if j is None:
            unlogged.append(n)
            continue
        unreported += [log[x] for x in range(pos, j) if log[x]["kind"] in ENDS]
        ms = (log[j]["t_ns"] - row["t_ns"]) / 1e6
        offsets.append(abs(ms))
        if abs(ms) > match_ms:
            mistimed.append([n, round(ms, 3)])
        done = 0                     # the row's changes found in order from j on
        while done < len(seq) and j < len(log) and _same(log[j], seq[done]):
            j += 1
            done += 1
        pos = j
        if done < len(seq):
            back_up = done > 0 and done % 2 == 0          # it stopped after a repair
            if not (interrupted and n == len(rows) and back_up):
                unrepaired.append([n, f"{seq[done][0]} {seq[done][1] or ''}".strip()])
    unreported += [e for e in log[pos:] if e["kind"] in ENDS]
    return {"reported": not (unreported or unlogged or mistimed),
            "repaired": not unrepaired,
            "logged_changes": len(log), "rows": len(rows),
            "unreported": unreported[:20], "unreported_total": len(unreported), "unlogged": unlogged, "mistimed": mistimed,
            "unrepaired": unrepaired, "max_offset_ms": round(max(offsets), 3) if offsets
            else None}
