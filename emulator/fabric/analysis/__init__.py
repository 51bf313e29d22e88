"""What a fabric can carry, computed from its plan (pure): no traffic, no machine.

``bounds`` (upper bounds on a traffic matrix's throughput over a path set, by
linear programming), ``fluid`` (the fair shares of a dragonfly's fixed-split
routing modes: an estimate), ``survival`` (which host pairs keep a path after a
fault).

May import: ``emulator.errors``, ``emulator.fabric``, ``lab`` and SciPy.
"""
