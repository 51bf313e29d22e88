"""Just enough eBPF to load small hand-written programs: instructions, maps, loading.

The emulator's eBPF programs are a few dozen instructions (dataplane.lossless.ecnq),
so they are written here in eBPF's own instruction set rather than compiled
from C (no compiler on the machines it targets): ``Asm`` encodes the
instructions and resolves named jump targets, ``Map``/``load`` wrap the
``bpf(2)`` system call through ctypes (map create/lookup/update, program
load with the verifier's log on refusal, and ``test_run``: the kernel runs
a program on a given packet, which is how its tests check it).

Encoding (linux/bpf.h): one 8-byte ``struct bpf_insn`` per instruction,
``code, dst_reg:4 | src_reg:4 << 4, s16 off, s32 imm``; a 64-bit load of a
map's file descriptor takes two.

May import: ``emulator.errors`` only.
"""

import ctypes
import os
import struct

from emulator.errors import EnvironmentProblem

# instruction classes, sizes, modes, operations (linux/bpf_common.h, linux/bpf.h)
LDX, ST, STX, ALU64, JMP = 0x01, 0x02, 0x03, 0x07, 0x05
W, H, B, DW = 0x00, 0x08, 0x10, 0x18
MEM, ATOMIC = 0x60, 0xC0
K, X = 0x00, 0x08
ALU = {"+=": 0x00, "-=": 0x10, "*=": 0x20, "|=": 0x40, "&=": 0x50, "<<=": 0x60,
       ">>=": 0x70, "^=": 0xA0, "=": 0xB0}
JUMP = {"ja": 0x00, "==": 0x10, ">": 0x20, ">=": 0x30, "!=": 0x50, "s>": 0x60,
        "s>=": 0x70, "<": 0xA0, "<=": 0xB0, "s<": 0xC0, "s<=": 0xD0}
CALL, EXIT = 0x80, 0x90
SIZES = {1: B, 2: H, 4: W, 8: DW}

# helpers, program and map types, commands, flags
MAP_LOOKUP_ELEM, KTIME_GET_NS, GET_PRANDOM_U32, SKB_PULL_DATA, XDP_GET_BUFF_LEN = \
    1, 5, 7, 39, 188
PROG_SCHED_CLS, PROG_XDP = 3, 6
MAP_ARRAY = 2
F_MMAPABLE = 1 << 10
_MAP_CREATE, _MAP_LOOKUP, _MAP_UPDATE, _PROG_LOAD, _PROG_TEST_RUN = 0, 1, 2, 5, 10
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_ATTR = 128
_libc = ctypes.CDLL(None, use_errno=True)


def _insn(code, dst=0, src=0, off=0, imm=0):
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


class Asm:
    """An eBPF program under construction; jumps name labels resolved by ``code``."""

    def __init__(self):
        self.items = []          # bytes, or (code, dst, src, label, imm) for a jump
        self.labels = {}

    def __len__(self):
        return len(self.items)

    def label(self, name):
        self.labels[name] = len(self.items)

    def alu(self, dst, op, src=None, imm=0):
        """``dst op= src`` (a register number) or ``dst op= imm``."""
        mode = X if src is not None else K
        self.items.append(_insn(ALU64 | ALU[op] | mode, dst, src or 0, 0, imm))

    def ldx(self, size, dst, src, off):
        """``dst = *(uSIZE *)(src + off)``."""
        self.items.append(_insn(LDX | SIZES[size] | MEM, dst, src, off))

    def stx(self, size, dst, off, src):
        """``*(uSIZE *)(dst + off) = src``."""
        self.items.append(_insn(STX | SIZES[size] | MEM, dst, src, off))

    def st(self, size, dst, off, imm):
        """``*(uSIZE *)(dst + off) = imm``."""
        self.items.append(_insn(ST | SIZES[size] | MEM, dst, 0, off, imm))

    def atomic_add(self, dst, off, src, fetch=False):
        """``lock *(u64 *)(dst + off) += src``; with ``fetch``, ``src`` gets the old value."""
        self.items.append(_insn(STX | DW | ATOMIC, dst, src, off, 1 if fetch else 0))

    def map_fd(self, dst, fd):
        """``dst = map`` (the two-instruction 64-bit load of a map's fd)."""
        self.items.append(_insn(0x18, dst, 1, 0, fd))    # BPF_LD|BPF_DW|BPF_IMM, PSEUDO_MAP_FD
        self.items.append(_insn(0, 0, 0, 0, 0))

    def jmp(self, op, dst, label, src=None, imm=0):
        """``if dst op src/imm goto label`` (op "ja": always)."""
        mode = X if src is not None else K
        self.items.append((JMP | JUMP[op] | mode, dst, src or 0, label, imm))

    def lookup(self, map_fd, on_miss, key=None, key_reg=None):
        """``r0 = &map[key]`` (a constant, or the u32 in register ``key_reg``); to
        ``on_miss`` if absent.  r1-r5 are clobbered."""
        if key_reg is None:
            self.st(4, 10, -4, key)
        else:
            self.stx(4, 10, -4, key_reg)
        self.alu(2, "=", src=10)
        self.alu(2, "+=", imm=-4)
        self.map_fd(1, map_fd)
        self.call(MAP_LOOKUP_ELEM)
        self.jmp("==", 0, on_miss, imm=0)

    def packet(self, ctx, need, on_short, tc=False):
        """r2 = the packet's data, r3 its end, from the context in register ``ctx``
        (an XDP program's, or with ``tc`` a classifier's ``__sk_buff``); to
        ``on_short`` unless ``need`` bytes are there.  Clobbers r4."""
        data, end = (76, 80) if tc else (0, 4)
        self.ldx(4, 2, ctx, data)
        self.ldx(4, 3, ctx, end)
        self.alu(4, "=", src=2)
        self.alu(4, "+=", imm=need)
        self.jmp(">", 4, on_short, src=3)

    def call(self, helper):
        self.items.append(_insn(JMP | CALL, 0, 0, 0, helper))

    def exit(self):
        self.items.append(_insn(JMP | EXIT))

    def code(self):
        out = []
        for pc, item in enumerate(self.items):
            if isinstance(item, tuple):
                code, dst, src, label, imm = item
                if label not in self.labels:
                    raise ValueError(f"eBPF jump to unknown label {label!r}")
                item = _insn(code, dst, src, self.labels[label] - pc - 1, imm)
            out.append(item)
        return b"".join(out)


def _sys(cmd, attr):
    nr = _SYS_BPF.get(os.uname().machine)
    if nr is None:
        raise EnvironmentProblem(f"eBPF: no bpf(2) system call number known for "
                                 f"{os.uname().machine}")
    buf = ctypes.create_string_buffer(attr.ljust(_ATTR, b"\0"), _ATTR)
    ret = _libc.syscall(nr, cmd, buf, _ATTR)
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret, buf.raw


def _ptr(buf):
    return ctypes.addressof(buf)


class Map:
    """A BPF array map of ``entries`` values of ``value_size`` bytes (u32 keys);
    ``flags`` F_MMAPABLE lets a process map its values into memory."""

    def __init__(self, value_size, entries, flags=0):
        self.value_size = value_size
        self.entries = entries
        try:
            self.fd, _ = _sys(_MAP_CREATE, struct.pack("<IIIII", MAP_ARRAY, 4, value_size,
                                                       entries, flags))
        except OSError as e:
            raise EnvironmentProblem(f"eBPF maps unavailable ({e.strerror}): dequeue ECN "
                                     "marking and the lossless fabric need "
                                     "CONFIG_BPF_SYSCALL and root")

    def _elem(self, cmd, key, value):
        k = ctypes.create_string_buffer(struct.pack("<I", key), 4)
        _sys(cmd, struct.pack("<IIQQQ", self.fd, 0, _ptr(k), _ptr(value), 0))

    def lookup(self, key):
        value = ctypes.create_string_buffer(self.value_size)
        self._elem(_MAP_LOOKUP, key, value)
        return value.raw

    def update(self, key, data):
        self._elem(_MAP_UPDATE, key, ctypes.create_string_buffer(data, self.value_size))

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def load(prog_type, asm, name):
    """Load ``asm`` (an ``Asm``) as a program of ``prog_type``; returns its fd."""
    code = asm.code()
    insns = ctypes.create_string_buffer(code, len(code))
    lic = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(1 << 16)
    attr = struct.pack("<IIQQIIQII16s", prog_type, len(code) // 8, _ptr(insns), _ptr(lic),
                       1, len(log), _ptr(log), 0, 0, name.encode()[:15])
    try:
        fd, _ = _sys(_PROG_LOAD, attr)
    except OSError as e:
        text = log.value.decode(errors="replace").strip().splitlines()[-3:]
        raise EnvironmentProblem(f"the kernel refused eBPF program {name} ({e.strerror})"
                                 + (": " + " | ".join(text) if text else ""))
    return fd


def test_run(fd, packet):
    """Run program ``fd`` once on ``packet``; returns (return value, packet after)."""
    din = ctypes.create_string_buffer(packet, len(packet))
    dout = ctypes.create_string_buffer(len(packet) + 256)
    attr = struct.pack("<IIIIQQII", fd, 0, len(packet), len(dout), _ptr(din), _ptr(dout),
                       1, 0)
    _, raw = _sys(_PROG_TEST_RUN, attr)
    retval, _, size_out = struct.unpack_from("<III", raw, 4)
    return retval, dout.raw[:size_out]
