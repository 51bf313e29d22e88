"""Packet-level emulator of AI-cluster fabrics on Mininet and Open vSwitch.

The model (``emulator.fabric.model``) is pure data: nodes, ports and links with
rates.  It comes from a YAML fabric file (``emulator.fabric.spec``) or a preset
(``emulator.fabric.presets``); ``emulator.fabric.addressing`` derives the deterministic
addressing plan (IPs, MACs, datapath ids, OpenFlow ports) and the topology
JSON document the controller loads.  ``emulator.dataplane.net`` turns the model into
namespaces, veths and OVS bridges; ``emulator.dataplane.session.Session`` owns a
running fabric, and ``emulator.experiments`` runs and measures traffic on it.
The layers, lowest first (each may import only those before it): ``errors``,
``fabric``, ``dataplane``, ``report``, ``experiments``, then the command line
(``__main__``).
"""

PROJECT = "fabric-lab"
