-- A Wireshark dissector of the lab's Ultra Ethernet frames (UDP port 4793).
--
-- Decodes what the traffic engines send with --transport uet (traffic/uet/layout.py
-- holds the layouts; docs/uet.md says where they come from): the PDS prologue, RUD/ROD
-- requests (with RCCC's CC state), ACK_CC with its SACK bitmap and CC state, NACK,
-- CONTROL, the SES standard request header of a WRITE, the lab's probe header and its
-- integrity trailer.  A frame a switch trimmed (DSCP 46) is shown as trimmed.
--
-- Use:  tshark -X lua_script:examples/wireshark/uet.lua -r capture.pcap -V
--   or  wireshark -X lua_script:examples/wireshark/uet.lua capture.pcap
--   or  copy it into ~/.local/lib/wireshark/plugins/
-- Filters: uet, uet.type == 8 (ACK_CC), uet.psn == 1234, uet.trimmed, uet.nack.code == 1

local uet = Proto("uet", "Ultra Ethernet Transport (lab)")
local ses = Proto("uet_ses", "UET SES standard request")
local probe = Proto("uet_probe", "Fabric lab probe")

local TYPES = {[1] = "TSS", [2] = "RUD_REQ", [3] = "ROD_REQ", [4] = "RUDI_REQ",
               [5] = "RUDI_RESP", [6] = "UUD_REQ", [7] = "ACK", [8] = "ACK_CC",
               [9] = "ACK_CCX", [10] = "NACK", [11] = "CONTROL", [12] = "NACK_CCX",
               [13] = "RUD_CC_REQ", [14] = "ROD_CC_REQ"}
local NEXT = {[0] = "NONE", [1] = "REQ_SMALL", [2] = "REQ_MEDIUM", [3] = "REQ_STD",
              [4] = "RESPONSE", [5] = "RESPONSE_DATA", [6] = "RESPONSE_DATA_SMALL"}
local CONTROLS = {[0] = "NOOP", [1] = "ACK_REQ", [2] = "CLEAR_CMD", [3] = "CLEAR_REQ",
                  [4] = "CLOSE_CMD", [5] = "CLOSE_REQ", [6] = "PROBE", [7] = "CREDIT",
                  [8] = "CREDIT_REQ", [9] = "NEGOTIATION"}
local NACK_CODES = {[0x01] = "TRIMMED", [0x02] = "TRIMMED_LASTHOP", [0x04] = "NO_PDC",
                    [0x0D] = "ROD_OOO", [0x10] = "CLOSING"}
local CC_TYPES = {[0] = "NSCC", [1] = "CREDIT"}
local OPCODES = {[0] = "NO_OP", [1] = "WRITE", [2] = "READ", [3] = "ATOMIC",
                 [4] = "FETCHING_ATOMIC", [5] = "SEND", [6] = "RENDEZVOUS_SEND",
                 [7] = "DATAGRAM_SEND", [8] = "DEFERRABLE_SEND", [9] = "TAGGED_SEND"}
local REQ_FIELD = {[0] = "none", [1] = "clear", [2] = "close", [3] = "reserved"}
local TRIM_DSCP = 46

local f = uet.fields
f.type = ProtoField.uint16("uet.type", "Type", base.DEC, TYPES, 0xF800)
f.next_hdr = ProtoField.uint16("uet.next_hdr", "Next header", base.DEC, NEXT, 0x0780)
f.ctl_type = ProtoField.uint16("uet.ctl_type", "Control type", base.DEC, CONTROLS, 0x0780)
f.flags = ProtoField.uint16("uet.flags", "Flags", base.HEX, nil, 0x007F)
f.retx = ProtoField.bool("uet.flags.retx", "RETX", 16, nil, 0x0010)
f.ar = ProtoField.bool("uet.flags.ar", "AR (ACK request)", 16, nil, 0x0008)
f.syn = ProtoField.bool("uet.flags.syn", "SYN", 16, nil, 0x0004)
f.m = ProtoField.bool("uet.flags.m", "M (ECN echo)", 16, nil, 0x0020)
f.p = ProtoField.bool("uet.flags.p", "P (probe)", 16, nil, 0x0008)
f.req = ProtoField.uint16("uet.flags.req", "REQ", base.DEC, REQ_FIELD, 0x0006)
f.nt = ProtoField.bool("uet.flags.nt", "NT (RUDI)", 16, nil, 0x0008)
f.clear = ProtoField.int16("uet.clear_psn_offset", "Clear PSN offset")
f.psn = ProtoField.uint32("uet.psn", "PSN")
f.spdcid = ProtoField.uint16("uet.spdcid", "Source PDC id")
f.dpdcid = ProtoField.uint16("uet.dpdcid", "Destination PDC id")
f.psn_offset = ProtoField.uint16("uet.syn_psn_offset", "PSN offset from start (SYN)",
                                 base.DEC, nil, 0x0FFF)
f.ccc_id = ProtoField.uint8("uet.ccc_id", "CCC id")
f.credit_target = ProtoField.uint24("uet.credit_target", "Credit target")
f.ack_off = ProtoField.int16("uet.ack_psn_offset", "ACK PSN offset")
f.cack = ProtoField.uint32("uet.cack_psn", "Cumulative ACK PSN")
f.ack_psn = ProtoField.uint32("uet.ack_psn", "ACK PSN")
f.cc_type = ProtoField.uint8("uet.cc_type", "CC type", base.DEC, CC_TYPES, 0xF0)
f.cc_flags = ProtoField.uint8("uet.cc_flags", "CC flags", base.HEX, nil, 0x0F)
f.mpr = ProtoField.uint8("uet.mpr", "MPR")
f.sack_off = ProtoField.int16("uet.sack_psn_offset", "SACK PSN offset")
f.sack_base = ProtoField.uint32("uet.sack_base", "SACK base PSN")
f.sack_bitmap = ProtoField.uint64("uet.sack_bitmap", "SACK bitmap", base.HEX)
f.sacked = ProtoField.string("uet.sacked", "SACKed PSNs")
f.service_time = ProtoField.uint16("uet.nscc.service_time", "Service time")
f.restore = ProtoField.uint8("uet.nscc.restore", "Restore cwnd", base.DEC, nil, 0x80)
f.penalty = ProtoField.uint8("uet.nscc.penalty", "Window penalty", base.DEC, nil, 0x7F)
f.rcvd = ProtoField.uint24("uet.nscc.rcvd_bytes", "Received bytes")
f.credit = ProtoField.uint24("uet.credit", "Credit")
f.ooo = ProtoField.uint16("uet.ooo_count", "Out-of-order count")
f.nack_code = ProtoField.uint8("uet.nack.code", "NACK code", base.HEX, NACK_CODES)
f.vendor = ProtoField.uint8("uet.nack.vendor", "Vendor code", base.HEX)
f.nack_psn = ProtoField.uint32("uet.nack.psn", "NACK PSN")
f.payload = ProtoField.uint32("uet.payload", "Payload")
f.probe_opaque = ProtoField.uint16("uet.probe_opaque", "Probe opaque", base.HEX)
f.trimmed = ProtoField.bool("uet.trimmed", "Trimmed by a switch")
f.trailer = ProtoField.uint32("uet.trailer", "Integrity trailer (CRC-32, LE)", base.HEX)

local s = ses.fields
s.opcode = ProtoField.uint8("uet_ses.opcode", "Opcode", base.DEC, OPCODES, 0x3F)
s.version = ProtoField.uint8("uet_ses.version", "Version", base.DEC, nil, 0xC0)
s.dc = ProtoField.bool("uet_ses.dc", "DC", 8, nil, 0x20)
s.ie = ProtoField.bool("uet_ses.ie", "IE", 8, nil, 0x10)
s.rel = ProtoField.bool("uet_ses.rel", "REL", 8, nil, 0x08)
s.hd = ProtoField.bool("uet_ses.hd", "HD", 8, nil, 0x04)
s.eom = ProtoField.bool("uet_ses.eom", "EOM", 8, nil, 0x02)
s.som = ProtoField.bool("uet_ses.som", "SOM", 8, nil, 0x01)
s.message_id = ProtoField.uint16("uet_ses.message_id", "Message id")
s.ri_gen = ProtoField.uint8("uet_ses.ri_generation", "Index generation")
s.job_id = ProtoField.uint24("uet_ses.job_id", "Job id", base.HEX)
s.pid = ProtoField.uint16("uet_ses.pid_on_fep", "PID on FEP", base.DEC, nil, 0x0FFF)
s.ri = ProtoField.uint16("uet_ses.resource_index", "Resource index", base.DEC, nil, 0x0FFF)
s.buffer_offset = ProtoField.uint64("uet_ses.buffer_offset", "Buffer offset")
s.initiator = ProtoField.uint32("uet_ses.initiator", "Initiator")
s.memory_key = ProtoField.uint64("uet_ses.memory_key", "Memory key", base.HEX)
s.header_data = ProtoField.uint64("uet_ses.header_data", "Header data", base.HEX)
s.payload_length = ProtoField.uint16("uet_ses.payload_length", "Payload length", base.DEC,
                                     nil, 0x3FFF)
s.message_offset = ProtoField.uint32("uet_ses.message_offset", "Message offset")
s.request_length = ProtoField.uint32("uet_ses.request_length", "Request length")

local p = probe.fields
p.magic = ProtoField.uint32("uet_probe.magic", "Magic", base.HEX)
p.flow = ProtoField.uint32("uet_probe.flow", "Flow", base.HEX)
p.tx_ns = ProtoField.uint64("uet_probe.tx_ns", "Sent (ns)")
p.tag = ProtoField.uint32("uet_probe.tag", "Call")
p.chunk = ProtoField.uint32("uet_probe.chunk", "Chunk")
p.index = ProtoField.uint32("uet_probe.index", "Packet")
p.count = ProtoField.uint32("uet_probe.count", "Packets in the chunk")

local ip_dscp = Field.new("ip.dsfield.dscp")
local REQUESTS = {[2] = true, [3] = true, [13] = true, [14] = true}
local PROBE_MAGIC = 0x464C5431

local function dissect_ses(buf, tree)
    if buf:len() < 44 then return 0 end
    local t = tree:add(ses, buf(0, 44))
    t:add(s.opcode, buf(0, 1))
    for _, k in ipairs({"version", "dc", "ie", "rel", "hd", "eom", "som"}) do
        t:add(s[k], buf(1, 1))
    end
    local som = bit32.band(buf(1, 1):uint(), 0x01) ~= 0
    t:add(s.message_id, buf(2, 2))
    t:add(s.ri_gen, buf(4, 1))
    t:add(s.job_id, buf(5, 3))
    t:add(s.pid, buf(8, 2))
    t:add(s.ri, buf(10, 2))
    t:add(s.buffer_offset, buf(12, 8))
    t:add(s.initiator, buf(20, 4))
    t:add(s.memory_key, buf(24, 8))
    if som then
        t:add(s.header_data, buf(32, 8))
    else
        t:add(s.payload_length, buf(34, 2))
        t:add(s.message_offset, buf(36, 4))
    end
    t:add(s.request_length, buf(40, 4))
    return 44
end

local function dissect_probe(buf, tree)
    if buf:len() < 32 or buf(0, 4):uint() ~= PROBE_MAGIC then return 0 end
    local t = tree:add(probe, buf(0, 32))
    t:add(p.magic, buf(0, 4))
    t:add(p.flow, buf(4, 4))
    t:add(p.tx_ns, buf(8, 8))
    t:add(p.tag, buf(16, 4))
    t:add(p.chunk, buf(20, 4))
    t:add(p.index, buf(24, 4))
    t:add(p.count, buf(28, 4))
    return 32
end

local function sacked(base_psn, bitmap_hi, bitmap_lo)
    local out = {}
    for i = 0, 63 do
        local word, bitno = bitmap_lo, i
        if i >= 32 then word, bitno = bitmap_hi, i - 32 end
        if bit32.band(word, bit32.lshift(1, bitno)) ~= 0 then
            out[#out + 1] = tostring((base_psn + i) % 4294967296)
        end
    end
    return table.concat(out, " ")
end

function uet.dissector(buf, pinfo, tree)
    if buf:len() < 2 then return 0 end
    pinfo.cols.protocol = "UET"
    local ptype = bit32.rshift(buf(0, 2):uint(), 11)
    local name = TYPES[ptype] or ("type " .. ptype)
    local t = tree:add(uet, buf(), "Ultra Ethernet Transport, PDS " .. name)
    local dscp = ip_dscp()
    local trimmed = dscp ~= nil and dscp.value == TRIM_DSCP
    t:add(f.type, buf(0, 2))
    local info
    if REQUESTS[ptype] then
        if buf:len() < 12 then return 0 end
        t:add(f.next_hdr, buf(0, 2))
        local fl = t:add(f.flags, buf(0, 2))
        fl:add(f.retx, buf(0, 2)); fl:add(f.ar, buf(0, 2)); fl:add(f.syn, buf(0, 2))
        t:add(f.clear, buf(2, 2))
        t:add(f.psn, buf(4, 4))
        t:add(f.spdcid, buf(8, 2))
        local syn = bit32.band(buf(0, 2):uint(), 0x0004) ~= 0
        if syn then t:add(f.psn_offset, buf(10, 2)) else t:add(f.dpdcid, buf(10, 2)) end
        local off = 12
        if ptype == 13 or ptype == 14 then
            t:add(f.ccc_id, buf(12, 1)); t:add(f.credit_target, buf(13, 3)); off = 16
        end
        t:add(f.trimmed, trimmed):set_generated()
        info = string.format("%s PSN %d%s%s%s", name, buf(4, 4):uint(), syn and " SYN" or "",
                             bit32.band(buf(0, 2):uint(), 0x0008) ~= 0 and " AR" or "",
                             trimmed and " [TRIMMED]" or "")
        local rest = buf(off):tvb()
        local n = dissect_ses(rest, tree)
        if n > 0 then
            local m = dissect_probe(rest(n):tvb(), tree)
            if not trimmed and rest:len() >= n + m + 4 then
                t:add_le(f.trailer, rest(rest:len() - 4, 4))
            end
        end
    elseif ptype == 8 or ptype == 9 then
        if buf:len() < 32 then return 0 end
        local fl = t:add(f.flags, buf(0, 2))
        fl:add(f.m, buf(0, 2)); fl:add(f.retx, buf(0, 2)); fl:add(f.p, buf(0, 2))
        fl:add(f.req, buf(0, 2))
        local cack = buf(4, 4):uint()
        t:add(f.ack_off, buf(2, 2))
        t:add(f.cack, buf(4, 4))
        t:add(f.ack_psn, (cack + buf(2, 2):int()) % 4294967296):set_generated()
        t:add(f.spdcid, buf(8, 2))
        t:add(f.dpdcid, buf(10, 2))
        t:add(f.cc_type, buf(12, 1)); t:add(f.cc_flags, buf(12, 1))
        t:add(f.mpr, buf(13, 1))
        t:add(f.sack_off, buf(14, 2))
        local base_psn = (cack + buf(14, 2):int()) % 4294967296
        t:add(f.sack_base, base_psn):set_generated()
        t:add(f.sack_bitmap, buf(16, 8))
        t:add(f.sacked, sacked(base_psn, buf(16, 4):uint(), buf(20, 4):uint())):set_generated()
        if bit32.rshift(buf(12, 1):uint(), 4) == 1 then
            t:add(f.credit, buf(24, 3))
        else
            t:add(f.service_time, buf(24, 2)); t:add(f.restore, buf(26, 1))
            t:add(f.penalty, buf(26, 1)); t:add(f.rcvd, buf(27, 3))
        end
        t:add(f.ooo, buf(30, 2))
        if buf:len() >= 36 then t:add_le(f.trailer, buf(32, 4)) end
        info = string.format("ACK_CC cack %d ack %d", cack, (cack + buf(2, 2):int()) % 4294967296)
        if bit32.band(buf(0, 2):uint(), 0x0020) ~= 0 then info = info .. " ECN" end
        if bit32.band(buf(0, 2):uint(), 0x0006) == 4 then info = info .. " CLOSE" end
    elseif ptype == 10 or ptype == 12 then
        if buf:len() < 16 then return 0 end
        local fl = t:add(f.flags, buf(0, 2))
        fl:add(f.m, buf(0, 2)); fl:add(f.retx, buf(0, 2)); fl:add(f.nt, buf(0, 2))
        t:add(f.nack_code, buf(2, 1))
        t:add(f.vendor, buf(3, 1))
        t:add(f.nack_psn, buf(4, 4))
        t:add(f.spdcid, buf(8, 2))
        t:add(f.dpdcid, buf(10, 2))
        t:add(f.payload, buf(12, 4))
        if buf:len() >= 20 then t:add_le(f.trailer, buf(16, 4)) end
        info = string.format("NACK %s PSN %d", NACK_CODES[buf(2, 1):uint()] or buf(2, 1):uint(),
                             buf(4, 4):uint())
    elseif ptype == 11 then
        if buf:len() < 16 then return 0 end
        t:add(f.ctl_type, buf(0, 2))
        local fl = t:add(f.flags, buf(0, 2))
        fl:add(f.retx, buf(0, 2)); fl:add(f.ar, buf(0, 2)); fl:add(f.syn, buf(0, 2))
        t:add(f.probe_opaque, buf(2, 2))
        t:add(f.psn, buf(4, 4))
        t:add(f.spdcid, buf(8, 2))
        t:add(f.dpdcid, buf(10, 2))
        t:add(f.payload, buf(12, 4))
        if buf:len() >= 20 then t:add_le(f.trailer, buf(16, 4)) end
        local ctl = bit32.band(bit32.rshift(buf(0, 2):uint(), 7), 0xF)
        info = string.format("CONTROL %s PSN %d", CONTROLS[ctl] or ctl, buf(4, 4):uint())
    else
        info = name
    end
    pinfo.cols.info = info
    return buf:len()
end

DissectorTable.get("udp.port"):add(4793, uet)
