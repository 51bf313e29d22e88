"""Named switch-agent models, each number with where it comes from, and the published
micro-benchmark each one must reproduce (bench/bench_switch_agents.py).

Sources (docs/switch-agents.md quotes what of them is stored and what is not):

* He et al., "Measuring Control Plane Latency in SDN-enabled Switches", SOSR
  2015 (HE).  The paper itself is not in the stored references; its
  figures are quoted from two public reading notes of it that are: per-rule
  insertion 3.12 ms ("insertion: 3.12 ms per rule"), the paper's summary
  "3 ms per rule for insertion and 30 ms per packet for modification", a
  modification "2X higher than insertion" and "independent of rule
  priority, table occupancy, and burst size", and the inbound latency (a
  message the switch's CPU sends the controller) "8 ms per packet on average
  on Intel".  The notes describe the priority dependence (insertions into a
  table of rules of other priorities grow linearly with its occupancy;
  increasing priority order is the slow one on the Broadcom OF1.3 and IBM
  switches, decreasing on the Intel one) without its numbers.
* Kuźniar et al., "What You Need to Know About SDN Flow Tables", PAM 2015,
  extended as Kuźniar, Perešíni, Kostić, Canini, Computer Networks 136
  (2018) (KU).  Stored: the thesis chapter's Table 3.1 (data plane
  synchronicity): the HP 5406zl's data plane "often falls behind up to
  250 ms" the barrier replies, the Pica8 P-3290 "reorders + behind up to
  400 ms", the Dell 8132F is "in sync with control plane".  The update-rate
  tables of the paper are not stored.

A number not in those stored texts is not in a profile: it is 0 (no delay)
and the docs say so.  Of the papers themselves only the openings are
reachable (title and abstract of He et al. at typeset.io, of the Computer
Networks paper at pdfslide.us): no table or figure of either.  So every
``BENCH`` figure is one its profile was built from (``independent`` is False
for each): the benchmarks check the emulation, not the model.
"""

from collections import namedtuple

from emulator.fabric.agents.model import ADD, MODIFY, Params

HE = "He et al., SOSR 2015"
KU = "Kuźniar et al., PAM 2015 / Computer Networks 2018, Table 3.1 of the thesis chapter"

# A micro-benchmark: ``rules`` changes ``op`` of one priority into an empty table,
# through the proxy against Open vSwitch; ``measure`` "per_rule" (first change sent
# -> barrier reply, over the rules) or "lag" (barrier reply -> the last rule in Open
# vSwitch's table); ``published_ms`` the figure to reproduce.
Bench = namedtuple("Bench", "op rules measure published_ms source")

INSERT_MS = 3.12                    # HE: "insertion: 3.12 ms per rule"

HARDWARE = Params(table_rate=round(1e3 / INSERT_MS, 3), modify_factor=2.0, event_ms=8.0)
HE_SUMMARY = Params(table_rate=round(1e3 / 3.0, 3), modify_factor=10.0, event_ms=8.0)
KU_HP = Params(early_barrier=False, dp_lag_ms=250.0)
KU_PICA8 = Params(early_barrier=False, dp_lag_ms=400.0)

PRESETS = {
    "hardware": HARDWARE,
    "he-sosr15": HE_SUMMARY,
    "kuzniar-hp5406zl": KU_HP,
    "kuzniar-pica8": KU_PICA8,
}

ABOUT = {
    "hardware": "a typical switch: He et al.'s per-rule insertion (3.12 ms) and "
                "modification (2x), their 8 ms from the switch's CPU to the controller, "
                "barriers honoured (Kuźniar et al.'s Dell 8132F)",
    "he-sosr15": "He et al.'s summary figures: 3 ms per insertion, 30 ms per "
                 "modification, 8 ms to the controller",
    "kuzniar-hp5406zl": "Kuźniar et al.'s HP 5406zl: barrier replies 250 ms ahead of "
                        "the data plane",
    "kuzniar-pica8": "Kuźniar et al.'s Pica8 P-3290: barrier replies 400 ms ahead of "
                     "the data plane (its reordering is not modelled)",
}

# where each number of each profile comes from; "-": not in the stored sources (0)
PROVENANCE = {
    "hardware": {
        "table_rate": f"{HE}: insertion 3.12 ms per rule (1000 / 3.12 per s)",
        "modify_factor": f"{HE}: modification 2x insertion, independent of priority, "
                         "occupancy and burst",
        "event_ms": f"{HE}: inbound latency 8 ms per packet (Intel); a port status is "
                    "such a message",
        "early_barrier": f"{KU}: Dell 8132F in sync with the control plane",
        "latency_ms": "- (He et al.'s per-rule figures are from the controller: the "
                      "channel is in them)",
        "processing_ms": "- (in the per-rule figures)",
    },
    "he-sosr15": {
        "table_rate": f"{HE}: 3 ms per rule for insertion (1000 / 3 per s)",
        "modify_factor": f"{HE}: 30 ms per modification = 10 insertions",
        "event_ms": f"{HE}: inbound latency 8 ms per packet (Intel)",
        "shift_ms": "- (the slope of the priority figure is not in the stored notes)",
        "latency_ms": "- (in the per-rule figures)",
        "processing_ms": "- (in the per-rule figures)",
    },
    "kuzniar-hp5406zl": {
        "dp_lag_ms": f"{KU}: HP 5406zl falls behind the barrier replies up to 250 ms "
                     "(indefinitely in corner cases, up to 22 s)",
        "table_rate": "- (the update-rate figures are not in the stored text)",
        "event_ms": "- (not measured there)",
    },
    "kuzniar-pica8": {
        "dp_lag_ms": f"{KU}: Pica8 P-3290 reorders and falls behind up to 400 ms",
        "table_rate": "- (the update-rate figures are not in the stored text)",
        "event_ms": "- (not measured there)",
    },
}

BENCH = {
    "hardware": Bench(ADD, 100, "per_rule", INSERT_MS, f"{HE}: insertion 3.12 ms per rule"),
    "he-sosr15": Bench(MODIFY, 50, "per_rule", 30.0,
                       f"{HE}: 30 ms per packet for modification"),
    "kuzniar-hp5406zl": Bench(ADD, 100, "lag", 250.0,
                              f"{KU}: HP 5406zl behind the barrier replies up to 250 ms"),
    "kuzniar-pica8": Bench(ADD, 100, "lag", 400.0,
                           f"{KU}: Pica8 P-3290 behind up to 400 ms"),
}


# The published figures each profile's parameters are built from, by parameter (the
# figures PROVENANCE quotes): table_rate from ms per insertion, modify_factor from a
# ratio or from (ms per insertion, ms per modification), the others in ms.
BUILT_FROM = {
    "hardware": {"table_rate": (INSERT_MS,), "modify_factor": (2.0,), "event_ms": (8.0,)},
    "he-sosr15": {"table_rate": (3.0,), "modify_factor": (3.0, 30.0), "event_ms": (8.0,)},
    "kuzniar-hp5406zl": {"dp_lag_ms": (250.0,)},
    "kuzniar-pica8": {"dp_lag_ms": (400.0,)},
}


def built_from(name):
    """Every published figure ``name``'s parameters were built from."""
    return {f for figs in BUILT_FROM[name].values() for f in figs}


def independent(name):
    """Whether ``name``'s micro-benchmark checks a published figure the profile was not
    built from (a check of the model).  Otherwise it checks only that the proxy and Open
    vSwitch deliver the model's times (a consistency check)."""
    return BENCH[name].published_ms not in built_from(name)


def listing():
    """The profiles, one line each (``--switch-agent list``)."""
    width = max(map(len, PRESETS))
    lines = [f"{name:<{width}}  {ABOUT[name]}" for name in PRESETS]
    lines.append(f"{'ideal':<{width}}  no model: a change applies at once (Open vSwitch)")
    lines.append(f"{'FILE':<{width}}  a YAML file of parameters (base: NAME starts from a "
                 "profile); docs/switch-agents.md")
    return "\n".join(lines)
