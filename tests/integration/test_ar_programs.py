"""Adaptive routing's eBPF programs (root), run by the kernel on crafted frames
and crafted queue maps (BPF_PROG_TEST_RUN): the choice by quality, flowlets
kept and moved, a dead candidate skipped, per-packet choice, the egress's
restore of the class's DSCP and source address with a valid checksum and ICRC,
and a host's own DSCP left alone, even one equal to a mark."""

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): no fabric
LAYOUT_INDEPENDENT = True

import struct
import time
from contextlib import contextmanager

from emulator.dataplane import bpf
from emulator.dataplane.adaptive import model, stage
from traffic.roce.frames import FrameTemplate, icrc

LEN = 3042                    # BPF_PROG_TEST_RUN takes frames up to ~3.5 kB
PORTS = (3, 4, 5, 6)          # a leaf's uplinks; entries 0-3
DST = "10.0.1.1"
SEC = 10 ** 9


def roce(sport=0xC000, dscp=26, dst=DST, ecn=2):
    t = FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", dst,
                      0x100, frame_len=LEN, dscp=dscp, ecn=ecn, sport=sport)
    return t.raw


def ip_checksum(frame):
    hdr = bytearray(frame[14:34])
    hdr[10:12] = b"\0\0"
    s = sum(struct.unpack("!10H", hdr))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s ^ 0xFFFF


def dscp(frame):
    return frame[15] >> 2


def port_of(frame):
    return dscp(frame) - model.MARK_BASE


def stage_marked(frame, port):
    """``frame`` as the stage marks it for ``port``: the port's mark in the DSCP (checksum
    fixed) and the group bit in the source address."""
    out = bytearray(frame)
    out[15] = model.mark(port) << 2 | (out[15] & 3)
    out[6] |= 1
    out[24:26] = b"\0\0"
    out[24:26] = struct.pack("!H", ip_checksum(out))
    return bytes(out)


@contextmanager
def maps(routes={(0, DST): (0, 1, 2, 3)}):
    ms = {"ar_ports": bpf.Map(stage.PORT.size, len(PORTS)),
          "ar_ctls": bpf.Map(stage.CONTROL.size, len(PORTS)),
          "ar_routes": bpf.Map(model.ROUTE.size, 8, kind=bpf.maps.MAP_HASH,
                               key_size=model.ROUTE_KEY.size),
          "ar_flowlets": bpf.Map(model.FLOWLET_SIZE, 2 * model.FLOWSETS)}
    try:
        for k, p in enumerate(PORTS):
            set_port(ms, k, mark=model.mark(p), frame=LEN, half_ns=SEC, load_full=100 * LEN,
                     limit=1000 * LEN)
        for (sw, ip), keys in routes.items():
            ms["ar_routes"].update(model.route_key(sw, ip),
                                   model.ROUTE.pack(len(keys), *keys,
                                                    *[0] * (model.MAX_CAND - len(keys))))
        yield ms
    finally:
        for m in ms.values():
            m.close()


def get_port(ms, k):
    return dict(zip(model.PORT_NAMES, stage.PORT.unpack(ms["ar_ports"].lookup(k))))


def set_port(ms, k, **values):
    e = dict.fromkeys(model.PORT_NAMES, 0) | (get_port(ms, k) if values.get("keep") else {})
    values.pop("keep", None)
    e.update(values)
    ms["ar_ports"].update(k, stage.PORT.pack_fields(**e))


def set_down(ms, k, down=True, t_ns=1):
    ms["ar_ctls"].update(k, stage.CONTROL.pack(int(down), t_ns, 0, 0))


@contextmanager
def program(ms, name, **cfg):
    values = dict(sw=0, up_key=-1, decide=1, mode=model.MODES["dlb"], dscp=26,
                  flowlet_ns=100 * SEC, pend_ns=100 * SEC, key=-1, move_band=0) | cfg
    with bpf.load("ar", stage.CONFIG.pack_fields(**values), stage.CONFIG, ms,
                  value_layouts=[stage.PORT, stage.CONTROL], programs=[name]) as fds:
        yield fds[name]


def test_idle_ports_spread_new_flowlets_by_load_and_the_mark_is_a_valid_frame():
    with maps() as ms, program(ms, "ar_ingress") as fd:
        chosen = []
        for sport in range(0xC000, 0xC004):
            ret, out = bpf.test_run(fd, roce(sport))
            assert ret == 2                                  # XDP_PASS
            chosen.append(port_of(out))
            assert out == stage_marked(roce(sport), port_of(out))   # DSCP and group bit
            assert out[15] & 3 == 2                          # ECN bits kept
            assert struct.unpack_from("!H", out, 24)[0] == ip_checksum(out)
            assert icrc(out) == struct.unpack_from("<I", out, len(out) - 4)[0]
        # each pending flowlet's bytes weigh on its port: four flows, four ports
        assert sorted(chosen) == list(PORTS)
        assert sum(get_port(ms, k)["flowlets"] for k in range(4)) == 4


def test_the_flowlet_slot_is_the_one_python_computes():
    with maps() as ms, program(ms, "ar_ingress") as fd:
        chosen = port_of(bpf.test_run(fd, roce(0xC123))[1])
        slot = model.flowlet_slot(0, "10.0.0.1", DST, 0xC123)
        _, key, valid = struct.unpack("<QII", ms["ar_flowlets"].lookup(slot))
        assert valid == 1 and PORTS[key] == chosen


def test_a_flowlet_stays_on_its_port_a_new_one_avoids_the_queue():
    with maps() as ms, program(ms, "ar_ingress") as fd:
        first = port_of(bpf.test_run(fd, roce(0xC000))[1])
        k = PORTS.index(first)
        set_port(ms, k, keep=True, **{"in": 40 * LEN})    # a queue builds there
        assert port_of(bpf.test_run(fd, roce(0xC000))[1]) == first   # same flowlet
        assert port_of(bpf.test_run(fd, roce(0xC001))[1]) != first   # a new one avoids it
        assert get_port(ms, k)["frames"] == 2


def test_a_flowlet_past_the_timer_is_placed_afresh_and_counted_moved():
    with maps() as ms, program(ms, "ar_ingress", flowlet_ns=1) as fd:
        first = port_of(bpf.test_run(fd, roce(0xC000))[1])
        set_port(ms, PORTS.index(first), keep=True, **{"in": 40 * LEN})
        second = port_of(bpf.test_run(fd, roce(0xC000))[1])
        assert second != first
        assert get_port(ms, PORTS.index(second))["moved_in"] == 1
        assert get_port(ms, PORTS.index(first))["moved_out"] == 1


def test_a_live_flowlet_leaves_a_collapsed_port_only_for_a_clearly_better_one():
    with maps() as ms, program(ms, "ar_ingress", move_band=model.MOVE_BAND) as fd:
        first = port_of(bpf.test_run(fd, roce(0xC000))[1])
        k = PORTS.index(first)
        set_port(ms, k, keep=True, **{"in": 10 * LEN})      # band 4: below the move band
        assert port_of(bpf.test_run(fd, roce(0xC000))[1]) == first
        for j in range(4):                                    # band 5, but so are the rest
            set_port(ms, j, keep=True, **{"in": 20 * LEN})
        assert port_of(bpf.test_run(fd, roce(0xC000))[1]) == first
        for j in range(4):                                    # its own load moves nothing
            set_port(ms, j, keep=True, **{"in": 0, "load": 1000 * LEN if j == k else 0,
                                          "load_ns": 0})
        assert port_of(bpf.test_run(fd, roce(0xC000))[1]) == first
        set_port(ms, k, keep=True, **{"in": 20 * LEN, "load": 0})
        for j in range(4):
            if j != k:
                set_port(ms, j, keep=True, **{"in": 20 * LEN})
        other = (k + 1) % 4
        set_port(ms, other, keep=True, **{"in": 0})           # one clearly better
        assert port_of(bpf.test_run(fd, roce(0xC000))[1]) == PORTS[other]
        assert get_port(ms, other)["moved_in"] == 1


def test_a_dead_candidate_is_skipped_at_the_next_packet():
    with maps() as ms, program(ms, "ar_ingress") as fd:
        first = port_of(bpf.test_run(fd, roce(0xC000))[1])
        k = PORTS.index(first)
        set_down(ms, k, t_ns=5)
        after = port_of(bpf.test_run(fd, roce(0xC000))[1])
        assert after != first
        assert get_port(ms, k)["evac_ns"] >= 5               # its reaction, timestamped
        for sport in range(0xC001, 0xC010):                  # nothing new goes there
            assert port_of(bpf.test_run(fd, roce(sport))[1]) != first
        for j in range(4):
            set_down(ms, j)
        out = bpf.test_run(fd, roce(0xC000))[1]
        assert dscp(out) == 26                               # all dead: left to the route


def test_a_candidate_told_down_from_a_later_time_is_used_until_then():
    with maps() as ms, program(ms, "ar_ingress") as fd:
        first = port_of(bpf.test_run(fd, roce(0xC000))[1])
        k = PORTS.index(first)
        later = time.monotonic_ns() + 3600 * SEC             # the detection delay not over
        set_down(ms, k, t_ns=later)
        assert port_of(bpf.test_run(fd, roce(0xC000))[1]) == first
        assert get_port(ms, k)["evac_ns"] == 0
        set_down(ms, k, t_ns=time.monotonic_ns())            # over: skipped from now on
        assert port_of(bpf.test_run(fd, roce(0xC000))[1]) != first


def test_packet_mode_picks_the_shortest_queue_for_every_packet():
    with maps() as ms, program(ms, "ar_ingress", mode=model.MODES["packet"]) as fd:
        for k, q in enumerate((9, 3, 7, 5)):
            set_port(ms, k, keep=True, **{"in": q * LEN})
        assert port_of(bpf.test_run(fd, roce(0xC000))[1]) == PORTS[1]
        set_port(ms, 1, keep=True, **{"in": 20 * LEN})
        assert port_of(bpf.test_run(fd, roce(0xC000))[1]) == PORTS[3]   # same flow moves
        assert sum(get_port(ms, k)["flowlets"] for k in range(4)) == 0


def test_other_frames_pass_untouched():
    with maps() as ms, program(ms, "ar_ingress") as fd:
        for frame in (roce(dscp=10), roce(dst="10.0.9.9"), roce(dscp=46),
                      roce(dscp=model.mark(PORTS[1]))):             # a host's own DSCP
            assert bpf.test_run(fd, frame) == (2, frame)
    with maps() as ms, program(ms, "ar_ingress", decide=0, up_key=2) as fd:
        assert bpf.test_run(fd, roce())[1] == roce()
        assert get_port(ms, 2)["out"] == LEN                 # counted out only


def test_a_frame_with_a_group_source_address_is_dropped_where_the_stage_decides():
    bad = bytearray(roce(dscp=model.mark(PORTS[1])))
    bad[6] |= 1                                              # a forged stage mark
    with maps() as ms, program(ms, "ar_ingress") as fd:
        assert bpf.test_run(fd, bytes(bad))[0] == 1          # XDP_DROP, as a bridge
        assert sum(get_port(ms, k)["frames"] for k in range(4)) == 0
    with maps() as ms, program(ms, "ar_ingress", decide=0, up_key=2) as fd:
        assert bpf.test_run(fd, bytes(bad)) == (2, bytes(bad))     # not a deciding port


def test_egress_leaves_a_hosts_own_dscp_alone_even_when_it_equals_a_mark():
    with maps() as ms:
        own = roce(dscp=model.mark(PORTS[0]))
        with program(ms, "ar_egress", decide=0, key=0) as fd_eg:
            ret, out, _ = bpf.test_run_skb(fd_eg, own)
        assert ret == 0xFFFFFFFF and out == own
        e = get_port(ms, 0)
        assert e["in"] == LEN and e["sent_in"] == 0          # queued, never decided


def test_egress_restores_a_frame_marked_for_another_port_without_counting_it_in():
    with maps() as ms:
        other = stage_marked(roce(0xC000), PORTS[1])
        with program(ms, "ar_egress", decide=0, key=0) as fd_eg:
            ret, out, _ = bpf.test_run_skb(fd_eg, other)
        assert ret == 0xFFFFFFFF and out == roce(0xC000)     # the class and the source back
        assert get_port(ms, 0)["sent_in"] == 0


def test_egress_restores_the_class_and_counts_the_frame_in():
    with maps() as ms:
        with program(ms, "ar_ingress") as fd_in:
            marked = bpf.test_run(fd_in, roce(0xC000))[1]
        k = PORTS.index(port_of(marked))
        with program(ms, "ar_egress", decide=0, key=k) as fd_eg:
            ret, out, _ = bpf.test_run_skb(fd_eg, marked)
        assert ret == 0xFFFFFFFF                             # TC_ACT_UNSPEC: the next filter
        assert dscp(out) == 26 and out[15] & 3 == 2
        assert struct.unpack_from("!H", out, 24)[0] == ip_checksum(out)
        assert out == roce(0xC000)                           # as the host sent it
        e = get_port(ms, k)
        assert e["in"] == LEN and e["sent_in"] == e["sent"] == LEN
        assert e["load"] == LEN


def test_a_frame_decided_before_its_port_died_is_rescued_at_that_port_s_egress():
    with maps() as ms:
        for k in range(4):
            set_port(ms, k, keep=True, ifindex=100 + k)
        with program(ms, "ar_ingress") as fd_in:
            marked = bpf.test_run(fd_in, roce(0xC000))[1]    # decided, then held by OVS
        k = PORTS.index(port_of(marked))
        later = time.monotonic_ns() + 3600 * SEC
        with program(ms, "ar_egress", decide=0, key=k) as fd_eg:
            set_down(ms, k, t_ns=later)                      # cut, not yet detected: lost
            ret, out, _ = bpf.test_run_skb(fd_eg, marked)
            assert ret == 0xFFFFFFFF and dscp(out) == 26
            assert get_port(ms, k)["rescued"] == 0
            set_port(ms, (k + 1) % 4, keep=True, **{"in": 9 * LEN})
            set_down(ms, k, t_ns=1)                          # detected: decided again
            ret, out, _ = bpf.test_run_skb(fd_eg, marked)
        assert ret == 7                                      # TC_ACT_REDIRECT
        new = PORTS.index(port_of(out))
        assert new not in (k, (k + 1) % 4)                   # the best live candidate
        assert out[6] & 1                                    # still the stage's: restored
        #                                                      at the new port's egress
        assert out[15] & 3 == 2 and struct.unpack_from("!H", out, 24)[0] == ip_checksum(out)
        assert icrc(out) == struct.unpack_from("<I", out, len(out) - 4)[0]
        dead, e = get_port(ms, k), get_port(ms, new)
        assert dead["rescued"] == 1 and dead["in"] == LEN    # only the first entered its queue
        assert e["sent"] == LEN and e["frames"] == 1
    with maps(routes={}) as ms:                              # no route: nothing to rescue by
        set_port(ms, 0, keep=True, ifindex=100)
        set_down(ms, 0)
        with program(ms, "ar_egress", decide=0, key=0) as fd_eg:
            ret, out, _ = bpf.test_run_skb(fd_eg, stage_marked(roce(), PORTS[0]))
        assert ret == 0xFFFFFFFF and dscp(out) == 26 and get_port(ms, 0)["rescued"] == 0


def test_egress_leaves_out_what_the_tbf_drops_and_notes_a_building_queue():
    with maps() as ms:
        set_port(ms, 0, keep=True, limit=5 * LEN)
        with program(ms, "ar_egress", decide=0, key=0) as fd:
            for n in range(6):
                bpf.test_run_skb(fd, roce())
                if n == 2:
                    assert get_port(ms, 0)["hot"] == 0       # 3 frames: band 2
        e = get_port(ms, 0)
        assert e["in"] == 5 * LEN                            # the sixth is the TBF's drop
        assert e["hot"] == 1 and e["hot_ns"] > 0             # 4 frames: the queue built


def test_dequeue_marking_hands_the_frame_on_to_the_adaptive_stage():
    from emulator.dataplane.lossless import ecnq
    queues = bpf.Map(ecnq.ENTRY.size, 1)
    chain = bpf.prog_array(1)
    try:
        with maps() as ms, program(ms, "ar_ingress") as ar_fd, \
                ecnq.programs(queues, 0, 100 * LEN, 10 * LEN, 20 * LEN, 0.1, 0,
                              chain) as fds:
            ret, out = bpf.test_run(fds["ecnq_out"], roce())
            assert ret == 2 and dscp(out) == 26              # nothing follows yet
            chain.update(0, struct.pack("<I", ar_fd))
            ret, out = bpf.test_run(fds["ecnq_out"], roce())
            assert ret == 2 and port_of(out) in PORTS        # the stage decided it
            assert ecnq.ENTRY.unpack(queues.lookup(0))[1] == 2 * LEN   # both counted out
            chain.delete(0)
            assert dscp(bpf.test_run(fds["ecnq_out"], roce())[1]) == 26
    finally:
        chain.close()
        queues.close()
