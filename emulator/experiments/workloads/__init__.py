"""What runs on a built fabric: the traffic mix, collectives, background flows.

``workload`` (who sends to whom in the mix, pure), ``mix`` (the mix, sent
by one traffic engine), ``collective`` (nccl-tests-style collectives, one
rank per host), ``background`` (iperf3 alongside) and ``ccparams``
(``--cc-param``: the NICs' congestion-control parameters).

May import: the shared modules of ``experiments`` (fidelity, watch),
``emulator.dataplane``, ``emulator.fabric``, ``emulator.errors``,
``traffic``.
"""
