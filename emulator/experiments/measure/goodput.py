"""Saturated goodput: what flows get in a window where every sender is backlogged (pure).

Model.  Every flow's sender queues its whole message at once; it is
*backlogged* from its first new packet until its last new packet has left
(``tx_first_ns`` .. ``tx_drained_ns``, the job engine's per-pair timeline,
traffic.jobs).  The *window* opens a warm-up after the last sender started and
closes when the first sender has no new data left: inside it, every sender
still has data queued, as a steady-state simulator's open-loop sources always
do.  The warm-up, in frame times (a full frame at the injection rate):

* open loop (a lossless fabric without congestion control: the network's
  credits pace the senders), ``WARMUP_FRAMES`` = 32: the queues fill within a
  few frame times of a synchronized start;
* closed loop (the transport's congestion control paces them),
  ``CLOSED_LOOP_WARMUP_FRAMES`` = 600: a synchronized start overloads every
  queue, DCQCN cuts the senders far below their share while the queues drain
  (alpha is 1 at a QP's first CNP, so every cut halves), and climbs back in 25
  of its rate-increase periods of 24 frame times (traffic.roce.dcqcn: 5 of
  fast recovery, 20 of additive increase at line/40 to half the line rate).
  Measured on the dragonfly, the goodput per second settles 3-5 s (360-600
  frame times at 4 Mbit/s) after the start.

A window shorter than ``min_frames`` frame times, or none at all (a sender
finished or died before it opened), gives no steady figure, and the reason is
said.

Per flow, its goodput is the bytes its receiver accepted in order inside the
window (``rx_timeline``: [arrival ns, bytes so far], whole frames as the
links carry them, linearly interpolated at the window's ends so a slow flow
is not rounded to whole frames) over the window's length and the flow's
injection rate.  The figures: the mean over flows and the lowest flow.

The *completion-based* figure, beside it: bytes over each transfer's own
time from its start to its last byte acknowledged, which mixes hosts that
finish at different times (a flow alone at the end gets the whole link).
"""

WARMUP_FRAMES = 32          # frame times after every sender started, before the window
CLOSED_LOOP_WARMUP_FRAMES = 600     # ... when congestion control paces the senders
MIN_WINDOW_FRAMES = 64      # the shortest window that gives a steady figure


def frame_time_ns(frame_bytes, rate_bps):
    """One full frame's time at ``rate_bps`` (ns)."""
    return frame_bytes * 8e9 / rate_bps


def bytes_at(timeline, t):
    """Bytes accepted by ``t`` (ns), linear between arrivals; 0 before the first."""
    if not timeline or t <= timeline[0][0]:
        return 0.0 if not timeline or t < timeline[0][0] else float(timeline[0][1])
    if t >= timeline[-1][0]:
        return float(timeline[-1][1])
    lo, hi = 0, len(timeline) - 1          # timeline[lo][0] < t <= timeline[hi][0]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if timeline[mid][0] < t:
            lo = mid
        else:
            hi = mid
    (t0, b0), (t1, b1) = timeline[lo], timeline[hi]
    return b0 + (b1 - b0) * (t - t0) / (t1 - t0) if t1 > t0 else float(b1)


def window(flows, frame_ns, warmup_frames=WARMUP_FRAMES, min_frames=MIN_WINDOW_FRAMES):
    """(start ns, end ns, None) of the saturated window of ``flows`` (dicts with
    ``tx_first_ns``, ``tx_drained_ns``), or (None, None, the reason there is none)."""
    if any(f.get("tx_first_ns") is None for f in flows):
        return None, None, "a sender never sent"
    start = max(f["tx_first_ns"] for f in flows) + warmup_frames * frame_ns
    if any(f.get("tx_drained_ns") is None for f in flows):
        return None, None, "a sender died with data queued (its QP failed or the job stopped)"
    end = min(f["tx_drained_ns"] for f in flows)
    if end - start < min_frames * frame_ns:
        return None, None, (f"a sender ran out of data {max(0.0, (end - start) / frame_ns):.0f} "
                            f"frame times into the window (at least {min_frames} needed)")
    return start, end, None


def saturated(flows, frame_ns, warmup_frames=WARMUP_FRAMES, min_frames=MIN_WINDOW_FRAMES):
    """The goodput document of ``flows`` (dicts with the timeline keys and
    ``rate_bps``, the flow's injection rate): the window, each flow's fraction of
    its injection rate in it, their mean and minimum (None without a window)."""
    start, end, why = window(flows, frame_ns, warmup_frames, min_frames)
    doc = {"warmup_frames": warmup_frames, "min_window_frames": min_frames,
           "frame_ms": round(frame_ns / 1e6, 4), "window": None, "no_window": why,
           "mean": None, "min": None, "per_flow": None}
    if why is not None:
        return doc
    secs = (end - start) / 1e9
    fracs = [(bytes_at(f["rx_timeline"], end) - bytes_at(f["rx_timeline"], start)) * 8
             / secs / f["rate_bps"] for f in flows]
    doc.update(window={"start_s": round(start / 1e9, 4), "end_s": round(end / 1e9, 4),
                       "seconds": round(secs, 4),
                       "frames": round((end - start) / frame_ns, 1)},
               mean=round(sum(fracs) / len(fracs), 4), min=round(min(fracs), 4),
               per_flow=[round(x, 4) for x in fracs])
    return doc


__all__ = ["WARMUP_FRAMES", "CLOSED_LOOP_WARMUP_FRAMES", "MIN_WINDOW_FRAMES", "frame_time_ns", "bytes_at", "window",
           "saturated"]
