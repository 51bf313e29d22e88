"""What traffic a command offers the fabric: the mix, collectives, background flows.

``workload`` (who sends to whom in the default mix, pure), ``mix`` (the mix,
sent by one traffic engine), ``collective`` (nccl-tests-style collectives,
one rank per host), ``patterns`` (a dragonfly's adversarial and permutation
patterns), ``background`` (iperf3 flows alongside), ``stream`` (a competing
stream during a collective), ``cut`` (a link cut during a collective).

May import: ``experiments.measure``, ``experiments.spec``,
``emulator.dataplane``, ``emulator.fabric``, ``emulator.errors``, ``lab``,
``traffic``.
"""
