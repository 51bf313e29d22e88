"""The chaos soak's accounting (``drill chaos``): its report and its invariants.

``report`` (a row per fault, totals, the invariants the traffic decides),
``faultlog`` (``every_fault_reported`` and ``every_fault_repaired``: the
injector's own log, faults.jsonl, against drill.json's rows), ``files``
(``results_complete``: every results file whole), ``allowances`` (each rule
that excuses packets from an invariant, named, with how many it excused).
Each is pure over what it is given, so a test can feed it a violation.

May import: ``experiments.measure``, ``experiments.spec``,
``emulator.dataplane``, ``emulator.errors``, ``lab``, ``traffic``.
"""
