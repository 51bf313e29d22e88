"""The process-per-rank engine of collectives (``python -m traffic rank``).

``collectives`` (ring, all-to-all and broadcast schedules, pure), ``config``
(one rank's configuration), ``barrier`` (the ranks' start barrier and next-hop
MAC resolution), ``rank`` (one rank: the process started in each host's
namespace), ``outbound`` (a NIC's RDMA WRITE packets, their frames, PSNs
and path entropy; the job engine's NICs send the same), ``report`` (the
nccl-tests style table from the ranks' files).

May import: the standard library, ``traffic.roce`` and ``traffic.nic``.
"""
