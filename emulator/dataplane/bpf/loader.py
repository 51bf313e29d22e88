"""Loading a compiled object's programs with libbpf (``libbpf.so.1``, through ctypes).

Each load opens the object anew: its ``.rodata`` (the programs' ``const
volatile`` per-port constants, one struct ``cfg``) is set from the bytes user
space packs, each map the object declares is replaced by the run's own
(``bpf_map__reuse_fd``), and the kernel's verifier sees the constants, so it
prunes the branches they rule out.  The program fds outlive the object
(``Programs``; attach them, then close them).

User space and C share two kinds of struct: the constants and the map values.
Python describes each as a ``Layout``, and a load compares it with the struct of
that name in the object's BTF (member names, offsets, size), so the two cannot
drift apart silently.  libbpf's messages (the verifier's log among them) are
captured and end up in the error when a load fails.

Only APIs of libbpf 1.1 (Debian 12) are used.
"""

import ctypes
import os
import struct
import threading

import emulator.dataplane.bpf.build as build
from emulator.dataplane.bpf.maps import prog_array
from emulator.errors import EnvironmentProblem

BTF_KIND_STRUCT = 4
LIBBPF_WARN, LIBBPF_INFO = 0, 1
_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_lock = threading.Lock()
_messages = []
_lib = None


class Layout(struct.Struct):
    """A C struct as Python packs it: ``fields`` [(name, format)] in order,
    little-endian, without implicit padding; members of a nested struct are
    named ``outer.inner``."""

    def __init__(self, name, fields):
        super().__init__("<" + "".join(f for _, f in fields))
        self.name = name
        self.names = [n for n, _ in fields]
        self.offsets, off = {}, 0
        for n, f in fields:
            self.offsets[n] = off
            off += struct.calcsize("<" + f)

    def pack_fields(self, **values):
        """The struct with ``values`` by name; every field must be given."""
        missing = set(self.names) - set(values)
        unknown = set(values) - set(self.names)
        if missing or unknown:
            raise ValueError(f"{self.name}: missing {sorted(missing)}, unknown {sorted(unknown)}")
        return self.pack(*(values[n] for n in self.names))


class Programs(dict):
    """{program name: fd} of one load; ``close`` (or ``with``) closes them."""

    def close(self):
        while self:
            os.close(self.popitem()[1])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _print(level, fmt, args):
    if level > LIBBPF_INFO:
        return 0
    buf = ctypes.create_string_buffer(4096)
    _lib.vsnprintf(buf, len(buf), fmt, args)
    _messages.append(buf.value.decode(errors="replace"))
    return 0


_print_fn = _PRINT_FN(_print)


def _libbpf():
    global _lib
    if _lib is not None:
        return _lib
    try:
        lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
    except OSError:
        raise EnvironmentProblem(f"eBPF programs are loaded with libbpf (libbpf.so.1), "
                                 f"which is not installed: {build.INSTALL}")
    p, c_int, c_char_p, c_size_t = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t
    for name, res, args in [
            ("bpf_object__open_file", p, [c_char_p, p]),
            ("bpf_object__load", c_int, [p]),
            ("bpf_object__close", None, [p]),
            ("bpf_object__btf", p, [p]),
            ("bpf_object__next_map", p, [p, p]),
            ("bpf_object__next_program", p, [p, p]),
            ("bpf_map__name", c_char_p, [p]),
            ("bpf_map__is_internal", ctypes.c_bool, [p]),
            ("bpf_map__value_size", ctypes.c_uint32, [p]),
            ("bpf_map__initial_value", p, [p, ctypes.POINTER(c_size_t)]),
            ("bpf_map__set_initial_value", c_int, [p, p, c_size_t]),
            ("bpf_map__reuse_fd", c_int, [p, c_int]),
            ("bpf_object__find_map_by_name", p, [p, c_char_p]),
            ("bpf_program__name", c_char_p, [p]),
            ("bpf_program__fd", c_int, [p]),
            ("bpf_program__set_autoload", c_int, [p, ctypes.c_bool]),
            ("btf__find_by_name_kind", ctypes.c_int32, [p, c_char_p, ctypes.c_uint32]),
            ("btf__type_by_id", p, [p, ctypes.c_uint32]),
            ("btf__name_by_offset", c_char_p, [p, ctypes.c_uint32]),
            ("btf__resolve_size", ctypes.c_int64, [p, ctypes.c_uint32]),
            ("libbpf_set_print", p, [_PRINT_FN])]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    libc = ctypes.CDLL(None)
    lib.vsnprintf = libc.vsnprintf
    lib.vsnprintf.argtypes = [c_char_p, c_size_t, c_char_p, p]
    lib.libbpf_set_print(_print_fn)
    _lib = lib
    return lib


def btf_members(lib, btf, name, prefix=""):
    """[(member name, byte offset)] of struct ``name`` in ``btf`` (nested structs
    flattened as ``outer.inner``), and its size; (None, None) if absent."""
    tid = lib.btf__find_by_name_kind(btf, name.encode(), BTF_KIND_STRUCT)
    if tid < 0:
        return None, None
    return _members(lib, btf, tid, prefix, 0), lib.btf__resolve_size(btf, tid)


def _members(lib, btf, tid, prefix, base):
    t = lib.btf__type_by_id(btf, tid)
    _, info, size = struct.unpack("<III", ctypes.string_at(t, 12))
    out = []
    for i in range(info & 0xFFFF):                       # struct btf_member after btf_type
        name_off, mtype, offset = struct.unpack("<III", ctypes.string_at(t + 12 + 12 * i, 12))
        name = prefix + lib.btf__name_by_offset(btf, name_off).decode()
        byte = base + (offset & 0xFFFFFF if info >> 31 else offset) // 8
        inner = _resolve(lib, btf, mtype)
        if inner is not None:
            out += _members(lib, btf, inner, name + ".", byte)
        else:
            out.append((name, byte))
    return out


def _resolve(lib, btf, tid):
    """The struct ``tid`` names through typedefs and qualifiers, or None."""
    for _ in range(16):
        t = lib.btf__type_by_id(btf, tid)
        _, info, ref = struct.unpack("<III", ctypes.string_at(t, 12))
        kind = (info >> 24) & 0x1F
        if kind == BTF_KIND_STRUCT:
            return tid
        if kind not in (8, 9, 10, 11):                   # typedef, volatile, const, restrict
            return None
        tid = ref
    return None


def check_layout(lib, obj, layout, where):
    btf = lib.bpf_object__btf(obj)
    members, size = btf_members(lib, btf, layout.name) if btf else (None, None)
    if members is None:
        raise EnvironmentProblem(f"{where}: no struct {layout.name} in its BTF (compiled "
                                 "without -g?)")
    mine = [(n, layout.offsets[n]) for n in layout.names]
    if members != mine or size != layout.size:
        raise EnvironmentProblem(f"{where}: struct {layout.name} is {members} ({size} bytes) "
                                 f"in C but {mine} ({layout.size} bytes) in Python")


def _fail(what):
    err = ctypes.get_errno()
    log = [m.rstrip() for m in _messages if m.strip()]
    if any("BEGIN PROG LOAD LOG" in m for m in log):
        start = max(i for i, m in enumerate(log) if "BEGIN PROG LOAD LOG" in m)
        log = log[max(0, start - 2):]
    tail = "\n".join(log[-40:])
    return EnvironmentProblem(f"{what} ({os.strerror(err) if err else 'failed'})"
                              + (":\n" + tail if tail else ""))


CHAIN_MAP = "next_xdp"        # chain.h: the next XDP program's slot
CHAINED = ("pfc", "ecnq")     # the objects whose XDP program may hand frames on


def load(name, config, config_layout, maps, value_layouts=(), programs=None):
    """Load the programs of object ``name`` (``build.object_path``) with ``.rodata``
    set to ``config`` (bytes of ``config_layout``, the C struct of global ``cfg``)
    and its maps replaced by ``maps`` {map name: maps.Map}, whose values are the C
    structs ``value_layouts`` describe; ``programs``: names to load (all if None).
    Returns their fds (``Programs``)."""
    path = build.object_path(name)
    if CHAIN_MAP not in maps and name in CHAINED:     # nothing follows: an empty array
        chain = prog_array(1)
        try:
            return load(name, config, config_layout, dict(maps, **{CHAIN_MAP: chain}),
                        value_layouts, programs)
        finally:
            chain.close()
    with _lock:
        lib = _libbpf()
        _messages.clear()
        obj = lib.bpf_object__open_file(path.encode(), None)
        if not obj:
            raise _fail(f"libbpf could not open {path}")
        try:
            return _load(lib, obj, path, config, config_layout, maps, value_layouts,
                         programs)
        finally:
            lib.bpf_object__close(obj)
            _messages.clear()


def _load(lib, obj, path, config, layout, maps, value_layouts, programs):
    where = os.path.basename(path)
    check_layout(lib, obj, layout, where)
    for value in value_layouts:
        check_layout(lib, obj, value, where)
    if len(config) != layout.size:
        raise ValueError(f"{where}: {len(config)} bytes of config for {layout.size}")
    rodata = lib.bpf_object__find_map_by_name(obj, b".rodata")
    size = ctypes.c_size_t()
    if not rodata or not lib.bpf_map__initial_value(rodata, ctypes.byref(size)):
        raise EnvironmentProblem(f"{where}: no .rodata (no const volatile cfg)")
    if size.value != len(config):
        raise EnvironmentProblem(f"{where}: .rodata is {size.value} bytes, Python packs "
                                 f"{len(config)} ({layout.name})")
    buf = ctypes.create_string_buffer(config, len(config))
    if lib.bpf_map__set_initial_value(rodata, buf, len(config)) != 0:
        raise _fail(f"{where}: could not set .rodata")
    m = lib.bpf_object__next_map(obj, None)
    declared = set()
    while m:
        if not lib.bpf_map__is_internal(m):
            mname = lib.bpf_map__name(m).decode()
            declared.add(mname)
            if mname not in maps:
                raise ValueError(f"{where}: map {mname} not given (the run's own replaces it)")
            if lib.bpf_map__value_size(m) != maps[mname].value_size:
                raise EnvironmentProblem(
                    f"{where}: map {mname} holds {lib.bpf_map__value_size(m)}-byte values "
                    f"in C, {maps[mname].value_size} in Python")
            if lib.bpf_map__reuse_fd(m, maps[mname].fd) != 0:
                raise _fail(f"{where}: could not use the run's map for {mname}")
        m = lib.bpf_object__next_map(obj, m)
    if set(maps) - declared:
        raise ValueError(f"{where}: no map {sorted(set(maps) - declared)} in the object")
    progs, p = {}, lib.bpf_object__next_program(obj, None)
    while p:
        pname = lib.bpf_program__name(p).decode()
        wanted = programs is None or pname in programs
        if lib.bpf_program__set_autoload(p, wanted) != 0:
            raise _fail(f"{where}: could not select program {pname}")
        if wanted:
            progs[pname] = p
        p = lib.bpf_object__next_program(obj, p)
    if programs is not None and set(programs) - set(progs):
        raise ValueError(f"{where}: no program {sorted(set(programs) - set(progs))}")
    ctypes.set_errno(0)
    if lib.bpf_object__load(obj) != 0:
        raise _fail(f"the kernel refused the eBPF programs of {where}")
    out = Programs()
    try:
        for pname, p in progs.items():
            out[pname] = os.dup(lib.bpf_program__fd(p))
    except BaseException:
        out.close()
        raise
    return out
