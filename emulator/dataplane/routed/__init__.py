"""The routed fabric (``--control bgp``): Linux routers running FRR instead of bridges.

* ``net``: ``RoutedNet``, the fabric of a BGP run: every switch a Mininet node
  (its own network and mount namespaces) forwarding IPv4 in the kernel, its
  ports addressed from the routed plan (``fabric.routing``), shaped as on the
  OpenFlow fabric; hosts with per-leaf addresses, a gateway, source-based
  rules;
* ``frr``: the FRR daemons of every router (zebra, bfdd, bgpd), their
  configuration, pid files, logs and vty sockets under the run's state
  directory; start, stop, crash and restart;
* ``bgp``: what the routers' BGP says: sessions and their state, time to
  Established, UPDATEs sent, one leaf's table for one destination;
* ``fib``: the routers' FIB events (``system.fibmon``), the kernel's ECMP
  path of a flow, and the convergence of a fault (``fabric.routing.fib``);
* ``setup``: the Session's steps under BGP.

May import: ``emulator.errors``, ``emulator.fabric``, the rest of
``emulator.dataplane`` (its system layer, links, observe), ``lab.modes``,
``traffic.nic.netns``.
"""
