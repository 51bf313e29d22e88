"""Side-by-side comparisons (``emulator compare``) on one fabric and one workload.

``compare`` (load-balancing modes on a collective, its repetitions and table),
``stream`` (each mode with a competing stream or a cut), ``training`` (the
modes under a training job), ``routing`` (``compare routing``: a dragonfly's
routing modes), ``rails`` (``compare fabrics``: rail-only vs rail-optimized),
``planes`` with ``planes_stats`` (``compare planes``: HPN dual-plane vs
single-plane, and its pure arithmetic), ``congestion`` (``compare cc``),
``lossless`` (``compare lossless``: PFC against the lossy fabric).

May import: ``experiments.measure``, ``experiments.spec``,
``experiments.workloads``, ``experiments.training``, ``experiments.repeat``,
``experiments.ui``, ``emulator.dataplane``, ``emulator.report``,
``emulator.fabric``, ``emulator.errors``, ``lab``, ``traffic``.
"""
