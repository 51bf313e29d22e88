"""Failover drills (``emulator drill``): faults under probe traffic, measured.

``drill`` (the command: modes, repeats, faults, convergence), ``drill_probes``
(which flows on which paths), ``drill_traffic`` (the probes, sent by the
traffic engine), ``drill_stats`` (loss windows and gaps, pure) and
``drill_collective`` (a drill under a collective: would the job have died).

May import: the shared modules of ``experiments`` (options, fidelity,
budget, calibrate, scenario, watch), ``experiments.workloads``,
``experiments.probe.prober``'s pure path choice, ``emulator.dataplane``,
``emulator.report``, ``emulator.fabric``, ``emulator.errors``, ``traffic``.
"""
