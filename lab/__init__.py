"""What the emulator, the controller and the traffic engine share: the run's mode names.

``modes``: the enums of load balancing, failover, routing, transport,
congestion control, flow control and ECN marking, one default each.

May import: the standard library only (it sits below ``emulator``,
``controller`` and ``traffic``).
"""
