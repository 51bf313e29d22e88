"""Namespaces, veths and a bridge LAN for the traffic engine's root tests.

Everything is named with a ``flt`` prefix and a per-test random suffix and is
deleted in teardown even when the test fails.  Every command checks its exit
status and has a timeout.
"""

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else sys.executable

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, raw sockets)")


def run(*cmd, timeout=20, ns=None):
    """Run a command (in namespace ``ns``), check its status, return stdout."""
    if ns:
        cmd = ("ip", "netns", "exec", ns) + cmd
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} -> {res.returncode}: {res.stderr.strip()}")
    return res.stdout


def wait_until(cond, timeout=10.0, interval=0.02, what="condition"):
    """Poll ``cond`` until true; fail after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def popen_in(ns, *args, **kw):
    """Start ``python -m traffic ARGS`` in namespace ``ns``."""
    return subprocess.Popen(("ip", "netns", "exec", ns, PYTHON, "-m", "traffic") + args,
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def finish(proc, timeout):
    """Wait for ``proc``; assert exit 0; return its stdout."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=5)
        raise AssertionError(f"timed out: {proc.args}\n{err}")
    assert proc.returncode == 0, f"{proc.args} -> {proc.returncode}\n{err}"
    return out


class Lab:
    """Namespaces and links of one test, undone by ``destroy``."""

    def __init__(self):
        self.tag = secrets.token_hex(2)
        self.namespaces = []
        self.links = []              # (namespace or None, ifname)

    def ns(self, name):
        full = f"flt-{self.tag}-{name}"
        run("ip", "netns", "add", full)
        self.namespaces.append(full)
        run("ip", "link", "set", "lo", "up", ns=full)
        return full

    def veth(self, ns_a, name_a, ns_b, name_b):
        """A veth pair; ``name_*`` get the lab's prefix.  Returns both names."""
        a, b = f"flt{self.tag}{name_a}", f"flt{self.tag}{name_b}"
        run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        self.links.append((None, a))
        for ns, ifname in ((ns_a, a), (ns_b, b)):
            if ns:
                run("ip", "link", "set", ifname, "netns", ns)
            run("ip", "link", "set", ifname, "up", ns=ns)
            # raw frames carry their own checksums; kernel UDP must not rely on offload
            run("ethtool", "-K", ifname, "tx", "off", ns=ns)
        return a, b

    def addr(self, ns, ifname, cidr):
        run("ip", "addr", "add", cidr, "dev", ifname, ns=ns)

    def mac(self, ns, ifname):
        return run("cat", f"/sys/class/net/{ifname}/address", ns=ns).strip()

    def destroy(self):
        for ns in reversed(self.namespaces):
            subprocess.run(("ip", "netns", "del", ns), timeout=20, check=False)
        for _, ifname in self.links:          # root-namespace ends, if any left
            subprocess.run(("ip", "link", "del", ifname), timeout=20, check=False,
                           capture_output=True)
        # the deletion is asynchronous: wait until the names are gone
        wait_until(lambda: not any(n in run("ip", "netns", "list")
                                   for n in self.namespaces), what="namespaces removed")


@pytest.fixture
def lab():
    lab = Lab()
    try:
        yield lab
    finally:
        lab.destroy()


@pytest.fixture
def pair(lab):
    """Two namespaces joined by a veth: (lab, ns_a, if_a, ip_a, ns_b, if_b, ip_b)."""
    a, b = lab.ns("a"), lab.ns("b")
    ia, ib = lab.veth(a, "a", b, "b")
    lab.addr(a, ia, "10.77.0.1/24")
    lab.addr(b, ib, "10.77.0.2/24")
    return lab, a, ia, "10.77.0.1", b, ib, "10.77.0.2"


def bridge_lan(lab, n):
    """``n`` host namespaces on one Linux bridge; returns [(ns, ifname, ip, mac)]."""
    br_ns = lab.ns("br")
    run("ip", "link", "add", "br0", "type", "bridge", ns=br_ns)
    run("ip", "link", "set", "br0", "up", ns=br_ns)
    hosts = []
    for i in range(n):
        h = lab.ns(f"h{i}")
        hif, pif = lab.veth(h, f"h{i}", br_ns, f"p{i}")
        run("ip", "link", "set", pif, "master", "br0", ns=br_ns)
        ip = f"10.78.0.{i + 1}"
        lab.addr(h, hif, f"{ip}/24")
        hosts.append((h, hif, ip, lab.mac(h, hif)))
    return hosts


ECN_RATE = 40e6
ECN_FRAME = 4158              # a 4096-byte RoCE MTU frame


def jumbo_veth(lab):
    """A veth from the root namespace to namespace ``b``, jumbo MTU, no IPv6:
    (root end, b end, b)."""
    b = lab.ns("b")
    ia, ib = lab.veth(None, "a", b, "b")
    for ns, i in ((None, ia), (b, ib)):
        run("ip", "link", "set", i, "mtu", "4300", ns=ns)
        # no IPv6 chatter (router solicitations, MLD) in the queue being counted
        run("sysctl", "-qw", f"net.ipv6.conf.{i}.disable_ipv6=1", ns=ns)
    return ia, ib, b


def shaped_veth(lab):
    """``jumbo_veth`` with its root end shaped as a 40 Mbit/s switch port with 30 ms
    of queue: (root end, b end, b)."""
    from pyroute2 import IPRoute

    from emulator.dataplane.links import shaping
    ia, ib, b = jumbo_veth(lab)
    with IPRoute() as ipr:
        shaping.apply(ipr, ipr.link_lookup(ifname=ia)[0], ECN_RATE, 30.0, ECN_FRAME + 14)
    return ia, ib, b


def send_ect_frames(ifname, count, gap_s=0):
    """``count`` ECT(0) RoCE frames of ECN_FRAME bytes (PSN = index) out of ``ifname``;
    returns the indices of the frames a back-to-back burst sent more than one frame
    time at ECN_RATE after the one before (a preempted or stolen CPU): the link
    drained a frame meanwhile."""
    import socket

    from traffic.roce.frames import FrameTemplate
    t = FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.9.0.1", "10.9.0.2",
                      0x11, frame_len=ECN_FRAME, ecn=2)
    frames = [t.frame(i) for i in range(count)]
    frame_s = ECN_FRAME * 8 / ECN_RATE
    pauses, start_before = [], None
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((ifname, 0))
        for i, frame in enumerate(frames):
            start = time.monotonic()
            s.send(frame)
            # two frames entered the queue at most this far apart
            if not gap_s and start_before is not None \
                    and time.monotonic() - start_before > frame_s:
                pauses.append(i)
            start_before = start
            if gap_s:
                time.sleep(gap_s)
    return pauses


def checksum_ok(raw):
    """Whether the IPv4 header checksum of Ethernet frame ``raw`` is right."""
    from scapy.layers.inet import IP
    ip = IP(raw[14:])
    chk = ip.chksum
    del ip.chksum
    return IP(bytes(ip)).chksum == chk


def ecn_burst(lab, install, gap_s):
    """40 ECT(0) frames ``gap_s`` apart through a shaped veth whose marker
    ``install(root end, b end, b)`` returns; b's capture, then what ``marker.marks()``
    and ``marker.backlog()`` (if it has one) said once they drained, and the
    frames the sender sent after a pause (``send_ect_frames``)."""
    from scapy.utils import rdpcap
    ia, ib, b = shaped_veth(lab)
    marker = install(ia, ib, b)
    pcap = f"/tmp/flt{lab.tag}.pcap"
    cap = subprocess.Popen(["ip", "netns", "exec", b, "tcpdump", "-i", ib, "--immediate-mode",
                            "-U", "-w", pcap, "udp"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: cap.stderr.readline().startswith(b"tcpdump: listening"), 10,
                   what="tcpdump listening")
        pauses = send_ect_frames(ia, 40, gap_s)
        time.sleep(0.5)             # 40 frames at 40 Mbit/s drain in 33 ms
        marks = marker.marks().get(ia, 0)
        backlog = marker.backlog()[ia] if hasattr(marker, "backlog") else None
    finally:
        cap.terminate()
        cap.communicate(timeout=10)
        errors = marker.remove()
    assert not errors, errors
    try:
        frames = rdpcap(pcap)
    finally:
        os.unlink(pcap)
    return frames, marks, backlog, pauses
