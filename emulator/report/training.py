"""A training job's lines in the run's summary and report.md (``results["training"]``)."""

import os

BAR = 40                               # characters of an iteration's bar


def training_lines(t):
    """The training part of the run's summary: times in both scales and a bar per
    iteration (compute # vs exposed communication =)."""
    lines = [f"training: {os.path.basename(t['workload'])} ({t['policy']}), {t['ranks']} ranks "
             f"on {t['endpoints']} NICs, {t['layers']} layers; sizes / {t['size_scale']:g}, "
             f"compute x {t['compute_scale']:g}",
             f"  iteration {t['iteration_s']:.3f}s emulated (compute {t['compute_s']:.3f}s, "
             f"exposed communication {t['exposed_comm_s']:.3f}s; estimate "
             f"{t['estimate']['iteration_s']:.3f}s, exposed "
             f"{t['estimate']['exposed_comm_s']:.3f}s)",
             _real_line(t)]
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
    if t.get("layout"):
        lines.append(f"  layout: {t['layout']['text']}")
    return lines


def _real_line(t):
    hop = t.get("hop") or {}
    if hop.get("emulated_s") is None:
        return (f"  real-equivalent {t['real_iteration_s'] * 1e3:.3f} ms (emulated / r/s: no "
                f"hop calibration, the emulator's hops are in it)")
    return (f"  real-equivalent {t['real_iteration_s'] * 1e3:.3f} ms = bandwidth "
            f"{t['real_bandwidth_s'] * 1e3:.3f} ms + latency {t['real_latency_s'] * 1e3:.3f} ms"
            f" ({t['ring_steps']:g} ring steps x {hop['real_s'] * 1e6:g} us; emulated hop "
            f"{hop['emulated_s'] * 1e3:.2f} ms)")


# --- EndToEnd.csv (SimAI's Layer::report) and layers.csv (the lab's own) ----------------

PHASES = ("fwd", "wg", "ig")
E2E_COLUMNS = ("fwd compute", "wg compute", "ig compute", "fwd exposed comm",
               "wg exposed comm", "ig exposed comm", "fwd total comm", "algbw", "busbw",
               "wg total comm", "algbw", "busbw", "ig total comm", "algbw", "busbw")
LAYER_COLUMNS = ("layer_name", "fwd compute", "wg compute", "ig compute", "fwd exposed comm",
                 "wg exposed comm", "ig exposed comm",
                 *(f"{ph} {c}" for ph in PHASES
                   for c in ("total comm", "bytes", "algbw", "busbw")))


def _num(v):
    return "NONE" if v is None else f"{v:.6f}"     # SimAI writes std::to_string


def write_end_to_end(path, run, rows, total_compute, total_time):
    """EndToEnd.csv as SimAI's ``Layer::report`` writes it (aliyun/SimAI,
    astra-sim/workload/Layer.cc): a header naming the run, one line per row (``rows``:
    (name, 15 values in SimAI's column order, finished-at)), a SUM line adding the
    times with NONE for the bandwidths, and the run's totals line (exposed
    communication = total time - total compute).  Microseconds and GB/s (2^30)."""
    with open(path, "w") as f:
        f.write(",".join(["layer_name", run, *E2E_COLUMNS, "workload finished at"]) + "\n")
        sums = [0.0] * 15
        for name, vals, finished in rows:
            sums = [a + b for a, b in zip(sums, vals)]
            f.write(",".join([name, run, *map(_num, vals), _num(finished)]) + "\n")
        bw = {7, 8, 10, 11, 13, 14}
        f.write(",".join(["SUM", run, *(_num(None if i in bw else v)
                                         for i, v in enumerate(sums))]) + "\n")
        f.write(f"total exposed comm,{_num(total_time - total_compute)},total comp,"
                f"{_num(total_compute)},total time,{_num(total_time)}\n")


def write_layers(path, rows):
    """layers.csv: per row (``rows``: (name, 18 values in ``LAYER_COLUMNS`` order)) the
    median over iterations of each time and of the bytes per iteration, and bandwidths
    weighted by bytes over the whole run; a SUM row the same over every row."""
    with open(path, "w") as f:
        f.write(",".join(LAYER_COLUMNS) + "\n")
        for name, vals in rows:
            f.write(",".join([name, *map(_num, vals)]) + "\n")
