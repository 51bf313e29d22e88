"""The lossless fabric's eBPF programs (root), run by the kernel on given frames
(BPF_PROG_TEST_RUN): classes at egress, the per-ingress accounting, the stamp,
ingress drops past the limit, the watchdog's drops and the kick frame."""

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): no fabric
LAYOUT_INDEPENDENT = True

import struct
from contextlib import contextmanager

from emulator.dataplane import bpf
from emulator.dataplane.lossless import pfc
from traffic.roce.frames import FrameTemplate, icrc

LEN = 3042                    # BPF_PROG_TEST_RUN takes frames up to ~3.5 kB
W = pfc.WORDS


def roce(opcode="WRITE_ONLY", stamp=0):
    t = FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2",
                      0x100, opcode=opcode, frame_len=LEN)
    raw = bytearray(t.raw)
    raw[pfc.STAMP_OFF] = stamp
    return bytes(raw)


def words(m, key):
    return struct.unpack(f"<{W}q", m.lookup(key))


@contextmanager
def entries(n, limits=()):
    """A map of ``n`` entries; ``limits``: {key: (xoff, limit)} written in."""
    m = bpf.Map(pfc.ENTRY_SIZE, n, flags=bpf.F_MMAPABLE)
    try:
        for key, (xoff, limit) in dict(limits).items():
            e = [0] * W
            e[pfc.E_XOFF // 8], e[pfc.E_LIMIT // 8] = xoff, limit
            m.update(key, struct.pack(f"<{W}q", *e))
        yield m
    finally:
        m.close()


@contextmanager
def loaded(m, program, key, base=-1, up_key=0, up_base=-1, stamp=0):
    """The fd of ``program`` (pfc_egress or pfc_ingress) of end ``key`` on map ``m``."""
    with pfc.programs(m, key, base, up_key, up_base, stamp) as fds:
        yield fds[program]


def test_egress_counts_only_the_lossless_class():
    with entries(1) as m, loaded(m, "pfc_egress", 0) as fd:
        arp = b"\xff" * 12 + b"\x08\x06" + b"\0" * 46
        for frame, cls in ((roce(), pfc.CLASS_LOSSLESS), (roce(0x11), pfc.CLASS_CONTROL),
                           (roce(0x81), pfc.CLASS_CONTROL), (arp, pfc.CLASS_CONTROL),
                           (arp + b"\0" * 300, pfc.CLASS_BEST)):
            ret, _, priority = bpf.test_run_skb(fd, frame)
            assert ret == pfc.TC_ACT_OK and priority == cls
        assert words(m, 0)[pfc.E_EG_IN // 8] == LEN      # the data frame only


def test_switch_ingress_counts_stamps_and_keeps_the_icrc():
    # key 0: a switch port (its own buffer), key 1: the host NIC it receives from
    with entries(2, {0: (2 * LEN, 3 * LEN)}) as m, \
            loaded(m, "pfc_ingress", 0, up_key=1, stamp=1) as fd:
        ret, out = bpf.test_run(fd, roce())
        assert ret == pfc.XDP_PASS
        assert out[pfc.STAMP_OFF] == 1                     # this port's number + 1
        assert icrc(out) == struct.unpack_from("<I", out, len(out) - 4)[0]
        e = words(m, 0)
        assert e[pfc.E_ING // 8] == LEN and e[pfc.E_PEAK // 8] == LEN
        assert e[pfc.E_CROSS_NS // 8] == 0                 # still under xoff
        assert words(m, 1)[pfc.E_EG_OUT // 8] == LEN       # off the host's queue
        bpf.test_run(fd, roce())
        assert words(m, 0)[pfc.E_CROSS_NS // 8] > 0        # the second frame crossed xoff
        bpf.test_run(fd, roce())
        ret, _ = bpf.test_run(fd, roce())                  # 4 frames > limit of 3
        assert ret == pfc.XDP_DROP
        e = words(m, 0)
        assert e[pfc.E_ING_DROPS // 8] == 1 and e[pfc.E_ING // 8] == 3 * LEN
        ret, _ = bpf.test_run(fd, roce(0x11))             # control class: not counted
        assert ret == pfc.XDP_PASS and words(m, 0)[pfc.E_ING // 8] == 3 * LEN


def test_the_next_hop_frees_the_buffer_the_stamp_names():
    # keys 0-1: a switch's two ports (base 0); key 2: the host behind port 2 (key 1)
    with entries(3, {0: (10 ** 6, 10 ** 7), 1: (10 ** 6, 10 ** 7)}) as m:
        e = [0] * W
        e[pfc.E_ING // 8] = 2 * LEN
        m.update(0, struct.pack(f"<{W}q", *e))
        with loaded(m, "pfc_ingress", 2, up_key=1, up_base=0) as fd:
            ret, out = bpf.test_run(fd, roce(stamp=1))     # entered the switch by port 1
            assert ret == pfc.XDP_PASS and out[pfc.STAMP_OFF] == 0
        assert words(m, 0)[pfc.E_ING // 8] == LEN
        assert words(m, 1)[pfc.E_EG_OUT // 8] == LEN
        assert words(m, 1)[pfc.E_LAST_NS // 8] > 0


def test_watchdog_drop_and_kick_frames():
    with entries(2, {0: (10 ** 6, 10 ** 7)}) as m, \
            loaded(m, "pfc_ingress", 0, up_key=1, stamp=1) as fd:
        ret, _ = bpf.test_run(fd, pfc.kick_frame())
        assert ret == pfc.XDP_DROP
        e = [0] * W
        e[pfc.E_FLAGS // 8] = pfc.FLAG_DROP
        m.update(1, struct.pack(f"<{W}q", *e))
        ret, _ = bpf.test_run(fd, roce())
        assert ret == pfc.XDP_DROP
        assert words(m, 1)[pfc.E_WD_DROPS // 8] == 1
        assert words(m, 0)[pfc.E_ING // 8] == 0           # dropped before it was counted


def test_a_global_links_egress_moves_a_frame_to_the_next_class():
    # 3 classes of 4 entries: keys 0-1 a switch's ports (base 0), 2-3 its peers
    n = 4
    with entries(3 * n) as m:
        with pfc.programs(m, 1, 0, 3, -1, 2, classes=3, nends=n, phase=True) as fds:
            # came in by port 1 in class 0: leaves by the global link in class 1
            ret, out, priority = bpf.test_run_skb(fds["pfc_egress"], roce(stamp=1))
            assert ret == pfc.TC_ACT_OK and priority == pfc.CLASS_LOSSLESS + 1
            assert out[pfc.STAMP_OFF] == 1 | 0x80                # port 1, class 0, moved on
            assert icrc(out) == struct.unpack_from("<I", out, len(out) - 4)[0]
            assert words(m, 1 * n + 1)[pfc.E_EG_IN // 8] == LEN   # class 1's queue
            assert words(m, 0 * n + 0)[pfc.E_QUEUED // 8] == LEN  # class 0's buffer of port 1
            # in the last class already: stays there
            ret, out, priority = bpf.test_run_skb(fds["pfc_egress"], roce(stamp=1 | 2 << 5))
            assert priority == pfc.CLASS_LOSSLESS + 2 and out[pfc.STAMP_OFF] == 1 | 2 << 5
        with pfc.programs(m, 0, 0, 3, -1, 1, classes=3, nends=n) as fds:   # a local link
            ret, out, priority = bpf.test_run_skb(fds["pfc_egress"], roce(stamp=2 | 1 << 5))
            assert priority == pfc.CLASS_LOSSLESS + 1 and out[pfc.STAMP_OFF] == 2 | 1 << 5
            assert words(m, 1 * n + 0)[pfc.E_EG_IN // 8] == LEN
            assert words(m, 1 * n + 1)[pfc.E_QUEUED // 8] == LEN  # class 1's buffer of port 2


def test_the_far_end_counts_a_frame_in_the_class_it_crossed_in():
    # 2 classes of 4 entries: keys 0-1 switch A (base 0), keys 2-3 switch B (base 2);
    # A's port 2 (key 1) is a global link to B's port 1 (key 2)
    n = 4
    with entries(2 * n, {c * n + 2: (10 ** 6, 10 ** 7) for c in range(2)}) as m:
        e = [0] * W
        e[pfc.E_ING // 8] = e[pfc.E_QUEUED // 8] = LEN
        m.update(0, struct.pack(f"<{W}q", *e))                    # A's port 1, class 0
        with pfc.programs(m, 2, 2, 1, 0, 1, classes=2, nends=n) as fds:
            # entered A by port 1 in class 0, moved to class 1 by A's global egress
            ret, out = bpf.test_run(fds["pfc_ingress"], roce(stamp=1 | 0x80))
        assert ret == pfc.XDP_PASS and out[pfc.STAMP_OFF] == 1 | 1 << 5   # B's port 1, class 1
        assert words(m, 0)[pfc.E_ING // 8] == 0 and words(m, 0)[pfc.E_QUEUED // 8] == 0
        assert words(m, 1 * n + 1)[pfc.E_EG_OUT // 8] == LEN     # off A's class-1 queue
        assert words(m, 1 * n + 2)[pfc.E_ING // 8] == LEN        # into B's class-1 buffer
        assert words(m, 0 * n + 2)[pfc.E_ING // 8] == 0


def test_roce_data_of_another_dscp_rides_best_effort_unaccounted():
    t = FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2",
                      0x100, frame_len=LEN, dscp=0)
    with entries(2, {0: (2 * LEN, 3 * LEN)}) as m:
        with loaded(m, "pfc_egress", 1) as fd:
            ret, _, priority = bpf.test_run_skb(fd, t.raw)
            assert ret == pfc.TC_ACT_OK and priority == pfc.CLASS_BEST
            assert words(m, 1)[pfc.E_EG_IN // 8] == 0
        with loaded(m, "pfc_ingress", 0, up_key=1, stamp=1) as fd:
            ret, out = bpf.test_run(fd, t.raw)
            assert ret == pfc.XDP_PASS and out[pfc.STAMP_OFF] == 0    # neither stamped
            assert words(m, 0)[pfc.E_ING // 8] == 0                    # nor counted
