"""The fabric model: pure data, no I/O beyond reading a fabric file.

A fabric is nodes (hosts, leaves, spines, super-spines, NIC switches), ports
and links with rates (``model``); it comes from a validated YAML file
(``spec``) or a preset (``presets``, ``presets_clos``, with typed parameters
in ``params``); ``addressing`` derives the deterministic plan every other
layer works from (IPs, MACs, datapath ids, OpenFlow ports, Linux names).

May import: ``emulator.errors`` and this package.  Nothing here touches the
machine, so all of it is unit-tested without root.
"""
