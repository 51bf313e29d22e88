"""RoCEv2 on the wire and its transports' state machines.

``frames`` (RoCEv2 frame templates built once with scapy, patched per packet),
``rcframes`` (ACK, NAK and CNP frames), ``transport`` (the RC transport of one
QP, pure), ``qps`` (a rank's requesters and responders), ``dcqcn`` and
``timely`` (rate control of one QP, pure: the caller passes the time).

May import: the standard library and scapy; nothing else of ``traffic``.
"""
