"""A NIC's outgoing packets: chunks over QPs, the shorter last frame derived without
scapy, every probe field patched in place, and the receive path's one-unpack parse."""

import inspect

import pytest

from traffic.nic.sendq import SendQueues
from traffic.ranks.outbound import Outbound, qp_key
from traffic.ranks.uet_outbound import UetOutbound
from traffic.roce.frames import HEADERS_LEN, RETH_LEN, FastParser, FrameTemplate, parse

A, B = ("02:00:00:00:00:01", "10.0.0.1"), ("02:00:00:00:00:02", "10.0.0.2")


def template(op, payload):
    extra = RETH_LEN if op in ("WRITE_FIRST", "WRITE_ONLY") else 0
    return FrameTemplate(A[0], B[0], A[1], B[1], 0x1234, opcode=op,
                         frame_len=HEADERS_LEN + extra + payload, ecn=2,
                         ackreq=op in ("WRITE_LAST", "WRITE_ONLY"))


@pytest.mark.parametrize("op", ["WRITE_ONLY", "WRITE_FIRST", "WRITE_MIDDLE", "WRITE_LAST"])
def test_a_resized_template_is_the_frame_scapy_builds(op):
    full = template(op, 4096)
    extra = RETH_LEN if op in ("WRITE_FIRST", "WRITE_ONLY") else 0
    for payload in (36, 37, 1000, 4095):
        built, derived = template(op, payload), full.resized(HEADERS_LEN + extra + payload)
        assert derived.raw == built.raw
        fields = dict(flow=3, tag=5, chunk=2, index=7, count=9)
        assert derived.frame(11, 22, **fields) == built.frame(11, 22, **fields)


def test_fill_packet_patches_every_probe_field_over_a_reused_slot():
    t = template("WRITE_MIDDLE", 1024)
    slot = bytearray(9216)
    t.fill_packet(slot, 1, 2, 3, 4, 5, 6, 7, True)
    n = t.fill_packet(slot, 8, 9, 10, 11, 12, 13, 14, False)     # headers only
    frame = bytes(slot[:n])
    assert frame == t.frame(8, 9, flow=10, tag=11, chunk=12, index=13, count=14)
    p = parse(frame)
    got = FastParser().rdma(memoryview(slot), n)
    assert got == (p.src_ip, p.dst_ip, p.ecn, p.dqpn, p.psn, p.ackreq, p.flow, p.tx_ns,
                   p.tag, p.chunk, p.index, p.count, True)
    slot[n - 20] ^= 1
    assert FastParser().rdma(memoryview(slot), n)[-1] is False
    assert FastParser().rdma(memoryview(b"\x00" * 100), 100) is None


def test_outbound_spreads_a_chunk_over_qps_with_opcodes_and_psns():
    out = Outbound(0, A[1], A[0], {1: B[1]}, {1: B[0]}, mtu=1024, qps=2)
    out.prepare(1)
    pk = out.packets(tag=3, step=1, peer=1, nbytes=5000)      # 5 packets, 3 + 2 per QP
    assert [qp_key(p) for p in pk] == [(1, 0), (1, 1), (1, 0), (1, 1), (1, 0)]
    assert [p[1] for p in pk] == [0, 0, 1, 1, 2]               # PSN per QP
    assert [p[0].opcode for p in pk] == [0x06, 0x06, 0x07, 0x08, 0x08]   # FIRST.. LAST
    assert all(p[3:] == (3, 1, i, 5) for i, p in enumerate(pk))
    assert pk[-1][0].len == HEADERS_LEN + 5000 - 4 * 1024     # the short last frame
    q = SendQueues(qp_key)
    q.extend(pk)
    batch, again = out.next_batch(q, 4, 0)
    assert [qp_key(p) for p in batch] == [(1, 0), (1, 1), (1, 0), (1, 1)] and not any(again)


def test_either_transports_outbound_takes_the_rank_engines_call():
    # traffic.ranks.rank asks for a chunk's packets with the time (UET's PDCs open then)
    for cls in (Outbound, UetOutbound):
        inspect.signature(cls.packets).bind(None, 3, 1, 1, 5000, 0)
    out = Outbound(0, A[1], A[0], {1: B[1]}, {1: B[0]}, mtu=1024, qps=2)
    out.prepare(1)
    assert len(out.packets(3, 1, 1, 5000, 123)) == 5


def test_a_class_of_its_own_gets_qps_of_its_own_with_its_dscp():
    out = Outbound(0, A[1], A[0], {1: B[1]}, {1: B[0]}, mtu=1024, qps=2, dscp=26,
                   class_dscp=[26, 0], tag_class=[0, 0, 1])
    default, other = out.packets(1, 0, 1, 4096), out.packets(2, 0, 1, 4096)
    assert sorted({qp_key(p)[1] for p in default}) == [0, 1]
    assert sorted({qp_key(p)[1] for p in other}) == [2, 3]
    assert {parse(p[0].raw).dscp for p in default} == {26}
    assert {parse(p[0].raw).dscp for p in other} == {0}
    # each class's QPs start their own PSNs and carry whole messages
    assert [p[1] for p in other if qp_key(p)[1] == 2] == [0, 1]
    assert {p[0].opcode for p in other} == {0x06, 0x08}            # WRITE FIRST, LAST
