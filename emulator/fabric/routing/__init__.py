"""The routed fabric's plan: eBGP between the switches (RFC 7938), pure.

Under ``--control bgp`` every switch is a Linux router running FRR.  What a
router needs is a function of the fabric model, planned here before anything
is built and written into topology.json:

* ``asn``: the ASN plan of RFC 7938 section 5.2.1 (one private ASN for the
  top tier, one per second-tier cluster, one per ToR);
* ``addresses``: loopbacks (router ids), a /31 on every fabric link, a /24 of
  host links per leaf (each host link a /31 of it), one router MAC per switch,
  the hosts' gateways, routes and source-based rules, the kernel hash seeds;
* ``frrconf``: each router's zebra, bgpd and bfdd configuration text;
* ``bfd``: ``--bfd INTERVALxMULT``, detection bounds and the geometric
  expectation of detection under random loss;
* ``fib``: which switches' FIBs still route through a dead link, replayed
  from their timestamped route events (the convergence arithmetic).

May import: ``emulator.errors``, ``emulator.fabric``'s model and units,
``lab.modes``.
"""
