"""The CNP band of a lossy port (root): with it, a CNP leaves ahead of the data the
port already holds; an ACK, and everything without the band, keeps its place.

Two namespaces joined by a veth; the sending end gets the lab's shaper
(``emulator.dataplane.links.shaping.apply``) at 1 Mbit/s, then 20 data frames,
a CNP and an ACK are written back to back on a packet socket (as Open vSwitch
writes a switch port's frames); the far end reads the order they arrive in.
"""

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): its own namespaces
LAYOUT_INDEPENDENT = True

import socket
import struct
import time

import pytest
from pyroute2 import IPRoute

from emulator.dataplane.links import shaping
from traffic.nic.netns import entered

from traffic_fixtures import lab, needs_root, pair  # noqa: F401

pytestmark = [needs_root, pytest.mark.timeout(60)]

DATA, CNP, ACK = 0x0A, 0x81, 0x11          # BTH opcodes: RDMA WRITE only, CNP, ACK


def frame(opcode, size, seq):
    """An Ethernet/IPv4/UDP 4791 frame whose BTH opcode is ``opcode``, ``seq`` inside."""
    bth = bytes([opcode]) + b"\0" * 3 + struct.pack("!I", seq) + b"\0" * 4
    payload = bth + b"\0" * max(0, size - len(bth))
    udp = struct.pack("!HHHH", 49152, 4791, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0x68, 20 + len(udp), 0, 0, 64, 17, 0,
                     socket.inet_aton("10.77.0.1"), socket.inet_aton("10.77.0.2"))
    return b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + b"\x08\x00" + ip + udp


def arrivals(pair, band):
    """(opcodes in arrival order, frames the CNP band served)."""
    lab, a, ia, _, b, ib, _ = pair
    with entered(f"/run/netns/{b}"):
        rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
        rx.bind((ib, 0))
    rx.settimeout(3.0)
    with entered(f"/run/netns/{a}"):
        ipr = IPRoute()
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        tx.bind((ia, 0))
    try:
        idx = ipr.link_lookup(ifname=ia)[0]
        shaping.apply(ipr, idx, 1_000_000, queue_ms=1000, cnp_band=band)
        frames = [frame(DATA, 1400, k) for k in range(20)] + [frame(CNP, 16, 20),
                                                             frame(ACK, 16, 21)]
        for f in frames:
            tx.send(f)
        got, end = [], time.monotonic() + 5
        while len(got) < len(frames) and time.monotonic() < end:
            data = rx.recv(2048)
            if len(data) > 42 and data[23] == 17 and data[36:38] == b"\x12\xb7":
                got.append(data[42])
        return got, shaping.cnp_band_packets(ipr, idx)
    finally:
        tx.close()
        rx.close()
        ipr.close()


def test_a_cnp_overtakes_the_data_queued_before_it(pair):
    got, served = arrivals(pair, band=True)
    assert sorted(got) == sorted([DATA] * 20 + [CNP, ACK])
    # 20 frames of 1.4 kB take 230 ms at 1 Mbit/s: the CNP leaves with the first few
    assert got.index(CNP) <= 3, got
    assert got[-1] == ACK and served == 1


def test_without_the_band_a_cnp_waits_its_turn(pair):
    got, served = arrivals(pair, band=False)
    assert got == [DATA] * 20 + [CNP, ACK] and served == 0
