"""The fabric model and a run's specification: pure data, no I/O beyond reading files.

A fabric is nodes (hosts, leaves, spines, super-spines, NIC switches), ports
and links with rates (``model``); it comes from a validated YAML file
(``spec``) or a preset (``presets``: parametrised builders); ``addressing``
derives the deterministic plan every other layer works from (IPs, MACs,
datapath ids, OpenFlow ports, Linux names).  ``runspec``: a run's whole
specification (the fabric and every setting).  ``layout`` (datapath
instances), ``cluster`` (servers), ``lossless`` (PFC's pure state),
``switch_agent`` (switches' control-plane timing models), ``units``, and
``analysis`` (what the fabric can carry: LP bounds, fair shares, surviving pairs).

May import: ``emulator.errors``, ``lab`` and this package.  Nothing here
touches the machine, so all of it is unit-tested without root.
"""
