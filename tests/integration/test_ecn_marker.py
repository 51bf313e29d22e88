"""The ECN marker (root): an nftables virtual queue in front of a real TBF.

A veth whose root end has the lab's TBF (40 Mbit/s) and the marker (K = 30 KB):
a back-to-back burst of full RoCE frames is marked from the frame that finds
more than K bytes queued on, the same frames paced below the link rate are
never marked, and a marked frame keeps a valid ICRC and IPv4 header checksum.
"""

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): its own namespaces, no fabric
LAYOUT_INDEPENDENT = True

import struct

from traffic_fixtures import ECN_FRAME as FRAME
from traffic_fixtures import ECN_RATE as RATE
from traffic_fixtures import (
    checksum_ok,
    ecn_burst,
    lab,  # noqa: F401  (a fixture)
)

from emulator.dataplane.lossless import ecn
from traffic.roce.frames import PSN_OFF, icrc

K = 30000


def burst(lab, gap_s):
    """40 ECT(0) frames through the enqueue marker: b's frames and the port's marks."""
    frames, marks, _, pauses = ecn_burst(
        lab, lambda ia, ib, b: ecn.Marker(lab.tag, ecn.parse("30KB", at="enqueue"),
                                          [(ia, RATE)], FRAME).install(), gap_s)
    return frames, marks, pauses


def test_burst_is_marked_past_k_and_marks_keep_checksums(lab):
    frames, counted, pauses = burst(lab, 0)
    assert len(frames) == 40                      # the TBF's 150 KB queue holds them all
    ce = [int.from_bytes(bytes(f)[PSN_OFF + 1:PSN_OFF + 4], "big") for f in frames
          if bytes(f)[15] & 3 == 3]
    # a burst paused more than 3 times measures the machine, not the marker
    assert len(pauses) <= 3, f"the sender paused before frames {pauses}"
    # K / FRAME = 7.2: the 8th frame is the first to find more than K queued (a frame
    # later per pause of the sender before it: the link drained one meanwhile)
    early = [i for i in pauses if ce and i <= ce[0]]
    assert ce and K // FRAME - 1 <= ce[0] <= K // FRAME + 2 + len(early), (ce[:5], pauses)
    # and every one after it, but for one frame per pause of the sender longer than
    # a frame time: the virtual queue (a token bucket) drained a frame meanwhile, as
    # the link did (once, under hypervisor steal, frame 29 of 40 passed unmarked)
    unmarked = set(range(ce[0], 40)) - set(ce)
    assert len(unmarked) <= len(pauses) - len(early), (sorted(unmarked), pauses)
    assert counted == len(ce)
    for f in frames:
        raw = bytes(f)
        assert icrc(raw) == struct.unpack("<I", raw[-4:])[0]
        assert checksum_ok(raw)


def test_paced_below_the_link_rate_is_never_marked(lab):
    # one frame per 1.2 ms; the link sends one in 0.83 ms: no queue builds
    frames, counted, _ = burst(lab, 0.0012)
    assert len(frames) == 40
    assert counted == 0 and not [f for f in frames if bytes(f)[15] & 3 == 3]
