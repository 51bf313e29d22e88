"""The eBPF instruction encoder (emulator.dataplane.bpf.Asm): pure, no kernel."""

import struct

import pytest

from emulator.dataplane import bpf


def insns(a):
    code = a.code()
    return [struct.unpack_from("<BBhi", code, k) for k in range(0, len(code), 8)]


def test_encodings_follow_linux_bpf_h():
    a = bpf.Asm()
    a.alu(6, "=", src=1)              # r6 = r1: BPF_ALU64|BPF_MOV|BPF_X
    a.ldx(4, 7, 6, 0)                 # r7 = *(u32 *)(r6 + 0)
    a.st(4, 10, -4, 9)                # *(u32 *)(r10 - 4) = 9
    a.atomic_add(0, 8, 7)             # lock *(u64 *)(r0 + 8) += r7
    a.call(bpf.MAP_LOOKUP_ELEM)
    a.exit()
    assert insns(a) == [(0xBF, 0x16, 0, 0), (0x61, 0x67, 0, 0), (0x62, 0x0A, -4, 9),
                        (0xDB, 0x70, 8, 0), (0x85, 0, 0, 1), (0x95, 0, 0, 0)]


def test_jumps_resolve_labels_both_ways_and_map_loads_take_two_slots():
    a = bpf.Asm()
    a.label("top")
    a.jmp("==", 0, "end", imm=0)      # over the two-slot map load
    a.map_fd(1, 42)
    a.jmp("ja", 0, "top")
    a.label("end")
    a.exit()
    code = insns(a)
    assert code[0] == (0x15, 0x00, 3, 0)
    assert code[1] == (0x18, 0x11, 0, 42) and code[2] == (0, 0, 0, 0)
    assert code[3] == (0x05, 0, -4, 0)


def test_an_unknown_label_is_refused():
    a = bpf.Asm()
    a.jmp("ja", 0, "nowhere")
    with pytest.raises(ValueError, match="nowhere"):
        a.code()
