"""What a fabric can carry, computed from its plan (pure): no traffic, no machine.

``fluid`` (a dragonfly's routing modes' fluid ceilings: max-min fair rates over
each mode's paths), ``survival`` (which host pairs keep a path after a fault).

May import: ``emulator.errors``, ``emulator.fabric`` and ``lab``.
"""
