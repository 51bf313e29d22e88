"""A BGP run's control plane in the report: its sessions and one leaf's table.

From ``results["bgp"]`` (``dataplane.routed.setup``): the sessions with their
state and time to Established, and the BGP table (and the kernel's route) of
the first leaf for the last leaf's subnet, as ``vtysh`` printed them.
"""


def summary_line(b):
    """One line: the sessions Established and how soon, BFD's timers."""
    sessions = b.get("sessions") or []
    up = [s for s in sessions if s["state"] == "Established"]
    times = [s["established_after_s"] for s in up if s.get("established_after_s") is not None]
    bfd = b.get("bfd") or {}
    return (f"control plane: eBGP ({b.get('peering', 'numbered')}), {len(up)}/{len(sessions)} "
            f"sessions Established" + (f", the last {max(times):.2f}s after bgpd started"
                                       if times else "")
            + (f"; BFD {bfd['interval_ms']} ms x {bfd['multiplier']}" if bfd else ""))


def markdown(b):
    """The report.md section (a list of lines)."""
    out = ["", "## BGP", "", summary_line(b), ""]
    rows = [(s["switch"], s["peer_switch"], s["peer"], s["local_as"], s["remote_as"],
             s["state"], s["established_after_s"]) for s in b.get("sessions") or []]
    out += ["| switch | peer | address | local AS | remote AS | state | Established after s |",
            "|---|---|---|---|---|---|---|"]
    out += ["| " + " | ".join("-" if c is None else str(c) for c in r) + " |" for r in rows]
    table = b.get("leaf_table")
    if table:
        out += ["", f"### {table['switch']}: its BGP table and route for {table['prefix']}",
                "", "```", f"{table['switch']}# show bgp ipv4 unicast {table['prefix']}",
                table["bgp"], "", f"{table['switch']}# show ip route {table['prefix']}",
                table["fib"], "```"]
    return out
