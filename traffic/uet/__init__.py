"""Ultra Ethernet Transport (UEC 1.0.1) on the wire and its state machines.

``frames`` (the layout of every header in one place; data frames built once with
scapy, patched per packet, and parsed), ``control`` (ACK_CC, NACK and control
frames), ``scapy_layer`` (a scapy dissector of them, bound to UDP 4793),
``pds`` (RUD and ROD delivery of one PDC, sender and receiver, pure), ``ev``
(entropy values: oblivious spraying and REPS, pure), ``cc`` (NSCC and RCCC:
congestion control, pure: the caller passes the time), ``pdcs`` (a NIC's
PDCs, their set-up and teardown, glued to the engines as ``roce.qps`` is) and
``inbound`` (what those PDCs do with an arriving frame).
docs/uet.md describes the model.

May import: the standard library, scapy, ``lab.modes`` and ``traffic.roce`` (the
probe header and the CRC helpers the RoCE frames share); nothing else of ``traffic``.
"""
