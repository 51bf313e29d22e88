"""Black-box probing (``emulator probe``): find a silently lossy link, isolate it.

``probe`` (the command on a running fabric) and ``prober`` (the pure
logic: paths, suspects, verdicts).

May import: ``experiments.measure``, ``experiments.spec``,
``experiments.workloads``, ``emulator.dataplane``, ``emulator.fabric``,
``emulator.errors``, ``lab``, ``traffic``; never ``experiments.drill``.
"""
