"""The rules that excuse packets from a soak's invariants: each named, with the
packets it excused.

An allowance is a rule without which the invariant would count what it
excuses against the soak.  Each one's parameter is its value in drill.json
``chaos.allowances``, beside ``excused_packets``: the invariant's count
without the rule minus its count with it.  Where two rules serve one
invariant they are taken away in the order listed, so each figure is what
its rule excused beyond the rules listed after it (a figure below 0: the rule
moved more loss onto the invariant than off it).

untouched_flows_lost_nothing
  ``in_flight``: a gap's loss begins one probe interval plus the packets in
  flight (the probes' p99.9 one-way latency, at least ``JITTER_MS``) after
  its last packet, not one probe interval: a fault loses what was in flight
  when it struck, so its gap opens before it.
  ``lossy_path`` (lossy fabric only): an untouched flow's loss while a queue
  on its own path dropped frames in that fault's window is the network's.
no_emulation_drops
  ``sender_catch_up``: the probe sender may fall up to ``catch_up_ms`` behind
  its schedule and still send; the engine's default (20 ms) would have
  skipped the packets it sent later than that (an emulation drop each).
  ``ovsdb_stats_lag``: Open vSwitch's send failures show in its database up
  to ``OVSDB_STATS_S`` late, so a faulted link's stay its fault's that long
  after the repair.
  ``faulted_links``: what Open vSwitch could not send or read on a link while
  a fault had it down is that fault's, and so is a loss no queue counted
  while faults were injected (gray loss drops in nftables).
reliable_qps_delivered_or_dead
  ``aborted_job``: a QP left with undelivered packets is accounted for when
  another QP's failure aborted its job (the NIC flushes it in error).
"""


JITTER_MS = 5.0      # arrival jitter on 2 shared cores: calm gaps are 3-6 ms

RULES = (            # name, invariant, unit of its value
    ("in_flight", "untouched_flows_lost_nothing", "ms"),
    ("lossy_path", "untouched_flows_lost_nothing", None),
    ("sender_catch_up", "no_emulation_drops", "ms"),
    ("ovsdb_stats_lag", "no_emulation_drops", "s"),
    ("faulted_links", "no_emulation_drops", None),
    ("aborted_job", "reliable_qps_delivered_or_dead", None),
)


def emulation_total(fid):
    """A fidelity verdict's emulation drops (None: no verdict)."""
    return None if fid is None else (fid.get("emulation_drops") or {}).get("total")


def verdict_excuses(fid, no_lag, no_faults):
    """(ovsdb_stats_lag, faulted_links) excused frames from three verdicts of one
    window: with every rule, without the statistics lag, without either."""
    a, b, c = (emulation_total(v) for v in (fid, no_lag, no_faults))
    if a is None or b is None or c is None:
        return None, None
    return b - a, c - b


def table(values, excused):
    """drill.json's ``allowances``: {name: {invariant, value, unit, excused_packets}}
    for the rules with a value (None: not in force in this soak)."""
    return {name: {"invariant": inv, "value": values[name], "unit": unit,
                   "excused_packets": excused.get(name)}
            for name, inv, unit in RULES if values.get(name) is not None}


def lines(allowances):
    """The printout's lines: one per allowance in force."""
    out = []
    for name, a in allowances.items():
        v = a["value"]
        value = f"{v:g} {a['unit']}" if a["unit"] else ("on" if v is True else str(v))
        n = a["excused_packets"]
        out.append(f"allowance {name} ({value}): excused "
                   f"{'?' if n is None else n} packets of {a['invariant']}")
    return out
