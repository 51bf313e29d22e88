"""A NIC in a namespace: what it sends, how fast, and what it receives.

``entropy`` (per-packet path entropy, pure), ``pacing`` (a token bucket on an
injected clock, pure), ``sendq`` (per-QP send queues, pure), ``sender`` (the
paced AF_PACKET sender), ``receiver`` (the AF_PACKET receiver), ``accounting``
(per-flow loss, duplicates, reordering and disruptions, pure), ``netns``
(sockets opened in other network namespaces from one process).

May import: the standard library and ``traffic.roce``.
"""
