"""Shared clusters: several training jobs and background traffic on one fabric.

``jobsfile`` (the jobs file: jobs, placement, start, iterations, class, and
the background flows; validated, every error naming its line; pure),
``placement`` (hosts and GPUs for every job by its policy: packed, spread,
random, explicit; collisions and capacity; pure), ``merge`` (every job's and
background flow's ranks in one job-engine document, and the engine's result
cut back into each job's; pure), ``background`` (storage, checkpoint and
stream flows as ranks on a schedule, and what each flow achieved; pure),
``shares`` (per-flow bytes joined with traced paths: each job's and class's
share of the hottest uplinks; pure), ``launch`` (a shared run on a
Session: together, then each job alone with ``--baseline``; slowdowns),
``report`` (the text table), ``compare`` (``compare jobs``: placement
policies x load-balancing modes), ``drill`` (a fault during several jobs).

May import: emulator.errors, emulator.fabric, emulator.dataplane, emulator.report, lab,
traffic, and experiments' measure, spec, repeat, training and workloads rooms.
"""
