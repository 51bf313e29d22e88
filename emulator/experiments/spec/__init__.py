"""A run's specification from the command line or a file, and the options behind it.

``build``: the ``RunSpec`` (emulator.fabric.runspec) of a command line, or of
a ``run.yaml`` with flags over its fields, with what the workload implies
resolved and everything checked before anything is built (exit 2).

May import: emulator.errors, emulator.fabric, emulator.dataplane (parsers of
option values), lab, and experiments' workloads for their parsers.
"""
