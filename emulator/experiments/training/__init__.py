"""Training jobs from SimAI / AICB workload files, on the fabric.

``simai`` (the workload file's plain text into a ``Workload``, pure), ``job``
(ranks' op programs, scale, summary, pure), ``ranks`` (placement of ranks on
hosts and their groups, pure), ``timing`` (ring bytes and the analytic
iteration time, pure), ``rails`` (rank-aligned collectives on rail fabrics as
job-engine documents, pure), ``hops`` (the hop-latency calibration and the
real-equivalent iteration's bandwidth and latency parts, pure), ``accounts``
(the critical rank's time per row and phase, for EndToEnd.csv, pure),
``launch`` (a job on a running fabric: the job engine, its results).

May import: emulator.errors, emulator.fabric, emulator.dataplane, emulator.report, lab,
traffic, and experiments' measure, spec and workloads rooms.
"""
