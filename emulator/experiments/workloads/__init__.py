"""What runs on a built fabric: the traffic mix, collectives, background flows.

``workload`` (who sends to whom in the mix, pure), ``mix`` (the mix, sent
by one traffic engine), ``collective`` (nccl-tests-style collectives, one
rank per host), ``background`` (iperf3 alongside), ``ccparams``
(``--cc-param``: the NICs' congestion-control parameters), and training
jobs from SimAI / AICB workload files, all pure: ``simai`` (the file
parser), ``job`` (ranks' op programs, scale, summary), ``job_ranks``
(placement and groups), ``job_time`` (ring bytes, the analytic estimate).

May import: the shared modules of ``experiments`` (fidelity, watch),
``emulator.dataplane``, ``emulator.fabric``, ``emulator.errors``,
``traffic``.
"""
