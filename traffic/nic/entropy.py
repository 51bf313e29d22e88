"""Per-packet path entropy of a sending NIC (pure; injected clock; unit-tested).

Model.  RoCEv2 puts its path entropy in the UDP source port; the fabric's
ECMP hashes it.  A QP normally keeps one source port for its life (mode
``qp``: one path per QP).  Two NIC behaviours that the load-balancing modes
of the fabric rely on (docs/load-balancing.md) are modelled here:

* ``spray``   -- every packet gets the next entropy value of its QP (like an
  Ultra-Ethernet NIC spraying packets over paths): ECMP then spreads one QP's
  packets over all equal-cost paths; the receiver sees them reordered.
* ``flowlet`` -- a QP keeps its entropy while it sends back to back, and
  moves to the next entropy value when it has been idle for longer than
  ``gap_ns`` (a flowlet boundary, as NIC-based flowlet/adaptive-routing
  schemes do): the new 5-tuple is a new flow to the fabric, which may put
  it on another path.  Gaps are measured at send time, where the NIC knows
  them to the nanosecond; OpenFlow timeouts (whole seconds) could not.

``EntropyPolicy.pick(flow, now_ns)`` returns the entropy index (0 = the QP's
own source port) of one packet; ``sport(base, index)`` maps it to a port.
"""

import struct
import zlib

from lab.modes import Entropy

MODES = Entropy.names()
SPRAY_VALUES = 1024       # distinct ports a spraying QP cycles through


def sport(base, index):
    """UDP source port for entropy ``index`` of a QP whose own port is ``base``."""
    if index == 0:
        return base
    h = zlib.crc32(struct.pack("!HI", base, index))
    return 0xC000 | (h & 0x3FFF)          # RoCE's entropy range 49152..65535


class EntropyPolicy:
    """Chooses the entropy index of each packet of each flow (QP stream)."""

    def __init__(self, mode=Entropy.QP, gap_ns=1_000_000, spray_values=SPRAY_VALUES):
        if mode not in MODES:
            raise ValueError(f"entropy mode {mode!r}: one of {MODES}")
        if gap_ns <= 0 or spray_values < 1:
            raise ValueError("gap_ns and spray_values must be positive")
        self.mode = mode
        self.gap_ns = gap_ns
        self.spray_values = spray_values
        self.index = {}       # flow -> current entropy index
        self.last_ns = {}     # flow -> time of its last packet
        self.changes = 0      # entropy changes (new flowlets / sprayed packets)

    @property
    def active(self):
        return self.mode != Entropy.QP

    def pick(self, flow, now_ns):
        """Entropy index of the packet of ``flow`` sent at ``now_ns``."""
        if self.mode == Entropy.QP:
            return 0
        i = self.index.get(flow, 0)
        if self.mode == Entropy.SPRAY:
            nxt = (i + 1) % self.spray_values
            self.changes += 1
        else:
            last = self.last_ns.get(flow)
            # a new flowlet after an idle gap; the first packet keeps index 0
            nxt = i + 1 if last is not None and now_ns - last > self.gap_ns else i
            self.changes += nxt != i
            self.last_ns[flow] = now_ns
        self.index[flow] = nxt
        return i if self.mode == Entropy.SPRAY else nxt
