"""Failover drills (``emulator drill``): faults under traffic, measured.

``drill`` (the command: failover modes, repeats, faults under probes),
``probes`` (which probe flows on which paths, at which rate), ``traffic``
(the probes, sent by the traffic engine), ``stats`` (loss windows, gaps and
the verdicts of drills under workloads, pure), ``adaptive`` (what the
switches' own adaptive routing did), ``agent`` (repairs against the
switch-agent model), ``workload`` (``drill workload``: under a collective or
a training job), ``chaos`` with ``chaos_job`` (``drill chaos``: random faults
for minutes, under probes and reliable jobs, checked against invariants).

May import: ``experiments.measure``, ``experiments.spec``,
``experiments.workloads``, ``experiments.training``, ``experiments.repeat``,
``experiments.ui``, ``emulator.dataplane``, ``emulator.report``,
``emulator.fabric``, ``emulator.errors``, ``lab``, ``traffic``; never
``experiments.probe``.
"""
