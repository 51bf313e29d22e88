"""What runs on a built fabric, and what its measurements mean, in rooms by stage.

``commands`` (the registry of fabric commands and sub-commands) runs a
command: ``spec`` builds its RunSpec (options, fault schedules, congestion
parameters), ``workloads`` and ``training`` say what traffic it offers,
``measure`` says what the figures mean (statistics, traced paths, queues,
convergence, fidelity, the machine's budget), ``repeat`` runs modes side by
side with repeats, and the commands themselves are ``run``, ``check``,
``calibrate``, ``cli`` (``run --cli``), ``drill``, ``compare``, ``probe``;
``ui`` serves the live page and writes report.html.

May import: ``emulator.errors``, ``emulator.fabric``, ``emulator.dataplane``,
``emulator.report``, ``lab`` and ``traffic``.  Only ``emulator.__main__``
imports this package.
"""
