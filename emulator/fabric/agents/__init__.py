"""Switch agents, the pure part: the timing model, the published profiles, the prediction.

``model``: a switch agent's parameters (``Params``), the changes it installs
(``Change``), its flow table's occupancy by priority (``Table``) and the
arithmetic of when each OpenFlow message takes effect (``Agent``).
``profiles``: the named models (``hardware`` and the switches Kuźniar et al.
and He et al. measured), each number with its source.  ``predict``: a
drill's convergence computed before it runs, from a model, the repair the
controller's policy computes offline and a calibration of the ideal agent.
``emulator.fabric.switch_agent`` (fleets, parsing) re-exports what callers use.

May import: emulator.errors, the standard library.
"""
