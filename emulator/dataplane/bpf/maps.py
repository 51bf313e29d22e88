"""The ``bpf(2)`` calls the runs and tests make themselves, through ctypes: array
and hash maps (create, lookup, update, walk) and ``BPF_PROG_TEST_RUN`` (the kernel runs a
program once on a given frame, which is how the programs are tested).

Attribute layouts follow ``union bpf_attr`` in linux/bpf.h.
"""

import ctypes
import errno
import os
import struct

from emulator.errors import EnvironmentProblem

MAP_HASH, MAP_ARRAY, MAP_PROG_ARRAY = 1, 2, 3
F_MMAPABLE = 1 << 10
_MAP_CREATE, _MAP_LOOKUP, _MAP_UPDATE, _MAP_DELETE, _MAP_NEXT_KEY, _PROG_TEST_RUN = \
    0, 1, 2, 3, 4, 10
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_ATTR = 128
SKB_SIZE = 192                        # sizeof(struct __sk_buff)
SKB_PRIORITY = 32                     # offsetof(struct __sk_buff, priority)
_libc = ctypes.CDLL(None, use_errno=True)


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
    """A BPF map of ``entries`` values of ``value_size`` bytes: an array (u32
    keys) unless ``kind`` says otherwise (``MAP_HASH`` with ``key_size``-byte
    keys, ``MAP_PROG_ARRAY`` of program fds); ``flags`` F_MMAPABLE lets a
    process map an array's values into memory.  Programs use it in place of the
    map their object declares (``loader.load``)."""

    def __init__(self, value_size, entries, flags=0, kind=MAP_ARRAY, key_size=4):
        self.value_size = value_size
        self.entries = entries
        self.flags = flags
        self.kind = kind
        self.key_size = key_size
        try:
            self.fd, _ = _sys(_MAP_CREATE, struct.pack("<IIIII", kind, key_size, value_size,
                                                       entries, flags))
        except OSError as e:
            raise EnvironmentProblem(f"eBPF maps unavailable ({e.strerror}): dequeue ECN "
                                     "marking and the lossless fabric need "
                                     "CONFIG_BPF_SYSCALL and root")

    def _elem(self, cmd, key, value):
        raw = struct.pack("<I", key) if isinstance(key, int) else bytes(key)
        k = ctypes.create_string_buffer(raw, self.key_size)
        _sys(cmd, struct.pack("<IIQQQ", self.fd, 0, _ptr(k), _ptr(value), 0))

    def lookup(self, key):
        value = ctypes.create_string_buffer(self.value_size)
        self._elem(_MAP_LOOKUP, key, value)
        return value.raw

    def update(self, key, data):
        self._elem(_MAP_UPDATE, key, ctypes.create_string_buffer(data, self.value_size))

    def delete(self, key):
        raw = struct.pack("<I", key) if isinstance(key, int) else bytes(key)
        k = ctypes.create_string_buffer(raw, self.key_size)
        _sys(_MAP_DELETE, struct.pack("<IIQ", self.fd, 0, _ptr(k)))

    def items(self):
        """[(key bytes, value bytes)] of every entry of a hash map (an entry deleted
        meanwhile is skipped)."""
        out, key = [], None
        nxt = ctypes.create_string_buffer(self.key_size)
        while True:
            cur = ctypes.create_string_buffer(key, self.key_size) if key is not None else None
            try:
                _sys(_MAP_NEXT_KEY, struct.pack("<IIQQ", self.fd, 0,
                                                _ptr(cur) if cur is not None else 0,
                                                _ptr(nxt)))
            except OSError as e:
                if e.errno == errno.ENOENT:      # past the last key
                    return out
                raise
            key = nxt.raw
            try:
                out.append((key, self.lookup(key)))
            except OSError as e:
                if e.errno != errno.ENOENT:
                    raise

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def prog_array(entries):
    """A program array of ``entries`` slots (``chain.h``'s ``next_xdp``)."""
    return Map(4, max(1, entries), kind=MAP_PROG_ARRAY)


def _test_run(fd, packet, ctx=None):
    din = ctypes.create_string_buffer(packet, len(packet))
    dout = ctypes.create_string_buffer(len(packet) + 256)
    cin = ctypes.create_string_buffer(ctx or b"\0", max(1, len(ctx or b"")))
    cout = ctypes.create_string_buffer(max(1, len(ctx or b"")))
    size = len(ctx) if ctx else 0
    attr = struct.pack("<IIIIQQIIIIQQ", fd, 0, len(packet), len(dout), _ptr(din), _ptr(dout),
                       1, 0, size, size, _ptr(cin) if size else 0, _ptr(cout) if size else 0)
    _, raw = _sys(_PROG_TEST_RUN, attr)
    retval, _, size_out = struct.unpack_from("<III", raw, 4)
    return retval, dout.raw[:size_out], cout.raw[:size]


def test_run(fd, packet):
    """Run program ``fd`` once on ``packet``; returns (return value, packet after)."""
    retval, out, _ = _test_run(fd, packet)
    return retval, out


def test_run_skb(fd, packet, priority=0):
    """Run tc program ``fd`` once on ``packet`` whose ``skb->priority`` is
    ``priority``; returns (return value, packet after, priority after)."""
    skb = bytearray(SKB_SIZE)
    struct.pack_into("<I", skb, SKB_PRIORITY, priority)
    retval, out, skb_out = _test_run(fd, packet, bytes(skb))
    return retval, out, struct.unpack_from("<I", skb_out, SKB_PRIORITY)[0]
