"""A training job's lines in the run's summary and report.md (``results["training"]``)."""

import os

BAR = 40                               # characters of an iteration's bar


def training_lines(t):
    """The training part of the run's summary: times in both scales and a bar per
    iteration (compute # vs exposed communication =)."""
    lines = [f"training: {os.path.basename(t['workload'])} ({t['policy']}), {t['ranks']} ranks "
             f"on {t['endpoints']} NICs, {t['layers']} layers; sizes / {t['size_scale']:g}, "
             f"compute x {t['compute_scale']:g}",
             f"  iteration {t['iteration_s']:.3f}s emulated = {t['real_iteration_s'] * 1e3:.3f}"
             f" ms real-equivalent (compute {t['compute_s']:.3f}s, exposed communication "
             f"{t['exposed_comm_s']:.3f}s; estimate {t['estimate']['iteration_s']:.3f}s, "
             f"exposed {t['estimate']['exposed_comm_s']:.3f}s)"]
    for k, it in enumerate(t["per_iteration"]):
        n = max(it["time_s"], 1e-9)
        c = round(BAR * it["compute_s"] / n)
        lines.append(f"  it{k:<3d} |{'#' * c}{'=' * (BAR - c)}| {it['time_s']:.3f}s")
    lines.append("         # compute on the critical path, = exposed communication")
    for kind, g in t["groups"].items():
        bw = f"{g['busbw_Mbps']:.1f} Mbit/s busbw" if g["busbw_Mbps"] else "no network"
        lines.append(f"  {kind:6s} {g['collectives']:5d} collectives, "
                     f"{g['real_bytes'] / 2**20:10.1f} MiB real, {bw}")
    lines.append(f"  wrong chunks {t['wrong']}, unknown rows {t['unknown_rows']}, "
                 f"latency-bound collectives {t['latency_bound_count']}")
    return lines
