"""What ovs-vswitchd allocates with: tcmalloc found in the linker's cache, read
from a process's mappings, and the note for the machine's daemon."""

import os

from emulator.dataplane.ovs import datapath
from emulator.errors import RunFailed

LDCONFIG = """\
1234 libs found in cache `/etc/ld.so.cache'
\tlibtcmalloc_minimal_debug.so.4 (libc6,x86-64) => {debug}
\tlibtcmalloc_minimal.so.4 (libc6,x86-64) => {lib}
\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6
"""


def found(monkeypatch, text=None, error=False):
    def run(argv, timeout):
        assert argv == ["ldconfig", "-p"] and timeout
        if error:
            raise RunFailed("ldconfig: not found")
        return text
    monkeypatch.setattr(datapath.proc, "run", run)
    datapath.allocator_path.cache_clear()
    try:
        return datapath.allocator_path(), datapath.allocator_env()
    finally:
        datapath.allocator_path.cache_clear()


def test_tcmalloc_is_found_by_its_soname_not_the_debug_one(monkeypatch, tmp_path):
    lib, debug = tmp_path / "libtcmalloc_minimal.so.4", tmp_path / "debug.so.4"
    lib.write_text("")
    debug.write_text("")
    path, env = found(monkeypatch, LDCONFIG.format(lib=lib, debug=debug))
    assert path == str(lib)
    assert env == {"LD_PRELOAD": str(lib)}


def test_without_tcmalloc_the_daemon_runs_on_malloc(monkeypatch, tmp_path):
    # listed in a stale cache but gone from the disk; or ldconfig itself missing
    gone = LDCONFIG.format(lib=tmp_path / "gone.so", debug=tmp_path / "gone-too.so")
    assert found(monkeypatch, gone) == (None, {})
    assert found(monkeypatch, error=True) == (None, {})


def test_the_allocator_of_a_process_is_read_from_its_mappings():
    # this test's Python allocates with glibc's malloc: no libtcmalloc mapped
    assert datapath.vswitchd_allocator(os.getpid()) == "malloc"
    assert "tcmalloc" in datapath.allocator_note(datapath.vswitchd_allocator(os.getpid()))
    # a process that is gone: nothing to say
    dead = 2 ** 22 + 1                    # above the kernel's largest pid
    assert datapath.vswitchd_allocator(dead) is None
    assert datapath.allocator_note(datapath.vswitchd_allocator(dead)) is None
    assert datapath.allocator_note("tcmalloc") is None
