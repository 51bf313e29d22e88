"""OpenFlow 1.5 codec: ``controller.messages`` <-> os-ken's parser objects.

The one place besides the app that touches os-ken's OpenFlow classes (as
Faucet keeps its parser behind valve_of): builds flow and group mods from the
policy's messages (``to_osken``), reads flow and group descriptions back
into them for the diff (``from_flow_desc``, ``from_group_desc``), and
encodes OVS's Netronome select-group hash property.  It also installs fixed
parsers for four os-ken 4.2.2 OF1.5 parsers that misread multi-object
replies.

Bulk sends (``encode``, ``frame``, ``bundle``): os-ken builds and serializes
a tree of Python objects per message (about 100 us a flow mod), and a
256-host fabric's install is 166,000 messages, most of them the same bytes on
every leaf (ARP responders, routes toward remote hosts).  ``encode`` keeps
each distinct message's bytes (xid 0); ``frame`` numbers a run of them and
``bundle`` wraps them in one OpenFlow 1.4+ bundle (open, adds, commit with
ATOMIC|ORDERED: Open vSwitch applies the adds in order, in one version of
its tables, and revalidates its datapath once).
"""

import struct

from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as parser

from .messages import (
    Bucket,
    CopyField,
    DecNwTtl,
    FlowMod,
    Group,
    GroupMod,
    Output,
    Selection,
    SetField,
)

NTR_VENDOR_ID = 0x0000154D          # Netronome
NTR_COMPAT_VENDOR_ID = 0x00001540   # the wrong value OVS 2.4 used; still accepted
NTRT_SELECTION_METHOD = 1
GROUP_TYPES = {"all": ofp.OFPGT_ALL, "select": ofp.OFPGT_SELECT,
               "indirect": ofp.OFPGT_INDIRECT, "ff": ofp.OFPGT_FF}
GROUP_TYPE_NAMES = {v: k for k, v in GROUP_TYPES.items()}
FLOW_COMMANDS = {"add": ofp.OFPFC_ADD, "modify": ofp.OFPFC_MODIFY_STRICT,
                 "delete": ofp.OFPFC_DELETE_STRICT}
GROUP_COMMANDS = {"add": ofp.OFPGC_ADD, "modify": ofp.OFPGC_MODIFY, "delete": ofp.OFPGC_DELETE}
# The all-ones value of each field a select group may hash ("hash all bits").
ALL_ONES = {"ipv4_src": "255.255.255.255", "ipv4_dst": "255.255.255.255",
            "udp_src": 0xFFFF, "udp_dst": 0xFFFF, "tcp_src": 0xFFFF, "tcp_dst": 0xFFFF,
            "ip_proto": 0xFF, "eth_src": "ff:ff:ff:ff:ff:ff", "eth_dst": "ff:ff:ff:ff:ff:ff"}


# ---- os-ken 4.2.2 parser fixes ------------------------------------------------
# copy_field's parser loses the action length, and three OF1.5 parsers slice ``buf[offset:offset + length]`` after ``offset``
# has already moved past the header, so they read into the next object:
# copy_field actions then "have" more than two OXM ids (AssertionError),
# buckets parse the next bucket as properties (ValueError), and group desc
# entries parse the next group as properties. Replies from OVS with several
# buckets/groups/actions fail to parse without these corrected versions.

def _copy_field_parser(cls, buf, offset):
    (type_, len_, n_bits, src_offset, dst_offset) = struct.unpack_from(
        ofp.OFP_ACTION_COPY_FIELD_PACK_STR, buf, offset)
    rest = buf[offset + ofp.OFP_ACTION_COPY_FIELD_SIZE:offset + len_]
    oxm_ids = []
    while rest and len(oxm_ids) < 2:          # what follows is padding
        oxm_id, rest = parser.OFPOxmId.parse(rest)
        oxm_ids.append(oxm_id)
    action = cls(n_bits, src_offset, dst_offset, oxm_ids, type_, len_)
    action.len = len_      # __init__ drops len_, so the next action was misparsed too
    return action


def _bucket_parser(cls, buf, offset):
    msg = cls()
    start = offset
    (msg.len, msg.action_array_len, msg.bucket_id) = struct.unpack_from(
        ofp.OFP_BUCKET_PACK_STR, buf, offset)
    offset += ofp.OFP_BUCKET_SIZE
    action_buf = buf[offset:offset + msg.action_array_len]
    msg.actions = []
    while action_buf:
        action = parser.OFPAction.parser(action_buf, 0)
        msg.actions.append(action)
        action_buf = action_buf[action.len:]
    rest = buf[offset + msg.action_array_len:start + msg.len]
    msg.properties = []
    while rest:
        prop, rest = parser.OFPGroupBucketProp.parse(rest)
        msg.properties.append(prop)
    return msg


def _group_desc_parser(cls, buf, offset):
    stats = cls()
    start = offset
    (stats.length, stats.type, stats.group_id, stats.bucket_array_len) = struct.unpack_from(
        ofp.OFP_GROUP_DESC_STATS_PACK_STR, buf, offset)
    offset += ofp.OFP_GROUP_DESC_STATS_SIZE
    bucket_buf = buf[offset:offset + stats.bucket_array_len]
    stats.buckets = []
    while bucket_buf:
        bucket = parser.OFPBucket.parser(bucket_buf, 0)
        stats.buckets.append(bucket)
        bucket_buf = bucket_buf[bucket.len:]
    rest = buf[offset + stats.bucket_array_len:start + stats.length]
    stats.properties = []
    while rest:
        prop, rest = parser.OFPGroupProp.parse(rest)
        stats.properties.append(prop)
    return stats


parser.OFPActionCopyField.parser = classmethod(_copy_field_parser)
parser.OFPBucket.parser = classmethod(_bucket_parser)
parser.OFPGroupDescStats.parser = classmethod(_group_desc_parser)


# ---- abstract messages -> os-ken --------------------------------------------

def to_action(a):
    if isinstance(a, Output):
        return parser.OFPActionOutput(a.port, ofp.OFPCML_NO_BUFFER)
    if isinstance(a, Group):
        return parser.OFPActionGroup(a.group_id)
    if isinstance(a, SetField):
        return parser.OFPActionSetField(**{a.field: a.value})
    if isinstance(a, CopyField):
        return parser.OFPActionCopyField(a.n_bits, 0, 0, [a.src, a.dst])
    if isinstance(a, DecNwTtl):
        return parser.OFPActionDecNwTtl()
    raise TypeError(f"no OpenFlow translation for {a!r}")


def selection_prop(sel):
    """The Netronome selection-method group property for OVS."""
    oxm = parser.OFPMatch(**{f: ALL_ONES[f] for f in sel.fields})
    buf = bytearray()
    oxm.serialize(buf, 0)
    (oxm_len,) = struct.unpack_from("!H", buf, 2)
    tlvs = bytes(buf[4:oxm_len])        # strip ofp_match type/length and padding
    # os-ken sends the data as 32-bit words and OVS takes (length - 40) bytes
    # as TLVs, so trailing pad inside the length would be parsed as a TLV.
    if len(tlvs) % 4:
        raise ValueError(f"hash fields {sel.fields} do not fill whole 32-bit words")
    body = (b"\0" * 4 + sel.method.encode().ljust(16, b"\0")
            + struct.pack("!Q", sel.basis) + tlvs)
    words = list(struct.unpack(f"!{len(body) // 4}I", body))
    return parser.OFPGroupPropExperimenter(type_=ofp.OFPGPT_EXPERIMENTER,
                                           experimenter=NTR_VENDOR_ID,
                                           exp_type=NTRT_SELECTION_METHOD, data=words)


def to_osken(dp, msg):
    """An os-ken message for one abstract FlowMod/GroupMod."""
    if isinstance(msg, FlowMod):
        actions = [to_action(a) for a in msg.actions]
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
        return parser.OFPFlowMod(
            dp, cookie=msg.cookie, cookie_mask=0, table_id=msg.table,
            command=FLOW_COMMANDS[msg.command], priority=msg.priority,
            buffer_id=ofp.OFP_NO_BUFFER, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
            match=parser.OFPMatch(**dict(msg.match)), instructions=inst)
    if isinstance(msg, GroupMod):
        buckets = []
        for i, b in enumerate(msg.buckets):
            props = []
            if msg.type == "select":
                props.append(parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT, weight=b.weight))
            if b.watch_port is not None:
                props.append(parser.OFPGroupBucketPropWatch(type_=ofp.OFPGBPT_WATCH_PORT,
                                                            watch=b.watch_port))
            buckets.append(parser.OFPBucket(i, [to_action(a) for a in b.actions], props))
        props = [selection_prop(msg.selection)] if msg.selection else []
        if msg.command == "delete":
            buckets, props = [], []
        return parser.OFPGroupMod(dp, GROUP_COMMANDS[msg.command], GROUP_TYPES[msg.type],
                                  msg.group_id, ofp.OFPG_BUCKET_ALL, buckets, props)
    raise TypeError(f"no OpenFlow translation for {msg!r}")


# ---- bulk wire encoding ----------------------------------------------------

class _CodecDatapath:
    """What os-ken's serializers read of a datapath."""
    ofproto, ofproto_parser = ofp, parser


WIRE_CACHE_MAX = 1 << 17          # distinct messages kept (a 256-host fabric has ~10k)
_wire = {}
BUNDLE_FLAGS = ofp.OFPBF_ATOMIC | ofp.OFPBF_ORDERED
_BUNDLE_CTRL = struct.Struct(ofp.OFP_HEADER_PACK_STR + ofp.OFP_BUNDLE_CTRL_MSG_PACK_STR[1:])
_BUNDLE_ADD = struct.Struct(ofp.OFP_HEADER_PACK_STR + ofp.OFP_BUNDLE_ADD_MSG_0_PACK_STR[1:])
_XID = struct.Struct("!I")


def encode(msg):
    """The OpenFlow bytes of one abstract FlowMod/GroupMod, xid 0; cached per message."""
    buf = _wire.get(msg)
    if buf is None:
        m = to_osken(_CodecDatapath, msg)
        m.set_xid(0)
        m.serialize()
        buf = bytes(m.buf)
        if len(_wire) >= WIRE_CACHE_MAX:
            _wire.clear()
        _wire[msg] = buf
    return buf


def frame(blobs, xid):
    """Encoded messages back to back, numbered ``xid``, ``xid + 1``, ..."""
    out = bytearray().join(blobs)
    off = 0
    for i, b in enumerate(blobs):
        _XID.pack_into(out, off + 4, (xid + i) & ofp.MAX_XID)
        off += len(b)
    return out


def bundle(blobs, xid, bundle_id):
    """One bundle: OPEN, an ADD per encoded message, COMMIT; xids from ``xid`` on
    (len(blobs) + 2 of them; an ADD's inner message carries the ADD's xid)."""
    head = _BUNDLE_CTRL.size
    parts = [_BUNDLE_CTRL.pack(ofp.OFP_VERSION, ofp.OFPT_BUNDLE_CONTROL, head, xid & ofp.MAX_XID,
                               bundle_id, ofp.OFPBCT_OPEN_REQUEST, BUNDLE_FLAGS)]
    for i, b in enumerate(blobs, 1):
        x = (xid + i) & ofp.MAX_XID
        parts.append(_BUNDLE_ADD.pack(ofp.OFP_VERSION, ofp.OFPT_BUNDLE_ADD_MESSAGE,
                                      _BUNDLE_ADD.size + len(b), x, bundle_id, BUNDLE_FLAGS))
        parts.append(b[:4] + _XID.pack(x) + b[8:])
    parts.append(_BUNDLE_CTRL.pack(ofp.OFP_VERSION, ofp.OFPT_BUNDLE_CONTROL, head,
                                   (xid + len(blobs) + 1) & ofp.MAX_XID, bundle_id,
                                   ofp.OFPBCT_COMMIT_REQUEST, BUNDLE_FLAGS))
    return bytearray().join(parts)


def wire(msgs, xid, bundle_min):
    """(bytes, bundled) sending abstract ``msgs`` from ``xid`` on: one bundle if
    there are ``bundle_min`` or more, else the messages themselves."""
    blobs = [encode(m) for m in msgs]
    bundled = len(blobs) >= bundle_min
    return bytes(bundle(blobs, xid, xid) if bundled else frame(blobs, xid)), bundled


# ---- os-ken replies -> abstract state ---------------------------------------

class Foreign:
    """Something on a switch this controller never installs; never equal to ours."""

    def __init__(self, what):
        self.what = repr(what)

    def __repr__(self):
        return f"Foreign({self.what})"


def from_action(a):
    if isinstance(a, parser.OFPActionOutput):
        return Output(a.port)
    if isinstance(a, parser.OFPActionGroup):
        return Group(a.group_id)
    if isinstance(a, parser.OFPActionSetField):
        return SetField(a.key, a.value)
    if isinstance(a, parser.OFPActionDecNwTtl):
        return DecNwTtl()
    if isinstance(a, parser.OFPActionCopyField) and a.src_offset == 0 == a.dst_offset:
        return CopyField(a.oxm_ids[0].type, a.oxm_ids[1].type, a.n_bits)
    return Foreign(a)


def from_flow_desc(fd):
    actions = ()
    for inst in fd.instructions:
        if isinstance(inst, parser.OFPInstructionActions) and inst.type == ofp.OFPIT_APPLY_ACTIONS:
            actions += tuple(from_action(a) for a in inst.actions)
        else:
            actions += (Foreign(inst),)
    match = tuple(sorted((k, v if not isinstance(v, list) else tuple(v))
                         for k, v in fd.match.items()))
    return FlowMod(fd.table_id, fd.priority, match, actions, fd.cookie)


def parse_selection(prop):
    """Selection from an NTR experimenter group property, or a Foreign."""
    if (prop.experimenter not in (NTR_VENDOR_ID, NTR_COMPAT_VENDOR_ID)
            or prop.exp_type != NTRT_SELECTION_METHOD):
        return Foreign(prop)
    body = struct.pack(f"!{len(prop.data)}I", *prop.data)
    method = body[4:20].rstrip(b"\0").decode()
    (basis,) = struct.unpack_from("!Q", body, 20)
    tlvs = body[28:prop.length - 12]
    match_buf = struct.pack("!HH", ofp.OFPMT_OXM, 4 + len(tlvs)) + tlvs
    match_buf += b"\0" * (-len(match_buf) % 8)
    fields = tuple(k for k, _ in parser.OFPMatch.parser(match_buf, 0).items())
    return Selection(fields, basis, method)


def from_group_desc(gd):
    buckets = []
    for b in gd.buckets:
        weight, watch = 1, None
        for p in b.properties:
            if isinstance(p, parser.OFPGroupBucketPropWeight):
                weight = p.weight
            elif p.type == ofp.OFPGBPT_WATCH_PORT and p.watch != ofp.OFPP_ANY:
                watch = p.watch
        buckets.append(Bucket(tuple(from_action(a) for a in b.actions), weight, watch))
    selection = None
    for p in gd.properties:
        selection = parse_selection(p)
    return GroupMod(gd.group_id, GROUP_TYPE_NAMES.get(gd.type, gd.type), tuple(buckets), selection)


def port_is_live(p):
    """Link up, not config-down, and LIVE: Open vSwitch clears LIVE when a port's
    liveness (carrier AND BFD, if configured) fails, e.g. a BFD session down."""
    return (not (p.state & ofp.OFPPS_LINK_DOWN) and not (p.config & ofp.OFPPC_PORT_DOWN)
            and bool(p.state & ofp.OFPPS_LIVE))


def read_ports(request, dp):
    """The switch's live port numbers (port desc); ``request(msg, reply_cls)`` -> replies."""
    ports = set()
    for reply in request(parser.OFPPortDescStatsRequest(dp, 0), parser.OFPPortDescStatsReply):
        ports |= {p.port_no for p in reply.body if port_is_live(p)}
    return ports


def read_tables(request, dp):
    """The switch's flows (OF1.5 flow desc) and groups, as sets of abstract messages."""
    flows, groups = set(), set()
    req = parser.OFPFlowDescStatsRequest(dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                         0, 0, parser.OFPMatch())
    for reply in request(req, parser.OFPFlowDescStatsReply):
        flows |= {from_flow_desc(fd) for fd in reply.body}
    req = parser.OFPGroupDescStatsRequest(dp, 0, ofp.OFPG_ALL)
    for reply in request(req, parser.OFPGroupDescStatsReply):
        groups |= {from_group_desc(gd) for gd in reply.body}
    return flows, groups
