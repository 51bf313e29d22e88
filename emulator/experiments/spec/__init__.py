"""A run's specification from the command line or a file, and the options behind it.

``build`` (the ``RunSpec``, emulator.fabric.runspec, of a command line, or of
a ``run.yaml`` with flags over its fields: what the workload implies resolved,
everything checked before anything is built, exit 2), ``fabric`` (the fabric
options and loading: file, preset, layout, servers, controller), ``options``
(the options every measuring command shares), ``ccparams`` (``--cc-param``),
``scenario`` (fault schedules: ``--fault`` specs and scenario files).

May import: emulator.errors, emulator.fabric, emulator.dataplane (parsers of
option values), lab, traffic, and experiments' workloads and shared (the jobs
file) for their parsers.
"""
