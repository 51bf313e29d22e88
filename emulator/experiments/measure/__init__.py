"""What a measurement means: statistics, traced paths, queues, convergence and fidelity.

Every command measures through this room: ``stats`` (percentiles, spread,
fairness), ``fidelity`` (the verdict: the network's figure or the
emulator's), ``watch`` (drop counters and CPU around a measurement),
``budget`` (this machine's faithful budget: search, arithmetic, cache key).

May import: emulator.errors, emulator.fabric, emulator.dataplane, lab and
traffic; nothing else of emulator.experiments.
"""
