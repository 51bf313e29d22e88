"""Packet-level emulator of AI-cluster fabrics on Mininet and Open vSwitch.

The model (``emulator.model``) is pure data: nodes, ports and links with
rates.  It comes from a YAML fabric file (``emulator.spec``) or a preset
(``emulator.presets``); ``emulator.addressing`` derives the deterministic
addressing plan (IPs, MACs, datapath ids, OpenFlow ports) and the topology
JSON document the controller loads.  ``emulator.net`` turns the model into
namespaces, veths and OVS bridges; ``emulator.runner`` drives a run.
"""

PROJECT = "fabric-lab"
