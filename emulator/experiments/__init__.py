"""What runs on a built fabric, and what its measurements mean.

Commands: ``run`` (the default mix or a collective), ``drill`` (faults under
probe traffic), ``compare`` and ``planes`` (load-balancing modes, dual- vs
single-plane), ``check`` (a controller app held to checks), ``calibrate``
(the machine's faithful budget).  Traffic: ``mix`` and ``drill_traffic``
drive the traffic engine, ``collective`` the ranks, ``background`` iperf3.
Pure parts, unit-tested without root: ``workload`` (who sends to whom),
``fidelity`` (the verdict), ``budget`` (the machine's budget arithmetic),
``scenario`` (fault schedules), and the statistics of ``compare`` and
``drill``.

May import: ``emulator.errors``, ``emulator.fabric``, ``emulator.dataplane``,
``emulator.report``, the ``traffic`` package.  Only ``emulator.__main__``
imports this package.
"""
