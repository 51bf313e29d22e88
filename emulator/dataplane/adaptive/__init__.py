"""Adaptive routing in the switch's data plane: dynamic load balancing (``--lb
dlb``, per flowlet) and per-packet choice of the shortest local queue (``--lb
packet``), as a switch ASIC does them, in eBPF at each switch port.

- ``model``: pure: which switch ports decide, each multi-path route's
  candidate ports, the DSCP marks that carry a choice to the output flow, the
  flowlet timer and the quality bands in frame times, the C structs as Python
  packs them, and the decisions' reading (counts, reaction times);
- ``stage``: the run's stage: its maps, one program pair per port, the
  detection model's news of a dead port, and the counts at the end;
- ``ugal``, ``ugal_stage``: a dragonfly's UGAL (``--routing ugal|ugal-l``):
  the source router's per-flowlet choice between the minimal route and a
  Valiant candidate by their queues, with the stage's machinery and its own
  program (``dataplane/bpf/ugal.bpf.c``).

The programs are C (``dataplane/bpf/ar.bpf.c``); docs/load-balancing.md has
the design and the measurements.

May import: ``emulator.errors``, ``emulator.fabric``, ``emulator.dataplane.bpf``,
``emulator.dataplane.links``, ``emulator.dataplane.lossless``,
``emulator.dataplane.system``.
"""
