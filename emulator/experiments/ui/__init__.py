"""The fabric seen in a browser: a live page of a running fabric, and report.html.

``model`` (the drawing's nodes and links, named as the project names them,
and which interface holds each link direction's queue), ``recorder`` (samples
cheap counters every 500 ms into a series), ``server`` (a token-guarded,
read-only web server on 127.0.0.1 streaming samples as server-sent events),
``live`` (``--ui`` on run, drill and compare, and report.html for every
results directory) and ``cli`` (``emulator ui RESULTS_DIR``).  The page
itself is built by ``emulator.report.page``.

May import: ``emulator.dataplane`` (the counters and link names of
``dataplane.observe`` and ``dataplane.faults``), ``emulator.report``,
``emulator.fabric``, ``emulator.errors``.
"""

from emulator.experiments.ui.live import attached  # noqa: E402,F401 (drill: ui.attached)
