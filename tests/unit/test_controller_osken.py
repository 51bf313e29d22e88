"""The os-ken translation layer without a switch: bytes on the wire and back.

Serializes abstract messages with os-ken's OF1.5 parser, checks the OVS
Netronome selection-method layout byte by byte, and parses the bytes back
through our decoders (which include the fixes for os-ken's parser bugs).
"""

import struct
import subprocess
import sys
from pathlib import Path

from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as parser

from controller import ofcodec as oa
from controller import lb, policy, topology
from controller.messages import Bucket, GroupMod, Output, Selection
from emulator.fabric import addressing, presets

ROOT = Path(__file__).resolve().parents[2]


class FakeDatapath:
    ofproto, ofproto_parser, id = ofp, parser, 1

    def set_xid(self, msg):
        msg.set_xid(7)


def wire(msg):
    msg.set_xid(7)
    msg.serialize()
    return bytes(msg.buf)


def test_ntr_selection_property_layout():
    gm = GroupMod(3, "select", (Bucket((Output(2),), 1, 2), Bucket((Output(3),), 1, 3)),
                  Selection(("ipv4_src", "ipv4_dst", "udp_src", "udp_dst"), 0x10001))
    buf = wire(oa.to_osken(FakeDatapath(), gm))
    (bucket_len,) = struct.unpack_from("!H", buf, 8 + 8)     # ofp15_group_mod.bucket_array_len
    prop = buf[24 + bucket_len:]
    typ, length, exp, exp_type = struct.unpack_from("!HHII", prop)
    assert (typ, exp, exp_type) == (0xFFFF, 0x154D, 1)
    assert length == 40 + 8 + 8 + 6 + 6                    # header + 4 OXM TLVs, no pad
    assert len(prop) == 72                                  # padded to 8
    assert prop[16:32].rstrip(b"\0") == b"hash"
    assert struct.unpack_from("!Q", prop, 32)[0] == 0x10001
    # OXM_OF_IPV4_SRC (field 11), has_mask 0, length 4, value all ones
    assert prop[40:48] == bytes.fromhex("80001604ffffffff")
    assert prop[56:62] == bytes.fromhex("80001e02ffff")     # OXM_OF_UDP_SRC (15)


def roundtrip_group(gm):
    buf = wire(oa.to_osken(FakeDatapath(), gm))
    # a group desc entry has the group mod's body: rebuild one around it
    body = buf[24:]
    bucket_len = struct.unpack_from("!H", buf, 16)[0]
    desc = struct.pack("!HBxIH6x", 16 + len(body), ofp.OFPGT_SELECT, gm.group_id, bucket_len) + body
    return oa.from_group_desc(parser.OFPGroupDescStats.parser(desc + desc, 0))


def test_group_roundtrip_through_os_ken():
    topo = topology.from_dict(addressing.plan(presets.build("leaf-spine"), "ab12"))
    groups = policy.desired_state(topo, topo.all_ports(), "controller")[0x10001].groups
    assert len(groups) == 3                       # one per remote leaf
    for gm in groups:
        assert len(gm.buckets) == 4
        assert roundtrip_group(gm) == gm


def test_flows_roundtrip_through_os_ken():
    topo = topology.from_dict(addressing.plan(presets.build("leaf-spine"), "ab12"))
    desired = policy.desired_state(topo, topo.all_ports(), "controller")
    flows = lb.augment(topo, desired, "dlb")[0x10001].flows      # with dlb's masked marks
    assert any(isinstance(dict(f.match).get("eth_src"), tuple) for f in flows)
    for fm in flows:
        m = oa.to_osken(FakeDatapath(), fm)
        assert len(wire(m)) > 48
        # rebuild the flow desc entry a switch would send for this flow
        match_buf = bytearray()
        mlen = m.match.serialize(match_buf, 0)
        stats = bytes.fromhex("0000001080020008") + b"\0" * 8    # ofp_stats: duration only
        inst = bytearray()
        for i in m.instructions:
            i.serialize(inst, len(inst))
        head = struct.pack(ofp.OFP_FLOW_DESC_0_PACK_STR,
                           ofp.OFP_FLOW_DESC_0_SIZE + len(match_buf) + len(stats) + len(inst),
                           m.table_id, m.priority, 0, 0, 0, 0, m.cookie)
        desc = parser.OFPFlowDesc.parser(head + bytes(match_buf) + stats + bytes(inst), 0)
        assert mlen and oa.from_flow_desc(desc) == fm


def test_launcher_rejects_a_bad_topology(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text('{"schema_version": 9}')
    r = subprocess.run([sys.executable, "-m", "controller", "--topology", str(bad)],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "schema_version" in r.stderr
    r = subprocess.run([sys.executable, "-m", "controller", "--topology", str(bad),
                        "--listen", "0.0.0.0:6653"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "127.0.0.1 only" in r.stderr
