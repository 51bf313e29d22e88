"""UGAL's eBPF programs (root), run by the kernel on crafted frames and crafted
queue maps (BPF_PROG_TEST_RUN): minimal while the queues are equal, non-minimal
once q_min > 2 q_nonmin + bias, the Valiant carrier stamped in the source
address, the flowlet kept, a dead candidate left, the egress's counts."""

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): no fabric
LAYOUT_INDEPENDENT = True

import struct
from contextlib import contextmanager

from controller import dragonfly
from emulator.dataplane import bpf
from emulator.dataplane.adaptive import model, ugal
from emulator.dataplane.adaptive.stage import CONTROL, PORT
from emulator.dataplane.adaptive.ugal_stage import CONFIG, COUNT
from traffic.roce.frames import FrameTemplate, icrc

LEN = 3042
SRC_MAC = "02:00:00:00:00:01"
DST = "10.0.1.1"
SEC = 10 ** 9
BIAS = LEN                     # one frame
# entry 0: the minimal route's global link; 1, 2: candidates through groups 5 and 7
ROUTE = ([0], [(1, 5), (2, 7)])


def roce(sport=0xC000, dst=DST):
    return FrameTemplate(SRC_MAC, "02:00:00:00:00:02", "10.0.0.1", dst, 0x100,
                         frame_len=LEN, dscp=26, ecn=2, sport=sport).raw


def src_mac(frame):
    return ":".join(f"{b:02x}" for b in frame[6:12])


@contextmanager
def maps(route=ROUTE):
    ms = {"ar_ports": bpf.Map(PORT.size, 3), "ar_ctls": bpf.Map(CONTROL.size, 3),
          "ugal_routes": bpf.Map(ugal.ROUTE.size, 4, kind=bpf.maps.MAP_HASH,
                                 key_size=model.ROUTE_KEY.size),
          "ar_flowlets": bpf.Map(model.FLOWLET_SIZE, model.FLOWSETS),
          "ugal_counts": bpf.Map(COUNT.size, 1)}
    try:
        for k in range(3):
            set_port(ms, k)
        mins, cands = route
        ms["ugal_routes"].update(model.route_key(0, DST),
                                 ugal.route_value(mins, cands, {0: 0, 1: 1, 2: 2}))
        yield ms
    finally:
        for m in ms.values():
            m.close()


def get_port(ms, k):
    return dict(zip(model.PORT_NAMES, PORT.unpack(ms["ar_ports"].lookup(k))))


def set_port(ms, k, **values):
    e = dict.fromkeys(model.PORT_NAMES, 0) | dict(frame=LEN, limit=1000 * LEN) | values
    ms["ar_ports"].update(k, PORT.pack_fields(**e))


def counts(ms):
    return dict(zip(ugal.COUNT_NAMES, COUNT.unpack(ms["ugal_counts"].lookup(0))))


@contextmanager
def program(ms, name, **cfg):
    values = dict(sw=0, up_key=-1, decide=1, flowlet_ns=100 * SEC, pend_ns=0, key=-1,
                  bias=BIAS) | cfg
    with bpf.load("ugal", CONFIG.pack_fields(**values), CONFIG, ms,
                  value_layouts=[PORT, CONTROL, COUNT], programs=[name]) as fds:
        yield fds[name]


def test_equal_queues_stay_minimal_and_the_frame_is_untouched():
    with maps() as ms, program(ms, "ugal_ingress") as fd:
        for k in range(3):
            set_port(ms, k, **{"in": 10 * LEN})
        for sport in range(0xC000, 0xC010):
            ret, out = bpf.test_run(fd, roce(sport))
            assert ret == 2 and out == roce(sport)            # XDP_PASS, minimal
        c = counts(ms)
        assert (c["min_flowlets"], c["non_flowlets"], c["min_frames"]) == (16, 0, 16)
        assert get_port(ms, 0)["sent"] == 16 * LEN           # decided towards the min queue


def test_a_long_minimal_queue_goes_nonminimal_with_the_carrier_stamped():
    with maps() as ms, program(ms, "ugal_ingress") as fd:
        set_port(ms, 0, **{"in": 2 * 4 * LEN + BIAS + 1})   # q_min > 2 * 4 frames + bias
        set_port(ms, 1, **{"in": 4 * LEN})
        set_port(ms, 2, **{"in": 4 * LEN})
        stamps = set()
        for sport in range(0xC000, 0xC020):
            ret, out = bpf.test_run(fd, roce(sport))
            assert ret == 2
            stamps.add(dragonfly.stamp_of(src_mac(out)))
            assert out[12:] == roce(sport)[12:]              # only the source address
            assert icrc(out) == struct.unpack_from("<I", out, len(out) - 4)[0]
        assert stamps == {(5, 1), (7, 1)}                     # both candidates drawn
        assert counts(ms)["non_flowlets"] == 32 and counts(ms)["min_frames"] == 0
        assert get_port(ms, 1)["sent"] + get_port(ms, 2)["sent"] == 32 * LEN


def test_at_exactly_twice_plus_bias_it_stays_minimal():
    with maps() as ms, program(ms, "ugal_ingress") as fd:
        set_port(ms, 0, **{"in": 2 * 4 * LEN + BIAS})
        for k in (1, 2):
            set_port(ms, k, **{"in": 4 * LEN})
        assert bpf.test_run(fd, roce())[1] == roce()


def test_a_flowlet_keeps_its_path_until_the_timer_and_a_dead_candidate_is_left():
    with maps(([0], [(1, 5)])) as ms, program(ms, "ugal_ingress") as fd:
        set_port(ms, 0, **{"in": 40 * LEN})
        out = bpf.test_run(fd, roce(0xC001))[1]
        assert dragonfly.stamp_of(src_mac(out)) == (5, 1)
        set_port(ms, 0)                                       # the minimal queue drains
        set_port(ms, 1, **{"in": 40 * LEN})                   # and the candidate's builds
        out = bpf.test_run(fd, roce(0xC001))[1]
        assert dragonfly.stamp_of(src_mac(out)) == (5, 1)     # same flowlet, same path
        assert bpf.test_run(fd, roce(0xC002))[1] == roce(0xC002)   # a new one: minimal
        set_port(ms, 0, **{"in": 40 * LEN})
        set_port(ms, 1)
        ms["ar_ctls"].update(1, CONTROL.pack(1, 1 << 62, 0, 0))  # dies at detection time
        assert dragonfly.stamp_of(src_mac(bpf.test_run(fd, roce(0xC001))[1])) == (5, 1)
        ms["ar_ctls"].update(1, CONTROL.pack(1, 1, 0, 0))     # its global link died
        assert bpf.test_run(fd, roce(0xC001))[1] == roce(0xC001)
        assert counts(ms)["non_frames"] == 3


def test_a_flowlet_past_the_timer_is_decided_afresh():
    with maps(([0], [(1, 5)])) as ms, program(ms, "ugal_ingress", flowlet_ns=1) as fd:
        set_port(ms, 0, **{"in": 40 * LEN})
        assert dragonfly.stamp_of(src_mac(bpf.test_run(fd, roce())[1])) == (5, 1)
        set_port(ms, 0)
        assert bpf.test_run(fd, roce())[1] == roce()
        c = counts(ms)
        assert (c["non_flowlets"], c["min_flowlets"]) == (1, 1)


def test_own_group_and_other_frames_pass_untouched():
    with maps() as ms, program(ms, "ugal_ingress") as fd:
        set_port(ms, 0, **{"in": 40 * LEN})
        assert bpf.test_run(fd, roce(dst="10.0.0.9"))[1] == roce(dst="10.0.0.9")  # no route
        arp = bytes.fromhex("ffffffffffff" "020000000001" "0806") + bytes(28)
        assert bpf.test_run(fd, arp)[1] == arp
        assert counts(ms)["min_frames"] + counts(ms)["non_frames"] == 0


def test_pending_decisions_count_until_they_reach_the_egress():
    with maps() as ms:
        with program(ms, "ugal_ingress", pend_ns=100 * SEC) as fd:
            set_port(ms, 0, **{"in": 8 * LEN})
            for k in (1, 2):
                set_port(ms, k, **{"in": 4 * LEN})
            # 8 frames queued: minimal (8 <= 2 * 4 + 1) until its own decisions pile up
            outs = [bpf.test_run(fd, roce(0xC000 + i))[1] for i in range(4)]
            assert outs[0] == roce(0xC000)
            assert any(dragonfly.stamp_of(src_mac(o)) for o in outs[1:])
        with program(ms, "ugal_egress", decide=0, key=0) as fd_eg:
            before = get_port(ms, 0)
            ret, _, _ = bpf.test_run_skb(fd_eg, roce())
            after = get_port(ms, 0)
            assert ret == 0xFFFFFFFF                          # TC_ACT_UNSPEC
            assert after["in"] - before["in"] == LEN and after["sent_in"] - before["sent_in"] == LEN
            phase2 = bytes.fromhex("020000000002") + bytes.fromhex(
                dragonfly.marker(5, 2).replace(":", "")) + roce()[12:]
            bpf.test_run_skb(fd_eg, phase2)
            assert get_port(ms, 0)["sent_in"] == after["sent_in"]   # decided elsewhere
            set_port(ms, 0, limit=0)
            bpf.test_run_skb(fd_eg, roce())
            assert get_port(ms, 0)["in"] == 0                 # what the TBF drops


def test_the_far_end_counts_the_frame_out():
    with maps() as ms, program(ms, "ugal_ingress", decide=0, up_key=2) as fd:
        bpf.test_run(fd, roce())
        assert get_port(ms, 2)["out"] == LEN
