"""Saturated goodput in a window where every sender is backlogged
(emulator/experiments/measure/goodput.py)."""

import pytest

from emulator.experiments.measure import goodput

MS = 1_000_000
FRAME = 1000                      # bytes; at 8 Mbit/s a frame time is 1 ms


def flow(rate_frames, first=0, drained=400 * MS, frames=None, size=FRAME):
    """A flow whose receiver accepts a frame every 1/rate_frames ms from ``first``."""
    step = int(MS / rate_frames)
    n = frames or int((drained - first) / step) + 20
    return {"tx_first_ns": first, "tx_drained_ns": drained, "rate_bps": 8e6,
            "rx_timeline": [[first + 3 * MS + k * step, (k + 1) * size] for k in range(n)]}


def test_the_window_opens_after_the_warm_up_and_closes_at_the_first_empty_queue():
    frame = goodput.frame_time_ns(FRAME, 8e6)
    assert frame == pytest.approx(MS)
    flows = [flow(1.0, first=2 * MS), flow(0.25, drained=300 * MS), flow(0.5)]
    start, end, why = goodput.window(flows, frame, warmup_frames=32, min_frames=64)
    assert why is None and start == 34 * MS and end == 300 * MS


def test_each_flow_gets_its_share_not_rounded_to_whole_frames():
    flows = [flow(1.0), flow(0.125), flow(1 / 3)]
    doc = goodput.saturated(flows, MS, warmup_frames=32, min_frames=64)
    assert doc["per_flow"] == pytest.approx([1.0, 0.125, 1 / 3], abs=2e-3)
    assert doc["min"] == pytest.approx(0.125, abs=1e-3)
    assert doc["mean"] == pytest.approx((1 + 0.125 + 1 / 3) / 3, abs=2e-3)
    assert doc["window"]["frames"] == pytest.approx(368)


def test_a_flow_stalled_in_the_window_counts_its_stall():
    f = flow(1.0)
    # nothing arrives between 100 and 200 ms (a timeout), then the rest resumes
    f["rx_timeline"] = [[t if t < 100 * MS else t + 100 * MS, b] for t, b in f["rx_timeline"]]
    doc = goodput.saturated([f], MS, warmup_frames=0, min_frames=10)
    assert doc["mean"] < 0.8


def test_no_window_when_a_sender_finished_too_early_or_died():
    frame = MS
    short = [flow(1.0, drained=80 * MS), flow(0.5)]
    doc = goodput.saturated(short, frame, warmup_frames=32, min_frames=64)
    assert doc["mean"] is None and doc["min"] is None and doc["window"] is None
    assert "48 frame times into the window (at least 64 needed)" in doc["no_window"]
    dead = [flow(1.0), dict(flow(0.5), tx_drained_ns=None)]
    assert "died" in goodput.saturated(dead, frame)["no_window"]
    never = [flow(1.0), dict(flow(0.5), tx_first_ns=None)]
    assert "never sent" in goodput.saturated(never, frame)["no_window"]


def test_bytes_between_arrivals_are_interpolated():
    line = [[10, 100], [20, 200], [40, 300]]
    assert goodput.bytes_at(line, 5) == 0
    assert goodput.bytes_at(line, 10) == 100
    assert goodput.bytes_at(line, 15) == pytest.approx(150)
    assert goodput.bytes_at(line, 30) == pytest.approx(250)
    assert goodput.bytes_at(line, 99) == 300
    assert goodput.bytes_at([], 5) == 0
