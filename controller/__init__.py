"""The fabric's OpenFlow controller, Faucet-style.

* ``topology``   — the topology document (docs/topology-schema.md) as a frozen object;
* ``messages``   — abstract, hashable OpenFlow state (FlowMod, GroupMod, actions);
* ``policy``     — pure routing policy: desired per-switch state and diffs;
* ``fakeswitch`` — a fake flow/group table for unit tests;
* ``osken_app``  — the event shim; with ``ofcodec`` (messages <-> os-ken OpenFlow 1.5
  objects and bytes) and ``launch`` (the process: os-ken with our app or a user's)
  the only modules importing os_ken.

Run it with ``python -m controller --topology PATH``.
"""
