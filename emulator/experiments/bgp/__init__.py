"""What the experiments measure of a routed fabric (``--control bgp``).

* ``drill``: a drill's BGP side: which parts of the fabric a fault kills,
  BGP's convergence (until no router's FIB routes through them, and the last
  router), detection (carrier or BFD, from the FIB watch and bfdd's log),
  the UPDATEs sent, flows local to the fault or not, exposed to a shrinking
  ECMP group or not, and the fabric back to normal before the next repeat.

May import: ``emulator.errors``, ``emulator.fabric``, ``emulator.dataplane``
(its routed fabric, faults), ``emulator.experiments.measure`` and ``.spec``,
``lab.modes``.
"""
