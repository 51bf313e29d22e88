"""Bulk encoding (``ofcodec.encode``, ``frame``, ``bundle``) against os-ken's own serializer.

The controller sends a switch's messages as bytes encoded once per distinct
message; a diff of many messages goes as one OpenFlow bundle.  The bytes
must be exactly what os-ken would have sent, message by message.
"""

import struct

from os_ken.ofproto import ofproto_parser as ofproto_parser_mod
from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as parser

from controller import ofcodec as oc
from controller import policy, topology
from controller.messages import SwitchState
from emulator.fabric import addressing, presets


class FakeDatapath:
    ofproto, ofproto_parser, id = ofp, parser, 1


def messages():
    topo = topology.from_dict(addressing.plan(presets.build("leaf-spine"), "ab12"))
    state = policy.desired_state(topo, topo.all_ports(), "fast-failover")
    return policy.diff(SwitchState(), state[topo.by_name["spine1"].dpid]) + \
        policy.diff(SwitchState(), state[topo.by_name["leaf1"].dpid])


def osken_bytes(msg, xid):
    m = oc.to_osken(FakeDatapath(), msg)
    m.set_xid(xid)
    m.serialize()
    return bytes(m.buf)


def split(buf):
    """[(type, xid, bytes)] of back-to-back OpenFlow messages."""
    out, off = [], 0
    while off < len(buf):
        _, typ, length, xid = struct.unpack_from("!BBHI", buf, off)
        out.append((typ, xid, bytes(buf[off:off + length])))
        off += length
    return out


def test_encode_is_os_kens_bytes_and_each_message_is_encoded_once():
    for m in messages():
        assert oc.encode(m) == osken_bytes(m, 0)
        assert oc.encode(m) is oc.encode(m)       # from the cache


def test_frame_numbers_the_messages_and_os_ken_parses_them_back():
    msgs = messages()
    parts = split(oc.frame([oc.encode(m) for m in msgs], 0xFFFFFFFE))  # the xid wraps
    assert [xid for _, xid, _ in parts] == [(0xFFFFFFFE + i) & 0xFFFFFFFF for i in range(len(msgs))]
    for m, (_, xid, b) in zip(msgs, parts):
        assert b == osken_bytes(m, xid)
    typ, xid, b = parts[-1]
    back = ofproto_parser_mod.msg(FakeDatapath(), ofp.OFP_VERSION, typ, len(b), xid, b)
    assert back.xid == xid


def test_bundle_is_open_adds_commit_as_os_ken_builds_them():
    msgs = messages()
    parts = split(oc.bundle([oc.encode(m) for m in msgs], 100, 7))
    assert len(parts) == len(msgs) + 2
    assert [xid for _, xid, _ in parts] == list(range(100, 100 + len(msgs) + 2))
    for (typ, xid, b), kind in ((parts[0], ofp.OFPBCT_OPEN_REQUEST),
                                (parts[-1], ofp.OFPBCT_COMMIT_REQUEST)):
        ctrl = parser.OFPBundleCtrlMsg(FakeDatapath(), 7, kind, oc.BUNDLE_FLAGS, [])
        ctrl.set_xid(xid)
        ctrl.serialize()
        assert b == bytes(ctrl.buf)
    for m, (typ, xid, b) in zip(msgs, parts[1:-1]):
        add = parser.OFPBundleAddMsg(FakeDatapath(), 7, oc.BUNDLE_FLAGS,
                                     oc.to_osken(FakeDatapath(), m), [])
        add.set_xid(xid)
        add.serialize()
        assert typ == ofp.OFPT_BUNDLE_ADD_MESSAGE and b == bytes(add.buf)
        assert struct.unpack_from("!I", b, 16 + 4)[0] == xid    # inner xid = the add's
    assert oc.BUNDLE_FLAGS == ofp.OFPBF_ATOMIC | ofp.OFPBF_ORDERED
