"""The eBPF sources with the real clang (no kernel, no root): every program
compiles with the build's flags (every warning an error), and every header
compiles on its own, twice in a row, under the same flags: it includes what it
uses and guards against a second inclusion."""

import os
import shutil
import subprocess

import pytest

from emulator.dataplane.bpf import build


@pytest.fixture(scope="module")
def clang():
    if shutil.which("clang") is None or not os.path.exists(build.HEADERS):
        if os.environ.get("FABRIC_LAB_REQUIRE_ROOT_TESTS") == "1":
            pytest.fail(f"clang or libbpf's headers are missing: {build.INSTALL}")
        pytest.skip(f"clang or libbpf's headers are missing: {build.INSTALL}")
    return build._clang()


def compile_alone(clang, header, tmp_path):
    """clang's verdict on a translation unit that includes just ``header`` (twice)."""
    unit = tmp_path / "alone.c"
    name = os.path.basename(header)
    unit.write_text(f'#include "{name}"\n#include "{name}"\n')
    return subprocess.run([clang, *build.FLAGS, *build._include_flags(), "-I",
                           os.path.dirname(header), "-fsyntax-only", "-x", "c", str(unit)],
                          capture_output=True, text=True, timeout=60)


def test_there_are_headers_and_sources():
    names = {os.path.basename(p) for p in build.headers() + build.sources()}
    assert {"parse.h", "csum.h", "ar_common.h", "ar.bpf.c", "pfc.bpf.c"} <= names


@pytest.mark.parametrize("header", build.headers(), ids=os.path.basename)
def test_each_header_compiles_on_its_own(clang, header, tmp_path):
    r = compile_alone(clang, header, tmp_path)
    assert r.returncode == 0, r.stderr


def test_a_header_that_lacks_an_include_or_a_guard_is_caught(clang, tmp_path):
    uses = tmp_path / "uses.h"
    uses.write_text("#ifndef USES_H\n#define USES_H\n"
                    "static inline unsigned char tos(struct iphdr *ip) { return ip->tos; }\n"
                    "#endif\n")
    r = compile_alone(clang, str(uses), tmp_path)
    assert r.returncode != 0 and "iphdr" in r.stderr
    unguarded = tmp_path / "unguarded.h"
    unguarded.write_text("#include <linux/types.h>\nstruct s { __u32 a; };\n")
    assert compile_alone(clang, str(unguarded), tmp_path).returncode != 0


def test_every_program_compiles_without_a_warning(clang, tmp_path):
    assert "-Werror" in build.FLAGS and "-Wextra" in build.FLAGS
    version = build.clang_version(clang)
    for source in build.sources():
        obj = build.compile_one(source, clang, version, str(tmp_path))
        assert os.path.getsize(obj) > 0
