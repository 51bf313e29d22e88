"""The ECN marker (root): an nftables virtual queue in front of a real TBF.

A veth whose root end has the lab's TBF (40 Mbit/s) and the marker (K = 30 KB):
a back-to-back burst of full RoCE frames is marked from the frame that finds
more than K bytes queued on, the same frames paced below the link rate are
never marked, and a marked frame keeps a valid ICRC and IPv4 header checksum.
"""

import os
import socket
import struct
import subprocess
import time

from pyroute2 import IPRoute
from scapy.layers.inet import IP
from scapy.utils import rdpcap

from emulator.dataplane import ecn, shaping
from traffic.frames import PSN_OFF, FrameTemplate, icrc
from traffic_fixtures import lab, run, wait_until  # noqa: F401

RATE = 40e6
FRAME = 4158                  # a 4096-byte RoCE MTU frame
K = 30000


def burst(lab, gap_s):
    """Send 40 ECT(0) frames a -> b (``gap_s`` apart); return the frames b received."""
    b = lab.ns("b")
    ia, ib = lab.veth(None, "a", b, "b")
    for ns, i in ((None, ia), (b, ib)):
        run("ip", "link", "set", i, "mtu", "4300", ns=ns)
    with IPRoute() as ipr:
        shaping.apply(ipr, ipr.link_lookup(ifname=ia)[0], RATE, 30.0, FRAME + 14)
    marker = ecn.Marker(lab.tag, ecn.parse("30KB"), [(ia, RATE)], FRAME).install()
    pcap = f"/tmp/flt{lab.tag}.pcap"
    cap = subprocess.Popen(["ip", "netns", "exec", b, "tcpdump", "-i", ib, "--immediate-mode", "-U",
                            "-w", pcap,
                            "udp"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: cap.stderr.readline().startswith(b"tcpdump: listening"), 10,
                   what="tcpdump listening")
        t = FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.9.0.1", "10.9.0.2",
                          0x11, frame_len=FRAME, ecn=2)
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
            s.bind((ia, 0))
            for i in range(40):
                s.send(t.frame(i))
                if gap_s:
                    time.sleep(gap_s)
        time.sleep(0.5)             # 40 frames at 40 Mbit/s drain in 33 ms
        marks = marker.marks()
    finally:
        cap.terminate()
        cap.communicate(timeout=10)
        marker.remove()
    try:
        frames = rdpcap(pcap)
    finally:
        os.unlink(pcap)
    return frames, marks.get(ia, 0)


def test_burst_is_marked_past_k_and_marks_keep_checksums(lab):
    frames, counted = burst(lab, 0)
    assert len(frames) == 40                      # the TBF's 150 KB queue holds them all
    ce = [int.from_bytes(bytes(f)[PSN_OFF + 1:PSN_OFF + 4], "big") for f in frames
          if bytes(f)[15] & 3 == 3]
    # K / FRAME = 7.2: the 8th frame is the first to find more than K queued
    assert ce and K // FRAME - 1 <= ce[0] <= K // FRAME + 2, ce[:5]
    assert ce == list(range(ce[0], 40))           # and every one after it
    assert counted == len(ce)
    for f in frames:
        raw = bytes(f)
        assert icrc(raw) == struct.unpack("<I", raw[-4:])[0]
        ip = IP(raw[14:])
        chk = ip.chksum
        del ip.chksum
        assert IP(bytes(ip)).chksum == chk


def test_paced_below_the_link_rate_is_never_marked(lab):
    # one frame per 1.2 ms; the link sends one in 0.83 ms: no queue builds
    frames, counted = burst(lab, 0.0012)
    assert len(frames) == 40
    assert counted == 0 and not [f for f in frames if bytes(f)[15] & 3 == 3]
