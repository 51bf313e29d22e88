"""One fabric on several servers: ssh, workers, tunnels, traffic on each server.

``servers`` reaches the servers (ssh, preflight, TLS, clean), ``worker`` is
the part of a run on one server (``python -m
emulator.dataplane.cluster.worker``), ``cluster_net`` stands where
``net.FabricNet`` stands in a one-machine run, and ``cluster_traffic``
drives one traffic engine per server.  The rest of the emulator reaches it
only through the net's interface (``ClusterNet``: ``detector``,
``set_links``, ``cut``, ``engines``, ...), never through its internals.

May import: everything else in ``dataplane`` but the session,
``emulator.errors``, ``emulator.fabric``, ``traffic``.
"""
