"""A scapy dissector of UET over UDP (port 4793): PDS requests, ACK_CC, NACK, CONTROL
and the SES standard request, with the lab's probe header and trailer as payload.

``Ether(frame)`` decodes a captured UET frame once this module is imported (the
layers are bound to UDP's destination port 4793); ``summary(pkt)`` gives what a
capture is read for: the PDS type, the PSN, the SACK bitmap, whether a switch
trimmed it.  The layouts are ``frames``' (one place); this module spells them in
scapy's fields, and ``data_frame``/``control_frame`` build the templates from
them (the unit tests round-trip every frame both ways).
"""

from scapy.fields import (
    BitEnumField,
    BitField,
    ByteField,
    ConditionalField,
    IntField,
    LongField,
    ShortField,
    SignedShortField,
    ThreeBytesField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

from traffic.roce.frames import PROBE, PROBE_MAGIC
from traffic.uet.layout import (
    ACK_CC,
    ACK_CCX,
    CC_REQUESTS,
    CTRL,
    NACK,
    NACK_CCX,
    NH_REQ_STD,
    REQUESTS,
    SES_WRITE,
    TRAILER_LEN,
    TRIM_DSCP,
    TYPE_NAMES,
    UET_PORT,
)

NEXT_HEADERS = {0: "NONE", 1: "REQ_SMALL", 2: "REQ_MEDIUM", 3: "REQ_STD", 4: "RESPONSE",
                5: "RESPONSE_DATA", 6: "RESPONSE_DATA_SMALL"}
CONTROL_TYPES = {0: "NOOP", 1: "ACK_REQ", 2: "CLEAR_CMD", 3: "CLEAR_REQ", 4: "CLOSE_CMD",
                 5: "CLOSE_REQ", 6: "PROBE", 7: "CREDIT", 8: "CREDIT_REQ", 9: "NEGOTIATION"}
SES_OPCODES = {0: "NO_OP", 1: "WRITE", 2: "READ", 3: "ATOMIC", 4: "FETCHING_ATOMIC",
               5: "SEND", 6: "RENDEZVOUS_SEND", 7: "DATAGRAM_SEND", 8: "DEFERRABLE_SEND",
               9: "TAGGED_SEND"}
CC_TYPES = {0: "NSCC", 1: "CREDIT"}


def _type_of(raw):
    return raw[0] >> 3 if raw else None


class UET(Packet):
    """The PDS header, whichever kind the first five bits name (dispatch)."""

    name = "UET PDS"

    @classmethod
    def dispatch_hook(cls, _pkt=None, *args, **kargs):
        t = _type_of(_pkt)
        if t is None:
            return cls
        if t in REQUESTS:
            return UETRequest
        if t in (ACK_CC, ACK_CCX, 7):
            return UETAck
        if t in (NACK, NACK_CCX):
            return UETNack
        if t == CTRL:
            return UETControl
        return cls

    fields_desc = [BitEnumField("type", 0, 5, TYPE_NAMES), BitField("next_hdr", 0, 4),
                   BitField("flags", 0, 7)]


class UETRequest(UET):
    name = "UET PDS request"
    fields_desc = [BitEnumField("type", 2, 5, TYPE_NAMES),
                   BitEnumField("next_hdr", NH_REQ_STD, 4, NEXT_HEADERS),
                   BitField("rsvd1", 0, 2), BitField("retx", 0, 1), BitField("ar", 0, 1),
                   BitField("syn", 0, 1), BitField("rsvd2", 0, 2),
                   SignedShortField("clear_psn_offset", 0), IntField("psn", 0),
                   ShortField("spdcid", 0),
                   XShortField("dpdcid", 0),    # with SYN: use-reserved | 0 | PSN offset
                   ConditionalField(ByteField("ccc_id", 0), lambda p: p.type in CC_REQUESTS),
                   ConditionalField(ThreeBytesField("credit_target", 0),
                                    lambda p: p.type in CC_REQUESTS)]

    def guess_payload_class(self, payload):
        return UETSes if self.next_hdr == NH_REQ_STD else Raw

    @property
    def psn_offset(self):
        """With SYN: this PSN's offset from the PDC's start PSN."""
        return self.dpdcid & 0x0FFF


class UETAck(UET):
    name = "UET PDS ACK"
    fields_desc = [BitEnumField("type", ACK_CC, 5, TYPE_NAMES), BitField("next_hdr", 0, 4),
                   BitField("rsvd1", 0, 1), BitField("ecn_marked", 0, 1),
                   BitField("retx", 0, 1), BitField("probe", 0, 1),
                   BitEnumField("req", 0, 2, {0: "none", 1: "clear", 2: "close"}),
                   BitField("rsvd2", 0, 1),
                   SignedShortField("ack_psn_offset", 0), IntField("cack_psn", 0),
                   ShortField("spdcid", 0), ShortField("dpdcid", 0),
                   ConditionalField(BitEnumField("cc_type", 0, 4, CC_TYPES),
                                    lambda p: p.type != 7),
                   ConditionalField(BitField("cc_flags", 0, 4), lambda p: p.type != 7),
                   ConditionalField(ByteField("mpr", 0), lambda p: p.type != 7),
                   ConditionalField(SignedShortField("sack_psn_offset", 0),
                                    lambda p: p.type != 7),
                   ConditionalField(XLongField("sack_bitmap", 0), lambda p: p.type != 7),
                   ConditionalField(ShortField("service_time", 0),
                                    lambda p: p.type == ACK_CC and p.cc_type == 0),
                   ConditionalField(BitField("restore_cwnd", 0, 1),
                                    lambda p: p.type == ACK_CC and p.cc_type == 0),
                   ConditionalField(BitField("rcv_cwnd_pend", 0, 7),
                                    lambda p: p.type == ACK_CC and p.cc_type == 0),
                   ConditionalField(ThreeBytesField("rcvd_bytes", 0),
                                    lambda p: p.type == ACK_CC and p.cc_type == 0),
                   ConditionalField(ThreeBytesField("credit", 0),
                                    lambda p: p.type == ACK_CC and p.cc_type == 1),
                   ConditionalField(ThreeBytesField("credit_rsvd", 0),
                                    lambda p: p.type == ACK_CC and p.cc_type == 1),
                   ConditionalField(ShortField("ooo_count", 0), lambda p: p.type == ACK_CC)]

    @property
    def ack_psn(self):
        return (self.cack_psn + self.ack_psn_offset) & 0xFFFFFFFF

    @property
    def sack_base(self):
        return (self.cack_psn + self.sack_psn_offset) & 0xFFFFFFFF


class UETNack(UET):
    name = "UET PDS NACK"
    fields_desc = [BitEnumField("type", NACK, 5, TYPE_NAMES), BitField("next_hdr", 0, 4),
                   BitField("rsvd1", 0, 1), BitField("ecn_marked", 0, 1),
                   BitField("retx", 0, 1), BitField("nack_type", 0, 1),
                   BitField("rsvd2", 0, 3), ByteField("nack_code", 0),
                   ByteField("vendor_code", 0), IntField("nack_psn", 0),
                   ShortField("spdcid", 0), ShortField("dpdcid", 0),
                   IntField("nack_payload", 0)]     # the highest PSN received + 1


class UETControl(UET):
    name = "UET PDS control"
    fields_desc = [BitEnumField("type", CTRL, 5, TYPE_NAMES),
                   BitEnumField("ctl_type", 0, 4, CONTROL_TYPES),
                   BitField("rsvd1", 0, 2), BitField("retx", 0, 1), BitField("ar", 0, 1),
                   BitField("syn", 0, 1), BitField("rsvd2", 0, 2),
                   XShortField("probe_opaque", 0), IntField("psn", 0),
                   ShortField("spdcid", 0), ShortField("dpdcid", 0),
                   IntField("control_payload", 0)]


class UETSes(Packet):
    """The SES standard request header (a WRITE here)."""

    name = "UET SES standard request"
    fields_desc = [BitField("rsvd", 0, 2), BitEnumField("opcode", SES_WRITE, 6, SES_OPCODES),
                   BitField("version", 0, 2), BitField("dc", 0, 1), BitField("ie", 0, 1),
                   BitField("rel", 0, 1), BitField("hd", 0, 1), BitField("eom", 0, 1),
                   BitField("som", 0, 1), ShortField("message_id", 0),
                   ByteField("ri_generation", 0), ThreeBytesField("job_id", 0),
                   BitField("rsvd2", 0, 4), BitField("pid_on_fep", 0, 12),
                   BitField("rsvd3", 0, 4), BitField("resource_index", 0, 12),
                   LongField("buffer_offset", 0), IntField("initiator", 0),
                   LongField("memory_key", 0),
                   ConditionalField(LongField("header_data", 0), lambda p: p.som),
                   ConditionalField(ShortField("rsvd4", 0), lambda p: not p.som),
                   ConditionalField(BitField("rsvd5", 0, 2), lambda p: not p.som),
                   ConditionalField(BitField("payload_length", 0, 14), lambda p: not p.som),
                   ConditionalField(IntField("message_offset", 0), lambda p: not p.som),
                   IntField("request_length", 0)]


bind_layers(UDP, UET, dport=UET_PORT)


def data_frame(src_mac, dst_mac, src_ip, dst_ip, ptype, payload, dscp, ecn):
    """A data packet's template bytes: every per-packet field zero, the probe's magic
    set, the padding a fixed pattern (so a corrupted payload fails the trailer)."""
    pad = bytes((i * 7 + 3) & 0xFF for i in range(max(payload - PROBE.size, 0)))
    probe = PROBE.pack(PROBE_MAGIC, 0, 0, 0, 0, 0, 0)
    pkt = (Ether(src=src_mac, dst=dst_mac)
           / IP(src=src_ip, dst=dst_ip, tos=(dscp << 2) | ecn, ttl=64, flags="DF", id=0)
           / UDP(sport=0xC000, dport=UET_PORT, chksum=0)
           / UETRequest(type=ptype, next_hdr=NH_REQ_STD)
           / UETSes(opcode=SES_WRITE, som=1, eom=1)
           / Raw(probe + pad + bytes(TRAILER_LEN)))
    return bytes(pkt)


def control_frame(src_mac, dst_mac, src_ip, dst_ip, ptype, dscp):
    """An ACK_CC, NACK or CONTROL frame's template bytes, trailer zero."""
    layer = {ACK_CC: UETAck(type=ACK_CC), NACK: UETNack(), CTRL: UETControl()}[ptype]
    pkt = (Ether(src=src_mac, dst=dst_mac)
           / IP(src=src_ip, dst=dst_ip, tos=dscp << 2, ttl=64, flags="DF", id=0)
           / UDP(sport=0xC000, dport=UET_PORT, chksum=0) / layer / Raw(bytes(TRAILER_LEN)))
    return bytes(pkt)


def uet_layer(pkt):
    """The PDS layer of ``pkt`` (whichever kind), or None."""
    layer = pkt
    while layer is not None and not isinstance(layer, (Raw,)) and layer.name != "NoPayload":
        if isinstance(layer, UET):
            return layer
        layer = layer.payload if layer.payload else None
    return None


def summary(pkt):
    """What a capture of ``pkt`` (a scapy packet) is read for, or None if it is not
    UET: {type, psn, ...}: a request's PSN and flags and whether it was trimmed
    (its DSCP), an ACK's cumulative PSN, ACK PSN and SACK base and bitmap, a
    NACK's code and PSN, a control packet's type."""
    u = uet_layer(pkt)
    if u is None:
        return None
    out = {"type": TYPE_NAMES.get(u.type, str(u.type)), "sport": pkt[UDP].sport}
    if isinstance(u, UETRequest):
        out.update(psn=u.psn, syn=bool(u.syn), ar=bool(u.ar), retx=bool(u.retx),
                   spdcid=u.spdcid, trimmed=pkt[IP].tos >> 2 == TRIM_DSCP,
                   length=len(pkt))
    elif isinstance(u, UETAck):
        out.update(cack_psn=u.cack_psn, ack_psn=u.ack_psn, ecn=bool(u.ecn_marked),
                   sack_base=u.sack_base, sack_bitmap=u.sack_bitmap)
    elif isinstance(u, UETNack):
        out.update(psn=u.nack_psn, code=u.nack_code)
    elif isinstance(u, UETControl):
        out.update(psn=u.psn, control=CONTROL_TYPES.get(u.ctl_type, str(u.ctl_type)))
    return out
