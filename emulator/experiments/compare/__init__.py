"""Side-by-side comparisons (``emulator compare``) on one fabric and one workload.

``compare`` (load-balancing modes) with ``lb_table`` (its table),
``congestion`` (``--cc``), ``lossless_cmp`` (``--lossless on,off``),
``planes`` with ``planes_stats`` (HPN dual-plane vs single-plane).

May import: the shared modules of ``experiments``, ``experiments.workloads``,
``emulator.dataplane``, ``emulator.report``, ``emulator.fabric``,
``emulator.errors``, ``traffic``.
"""
