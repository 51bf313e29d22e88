"""Golden vectors of the dataplane's eBPF programs, from the instruction-level
programs of commit d0607a9 (emulator.dataplane.ecnq / pfc built with bpf.Asm).

Each vector: a program and its per-port parameters, a map's contents before, a
frame (and for a tc program the ``skb->priority`` it starts with); the kernel
runs the program once (BPF_PROG_TEST_RUN) and the vector records the return
value, the bytes that changed in the frame, ``skb->priority`` after, and every
map word after (time words, E_LAST_NS / E_CROSS_NS, as 0 or 1: unset or set).

Kept for the record: it runs only against a checkout of that commit
(``git worktree add /tmp/old d0607a9``, then as root
``PYTHONPATH=/tmp/old python tests/data/make_bpf_golden.py OUT.json``).
"""

import ctypes
import json
import os
import struct
import sys
from collections import Counter
from types import SimpleNamespace

from emulator.dataplane import bpf, ecnq, pfc

SKB_SIZE = 192                       # sizeof(struct __sk_buff)
PRIORITY_IN = 7
TIME_WORDS = (pfc.E_CROSS_NS // 8, pfc.E_LAST_NS // 8)
W = pfc.WORDS


# ---- frames --------------------------------------------------------------------

def csum(data):
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(length, tos=2, proto=17, vihl=0x45, check=None, src=0x0A000001, dst=0x0A000002,
         ident=0):
    """An Ethernet + IPv4 frame of ``length`` bytes; ``check`` overrides the header
    checksum (the program's arithmetic, not its validity, is what is recorded)."""
    hdr = bytearray(struct.pack("!BBHHHBBHII", vihl, tos, length - 14, ident, 0x4000, 64,
                                proto, 0, src, dst))
    struct.pack_into("!H", hdr, 10, csum(bytes(hdr)) if check is None else check)
    eth = bytes.fromhex("020000000002" "020000000001" "0800")
    body = bytes((i * 7 + 3) & 0xFF for i in range(length - 34))
    return eth + bytes(hdr) + body


def roce(length=300, opcode=0x0A, stamp=0, tos=0x68, dport=4791, proto=17, vihl=0x45):
    """A RoCEv2 frame (IPv4, UDP to ``dport``, BTH ``opcode``, stamp byte ``stamp``)."""
    raw = bytearray(ipv4(length, tos=tos, proto=proto, vihl=vihl))
    struct.pack_into("!HHHH", raw, 34, 0xC000, dport, length - 34, 0)
    raw[pfc.BTH_OFF] = opcode
    raw[pfc.BTH_OFF + 1:pfc.STAMP_OFF] = b"\x40\xff\xff"
    raw[pfc.STAMP_OFF] = stamp
    return bytes(raw)


def other(length, ethertype):
    eth = bytes.fromhex("ffffffffffff" "020000000001") + struct.pack("!H", ethertype)
    return eth + bytes((i * 5 + 1) & 0xFF for i in range(length - 14))


# ---- maps ----------------------------------------------------------------------

def entry(words=W, **fields):
    """A map value of ``words`` u64 words; ``fields``: pfc.E_* names (without E_) or
    ecnq's in/out/marks."""
    e = [0] * words
    names = {"in": 0, "out": 1, "marks": 2}
    for k, v in fields.items():
        e[names[k] if words == 4 else getattr(pfc, "E_" + k.upper()) // 8] = v
    return e


# ---- cases ---------------------------------------------------------------------

def ecnq_cases():
    cases = []

    def enq(name, limit, before, frame, index=0, entries=2):
        cases.append({"name": name, "program": "ecnq.enqueue", "value_words": 4,
                      "entries": entries, "params": {"index": index, "limit": limit},
                      "map_before": before, "packet": frame, "priority_in": PRIORITY_IN})

    f = ipv4(300)
    enq("enq-empty-fits", 1000, {0: entry(4)}, f)
    enq("enq-fits-exactly", 1000, {0: entry(4, **{"in": 900, "out": 200})}, f)
    enq("enq-over-by-one", 1000, {0: entry(4, **{"in": 901, "out": 200})}, f)
    enq("enq-negative-queue", 1000, {1: entry(4, **{"in": 100, "out": 5000})}, f, index=1)
    enq("enq-limit-clamped-to-s32", 2 ** 32, {0: entry(4, **{"in": 2 ** 31 - 300})}, f)
    enq("enq-limit-clamped-fits", 2 ** 32, {0: entry(4, **{"in": 2 ** 31 - 301})}, f)
    enq("enq-index-1", 10 ** 6, {0: entry(4, **{"in": 7}), 1: entry(4, **{"in": 50})}, f,
        index=1)
    enq("enq-index-missing", 10 ** 6, {0: entry(4)}, f, index=5, entries=1)
    enq("enq-short-frame", 1000, {0: entry(4)}, other(20, 0x0806))

    def deq(name, before, frame, kmin=1000, kmax=1000, pmax=1.0, min_len=100, index=0,
            entries=2, random=False):
        cases.append({"name": name, "program": "ecnq.dequeue", "value_words": 4,
                      "entries": entries, "random": random,
                      "params": {"index": index, "kmin": kmin, "kmax": kmax, "pmax": pmax,
                                 "min_len": min_len},
                      "map_before": before, "packet": frame})

    def q(queue, length=300, marks=0):       # an entry that leaves ``queue`` behind
        return {0: entry(4, **{"in": 10 ** 6 + queue + length, "out": 10 ** 6,
                               "marks": marks})}

    deq("deq-step-below", q(999), ipv4(300))
    deq("deq-step-at-k", q(1000), ipv4(300))
    deq("deq-step-above-ect0", q(1001, marks=4), ipv4(300, tos=0x6A))
    deq("deq-step-above-ect1", q(5000), ipv4(300, tos=0x01))
    deq("deq-step-above-dscp63", q(5000), ipv4(300, tos=0xFE))
    deq("deq-negative-queue", {0: entry(4, **{"in": 10, "out": 5000})}, ipv4(300))
    deq("deq-not-ect", q(5000), ipv4(300, tos=0x68))
    deq("deq-ce-already", q(5000), ipv4(300, tos=0x6B))
    deq("deq-arp", q(5000), other(300, 0x0806))
    deq("deq-ipv6", q(5000), other(300, 0x86DD))
    deq("deq-ethertype-0801", q(5000), other(300, 0x0801))
    deq("deq-ethertype-0900", q(5000), other(300, 0x0900))
    deq("deq-short-frame", q(5000, length=20), ipv4(34, tos=2)[:20], min_len=10)
    deq("deq-25-bytes", q(5000, length=25), ipv4(34, tos=2)[:25], min_len=10)
    deq("deq-26-bytes", q(5000, length=26), ipv4(34, tos=2)[:26], min_len=10)
    deq("deq-at-min-len", q(5000, length=100), ipv4(100))
    deq("deq-above-min-len", q(5000, length=101), ipv4(101))
    deq("deq-long-frame", q(50000, length=3042), ipv4(3042, tos=0x6A))
    deq("deq-index-missing", q(5000), ipv4(300), index=4, entries=1)
    deq("deq-index-1", {1: entry(4, **{"in": 9300, "out": 0})}, ipv4(300), index=1)
    for hc in (0x0000, 0x0001, 0xFFFE, 0xFFFF, 0xFCFF, 0x00FF, 0x8000):
        deq(f"deq-checksum-{hc:04x}", q(5000), ipv4(300, tos=0x02, check=hc))
    deq("deq-checksum-ihl6", q(5000), ipv4(300, tos=0x01, vihl=0x46))
    deq("deq-checksum-ident", q(5000), ipv4(300, tos=0xAE, ident=0xFFFF, src=0xFFFFFFFF))
    # the RED profile: kmin 10000, kmax 100000
    red = {"kmin": 10000, "kmax": 100000}
    deq("red-below-kmin", q(10000), ipv4(300), **red, pmax=1.0)
    deq("red-above-kmax", q(100001), ipv4(300), **red, pmax=0.0)
    deq("red-at-kmax-pmax1", q(100000), ipv4(300), **red, pmax=1.0)
    deq("red-at-kmax-pmax1-ect1", q(100000), ipv4(300, tos=1, check=0xFFFF), **red, pmax=1.0)
    # marked only when the random draw is 0: 1 in 65536
    deq("red-just-above-kmin-pmax0", q(10001), ipv4(300), **red, pmax=0.0, random=True)
    deq("red-mid-pmax0", q(60000), ipv4(300), **red, pmax=0.0, random=True)
    deq("red-mid-pmax-half-1-byte", q(10001), ipv4(300), **red, pmax=0.5, random=True)
    deq("red-not-ect", q(60000), ipv4(300, tos=0), **red, pmax=1.0)
    deq("red-ce-already", q(200000), ipv4(300, tos=3), **red, pmax=1.0)
    deq("red-at-min-len", q(200000, length=100), ipv4(100), **red, pmax=1.0)
    deq("red-arp", q(200000), other(300, 0x0806), **red, pmax=1.0)
    return cases


# The PFC map of these cases: switch A's ports are keys 0-2 (base 0), switch B's
# 3-5 (base 3), the hosts' NICs 6 and 7.
PFC_ENTRIES = 8
XOFF, LIMIT = 3000, 4000


def pfc_cases():
    cases = []

    def eg(name, frame, key=0, base=-1, before=None, entries=PFC_ENTRIES):
        cases.append({"name": name, "program": "pfc.egress", "value_words": W,
                      "entries": entries, "params": {"key": key, "base": base},
                      "map_before": before or {}, "packet": frame,
                      "priority_in": PRIORITY_IN})

    busy = {k: entry(eg_in=1000 * k + 1, queued=500 * k + 3) for k in range(PFC_ENTRIES)}
    eg("eg-host-data", roce(300), key=6, before=busy)
    eg("eg-host-data-stamp", roce(300, stamp=2), key=7, before=busy)
    eg("eg-switch-data-stamp0", roce(300), key=1, base=0, before=busy)
    eg("eg-switch-data-stamp2", roce(300, stamp=2), key=4, base=3, before=busy)
    eg("eg-switch-data-stamp1", roce(1500, stamp=1), key=0, base=0, before=busy)
    eg("eg-switch-stamp-beyond-map", roce(300, stamp=200), key=4, base=3, before=busy)
    eg("eg-key-missing", roce(300, stamp=1), key=9, base=3, before=busy)
    eg("eg-key-missing-host", roce(300), key=12, before=busy)
    eg("eg-ack", roce(300, opcode=0x11, stamp=1), key=4, base=3, before=busy)
    eg("eg-cnp", roce(300, opcode=0x81, stamp=1), key=4, base=3, before=busy)
    eg("eg-ack-small", roce(64, opcode=0x11), key=6, before=busy)
    eg("eg-send-first", roce(300, opcode=0x00, stamp=1), key=4, base=3, before=busy)
    eg("eg-best-udp", roce(300, dport=4792), key=4, base=3, before=busy)
    eg("eg-best-tcp", roce(300, proto=6), key=6, before=busy)
    eg("eg-best-ihl6", roce(300, vihl=0x46), key=6, before=busy)
    eg("eg-best-arp-257", other(257, 0x0806), key=6, before=busy)
    eg("eg-control-arp-256", other(256, 0x0806), key=6, before=busy)
    eg("eg-control-arp-60", other(60, 0x0806), key=6, before=busy)
    eg("eg-control-46", roce(300)[:46], key=6, before=busy)
    eg("eg-roce-47", roce(300, stamp=1)[:47], key=1, base=0, before=busy)
    eg("eg-best-ipv6", other(300, 0x86DD), key=1, base=0, before=busy)
    eg("eg-control-udp-small", roce(120, dport=53), key=1, base=0, before=busy)
    eg("eg-best-kick-size", other(300, pfc.KICK_ETHERTYPE), key=1, base=0, before=busy)

    def ing(name, frame, up_key, up_base, key, stamp, before, ecn=None, min_len=0,
            entries=PFC_ENTRIES, random=False):
        cases.append({"name": name, "program": "pfc.ingress", "value_words": W,
                      "entries": entries, "random": random,
                      "params": {"up_key": up_key, "up_base": up_base, "key": key,
                                 "stamp": stamp, "ecn": ecn, "min_len": min_len},
                      "map_before": before, "packet": frame})

    def sw(**fields):
        return entry(**{"xoff": XOFF, "limit": LIMIT, **fields})

    def state(**per_key):
        m = {k: sw() for k in range(6)}
        m.update({6: entry(eg_in=10 ** 6), 7: entry(eg_in=10 ** 6)})
        for k, fields in per_key.items():
            m[int(k[1:])] = sw(**fields) if int(k[1:]) < 6 else entry(**fields)
        return m

    # a host's NIC (key 6) receiving from switch A's port 0 (key 0)
    ing("in-host-frees-stamp2", roce(300, stamp=2), 0, 0, 6, 0,
        state(k0={"eg_in": 900}, k1={"ing": 1000, "queued": 700}))
    ing("in-host-stamp0", roce(300), 0, 0, 6, 0, state(k0={"eg_in": 900}))
    ing("in-host-stamp-beyond-map", roce(300, stamp=77), 0, 0, 6, 0, state())
    ing("in-host-up-missing", roce(300, stamp=2), 11, 0, 6, 0, state())
    # switch B's port 0 (key 3, stamp 1) receiving from host 7
    ing("in-switch-under-xoff", roce(300, stamp=5), 7, -1, 3, 1, state(k3={"ing": 1000}))
    ing("in-switch-crosses-xoff", roce(300), 7, -1, 3, 1, state(k3={"ing": 2800}))
    ing("in-switch-reaches-xoff", roce(300), 7, -1, 3, 1, state(k3={"ing": 2700}))
    ing("in-switch-just-under-xoff", roce(300), 7, -1, 3, 1, state(k3={"ing": 2699}))
    ing("in-switch-over-xoff", roce(300), 7, -1, 3, 1, state(k3={"ing": 3000, "peak": 3000}))
    ing("in-switch-at-limit", roce(300), 7, -1, 3, 1, state(k3={"ing": 3700}))
    ing("in-switch-over-limit", roce(300), 7, -1, 3, 1,
        state(k3={"ing": 3701, "ing_drops": 4}))
    ing("in-switch-corr", roce(300), 7, -1, 3, 1, state(k3={"ing": 5000, "corr": 2500}))
    ing("in-switch-corr-crosses", roce(300), 7, -1, 3, 1,
        state(k3={"ing": 5000, "corr": 2200}))
    ing("in-switch-negative", roce(300), 7, -1, 3, 1, state(k3={"ing": 100, "corr": 900}))
    ing("in-switch-peak-higher", roce(300), 7, -1, 3, 1, state(k3={"ing": 100, "peak": 3900}))
    ing("in-switch-peak-equal", roce(300), 7, -1, 3, 1, state(k3={"ing": 100, "peak": 400}))
    ing("in-switch-key-missing", roce(300), 7, -1, 13, 1, state())
    ing("in-switch-stamp-200", roce(300, stamp=9), 7, -1, 5, 200, state())
    # switch-to-switch: B's port 1 (key 4, stamp 2) from A's port 2 (key 2, base 0)
    ing("in-s2s-frees-and-counts", roce(300, stamp=3), 2, 0, 4, 2,
        state(k0={"ing": 1000, "queued": 600}, k2={"eg_in": 2000, "eg_out": 100}))
    ing("in-s2s-frees-port0", roce(1000, stamp=1), 2, 0, 4, 2,
        state(k0={"ing": 1000, "queued": 600, "corr": 50}, k2={"eg_in": 2000, "eg_out": 100},
              k4={"ing": 2500, "corr": 100, "peak": 2000}))
    ing("in-s2s-drop", roce(300, stamp=1), 2, 0, 4, 2, state(k0={"ing": 1000, "queued": 600},
                                                          k4={"ing": 3800}))
    # the watchdog and the kick
    ing("in-watchdog-drop", roce(300, stamp=1), 2, 0, 4, 2,
        state(k0={"ing": 1000, "queued": 600}, k2={"flags": pfc.FLAG_DROP, "wd_drops": 3}))
    ing("in-watchdog-other-flag", roce(300, stamp=1), 2, 0, 4, 2, state(k2={"flags": 2}))
    ing("in-watchdog-host", roce(300), 0, 0, 6, 0, state(k0={"flags": 3}))
    ing("in-kick", pfc.kick_frame(), 7, -1, 3, 1, state())
    ing("in-kick-short", pfc.kick_frame()[:20], 7, -1, 3, 1, state())
    ing("in-kick-long", other(300, pfc.KICK_ETHERTYPE), 0, 0, 6, 0, state())
    # not counted: control class, not RoCE, short
    ing("in-ack", roce(300, opcode=0x11, stamp=1), 2, 0, 4, 2, state())
    ing("in-cnp", roce(300, opcode=0x81), 7, -1, 3, 1, state())
    ing("in-udp", roce(300, dport=4790), 7, -1, 3, 1, state())
    ing("in-tcp", roce(300, proto=6), 7, -1, 3, 1, state())
    ing("in-ihl6", roce(300, vihl=0x46), 7, -1, 3, 1, state())
    ing("in-arp", other(60, 0x0806), 7, -1, 3, 1, state())
    ing("in-46-bytes", roce(300)[:46], 7, -1, 3, 1, state())
    ing("in-47-bytes", roce(300)[:47], 7, -1, 3, 1, state())
    ing("in-14-bytes", roce(300)[:14], 7, -1, 3, 1, state())
    # ECN at dequeue, marked by the queue of the upstream switch port (key 2)
    step = {"kmin": 1000, "kmax": 1000, "pmax": 1.0}
    red = {"kmin": 1000, "kmax": 10000, "pmax": 1.0}

    def up_queue(queue, length=300, **more):
        return state(k2={"eg_in": 10 ** 5 + queue + length, "eg_out": 10 ** 5, "marks": 2},
                     **more)

    ing("ecn-step-over", roce(300, tos=0x6A), 2, 0, 4, 2, up_queue(5000), ecn=step,
        min_len=150)
    ing("ecn-step-at-k", roce(300, tos=0x6A), 2, 0, 4, 2, up_queue(1000), ecn=step,
        min_len=150)
    ing("ecn-step-host", roce(300, tos=0x69, stamp=3), 2, 0, 7, 0, up_queue(5000), ecn=step,
        min_len=150)
    ing("ecn-step-not-ect", roce(300, tos=0x68), 2, 0, 4, 2, up_queue(5000), ecn=step,
        min_len=150)
    ing("ecn-step-ce", roce(300, tos=0x6B), 2, 0, 4, 2, up_queue(5000), ecn=step,
        min_len=150)
    ing("ecn-step-min-len", roce(150, tos=0x6A), 2, 0, 4, 2, up_queue(5000, 150), ecn=step,
        min_len=150)
    ing("ecn-step-ingress-drop", roce(300, tos=0x6A), 2, 0, 4, 2,
        up_queue(5000, k4={"ing": 3800}), ecn=step, min_len=150)
    ing("ecn-step-watchdog", roce(300, tos=0x6A), 2, 0, 4, 2,
        state(k2={"eg_in": 10 ** 5 + 5300, "eg_out": 10 ** 5, "flags": 1}), ecn=step,
        min_len=150)
    ing("ecn-step-ack-unmarked", roce(300, tos=0x6A, opcode=0x11), 2, 0, 4, 2,
        up_queue(5000), ecn=step, min_len=150)
    ing("ecn-red-above-kmax", roce(300, tos=0x6A), 2, 0, 4, 2, up_queue(10001), ecn=red,
        min_len=150)
    ing("ecn-red-at-kmax", roce(300, tos=0x6A), 2, 0, 4, 2, up_queue(10000), ecn=red,
        min_len=150)
    ing("ecn-red-below-kmin", roce(300, tos=0x6A), 2, 0, 4, 2, up_queue(1000), ecn=red,
        min_len=150)
    ing("ecn-red-mid-pmax0", roce(300, tos=0x6A), 2, 0, 4, 2, up_queue(5000),
        ecn={**red, "pmax": 0.0}, min_len=150, random=True)
    ing("ecn-long-frame", roce(3042, tos=0x6A), 2, 0, 4, 2,
        up_queue(5000, 3042, k4={"limit": 10 ** 6, "xoff": 10 ** 5}), ecn=step, min_len=150)
    return cases


# ---- running the old programs ----------------------------------------------------

def program(case, map_fd):
    p = case["params"]
    kind = case["program"]
    if kind == "ecnq.enqueue":
        return bpf.PROG_SCHED_CLS, ecnq.enqueue_program(map_fd, p["index"], p["limit"])
    if kind == "ecnq.dequeue":
        return bpf.PROG_XDP, ecnq.dequeue_program(map_fd, p["index"], p["kmin"], p["kmax"],
                                                  p["pmax"], p["min_len"])
    if kind == "pfc.egress":
        return bpf.PROG_SCHED_CLS, pfc.egress_program(map_fd, p["key"], p["base"])
    ecn = None if p["ecn"] is None else SimpleNamespace(**p["ecn"])
    return bpf.PROG_XDP, pfc.ingress_program(map_fd, p["up_key"], p["up_base"], p["key"],
                                             p["stamp"], ecn, p["min_len"])


def test_run(fd, packet, ctx=None):
    """BPF_PROG_TEST_RUN with an optional ``__sk_buff`` in and out."""
    din = ctypes.create_string_buffer(packet, len(packet))
    dout = ctypes.create_string_buffer(len(packet) + 256)
    cin = ctypes.create_string_buffer(ctx or b"\0", SKB_SIZE)
    cout = ctypes.create_string_buffer(SKB_SIZE)
    csize = SKB_SIZE if ctx is not None else 0
    attr = struct.pack("<IIIIQQIIIIQQ", fd, 0, len(packet), len(dout), bpf._ptr(din),
                       bpf._ptr(dout), 1, 0, csize, csize,
                       bpf._ptr(cin) if csize else 0, bpf._ptr(cout) if csize else 0)
    _, raw = bpf._sys(bpf._PROG_TEST_RUN, attr)
    retval, _, size_out = struct.unpack_from("<III", raw, 4)
    return retval, dout.raw[:size_out], cout.raw


def run_once(case):
    words = case["value_words"]
    m = bpf.Map(words * 8, case["entries"])
    try:
        for key, e in case["map_before"].items():
            m.update(int(key), struct.pack(f"<{words}Q", *e))
        kind, asm = program(case, m.fd)
        fd = bpf.load(kind, asm, "golden")
        try:
            ctx = None
            if "priority_in" in case:
                ctx = bytearray(SKB_SIZE)
                struct.pack_into("<I", ctx, 32, case["priority_in"])
            ret, out, cout = test_run(fd, case["packet"], bytes(ctx) if ctx else None)
        finally:
            os.close(fd)
        after = {}
        for key in range(case["entries"]):
            w = list(struct.unpack(f"<{words}Q", m.lookup(key)))
            if case["program"].startswith("pfc."):
                for t in TIME_WORDS:
                    w[t] = int(w[t] != 0)
            after[str(key)] = w
    finally:
        m.close()
    pkt = case["packet"]
    result = {"retval": ret, "packet_out_len": len(out),
              "packet_out_diff": [[i, out[i]] for i in range(len(out))
                                  if i >= len(pkt) or out[i] != pkt[i]],
              "map_after": after}
    if ctx is not None:
        result["priority_out"] = struct.unpack_from("<I", cout, 32)[0]
    return result


def write(doc, path):
    """``doc`` as JSON with one vector per line (a change shows as that line)."""
    head = {k: v for k, v in doc.items() if k != "vectors"}
    with open(path, "w") as f:
        f.write(json.dumps(head, separators=(",", ":"))[:-1] + ',"vectors":[\n')
        f.write(",\n".join(json.dumps(v, separators=(",", ":")) for v in doc["vectors"]))
        f.write("\n]}\n")


def main(path):
    if any(case.get("packet") is None for case in ecnq_cases() + pfc_cases()):
        raise SystemExit("a case without a frame")
    vectors = []
    for case in ecnq_cases() + pfc_cases():
        if case.get("random"):
            runs = [json.dumps(run_once(case), sort_keys=True) for _ in range(5)]
            result = json.loads(Counter(runs).most_common(1)[0][0])
        else:
            result = run_once(case)
        for t in TIME_WORDS:
            for e in case["map_before"].values():
                if case["program"].startswith("pfc.") and e[t]:
                    raise SystemExit(f"{case['name']}: a time word set before")
        case = dict(case, packet=case["packet"].hex(),
                    map_before={str(k): v for k, v in case["map_before"].items()})
        vectors.append({**case, "expect": result})
    doc = {"about": "BPF_PROG_TEST_RUN of the dataplane's eBPF programs as commit d0607a9 "
                    "built them (bpf.Asm); made by tests/data/make_bpf_golden.py on Linux "
                    f"{os.uname().release}. Frames in hex; packet_out_diff: [offset, byte] "
                    "of the bytes the program changed; time words (E_CROSS_NS, E_LAST_NS) "
                    "after as 0/1; random: marked only on a 1-in-65536 draw.",
           "time_words": list(TIME_WORDS), "vectors": vectors}
    write(doc, path)
    counts = Counter(v["program"] for v in vectors)
    print(f"{len(vectors)} vectors: {dict(counts)} -> {path}")


if __name__ == "__main__":
    main(sys.argv[1])
