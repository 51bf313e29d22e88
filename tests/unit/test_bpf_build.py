"""Building and loading the eBPF programs without a kernel: which objects are
stale (a stand-in clang that copies its input), the errors that name the
packages to install when clang, libbpf's headers or libbpf.so.1 are missing,
and the Python side of the structs shared with C."""

import ctypes
import os
import stat

import pytest

from emulator.dataplane.bpf import __main__ as bpf_cli
from emulator.dataplane.bpf import build, loader
from emulator.errors import EnvironmentProblem

FAKE_CLANG = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "clang version $(cat "$(dirname "$0")/version")"; exit 0; fi
while [ $# -gt 0 ]; do
    case "$1" in -c) src=$2; shift ;; -o) out=$2; shift ;; esac
    shift
done
exec cp "$src" "$out"
"""


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A package directory with two sources and a header, and a stand-in clang
    first on PATH."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bpf.c").write_text('#include "common.h"\nint a;\n')
    (src / "b.bpf.c").write_text("int b;\n")
    (src / "common.h").write_text("#define X 1\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    clang = bin_dir / "clang"
    clang.write_text(FAKE_CLANG)
    clang.chmod(clang.stat().st_mode | stat.S_IEXEC)
    (bin_dir / "version").write_text("14.0.6\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(build, "_checked", {})
    return src, tmp_path / "build", bin_dir


def names(paths):
    return sorted(os.path.basename(p) for p in paths)


def test_builds_what_is_missing_then_nothing(tree):
    src, out, _ = tree
    assert names(build.build(str(src), str(out))) == ["a.bpf.o", "b.bpf.o"]
    assert (out / "a.bpf.o").read_text() == (src / "a.bpf.c").read_text()
    assert build.build(str(src), str(out)) == []


def test_a_changed_source_header_or_clang_makes_objects_stale(tree):
    src, out, bin_dir = tree
    build.build(str(src), str(out))
    (src / "b.bpf.c").write_text("int b2;\n")
    assert names(build.build(str(src), str(out))) == ["b.bpf.o"]
    (src / "common.h").write_text("#define X 2\n")           # headers count for every source
    assert names(build.build(str(src), str(out))) == ["a.bpf.o", "b.bpf.o"]
    (bin_dir / "version").write_text("15.0.0\n")
    assert names(build.build(str(src), str(out))) == ["a.bpf.o", "b.bpf.o"]
    os.unlink(out / "a.bpf.o.stamp")                          # made by whom: unknown
    assert names(build.build(str(src), str(out))) == ["a.bpf.o"]


def test_the_loader_builds_on_demand_and_only_when_the_source_changed(tree):
    src, out, bin_dir = tree
    obj = build.object_path("a", str(src), str(out))
    assert obj == str(out / "a.bpf.o") and os.path.exists(obj)
    (bin_dir / "version").write_text("15.0.0\n")             # a newer clang alone: kept
    build._checked.clear()
    mtime = os.stat(obj).st_mtime_ns
    assert build.object_path("a", str(src), str(out)) == obj
    assert os.stat(obj).st_mtime_ns == mtime
    (src / "a.bpf.c").write_text("int a2;\n")
    build._checked.clear()
    build.object_path("a", str(src), str(out))
    assert (out / "a.bpf.o").read_text() == "int a2;\n"


def test_without_clang_the_error_names_the_packages(tree, monkeypatch, capsys):
    src, out, _ = tree
    monkeypatch.setenv("PATH", str(src))                     # no clang there
    with pytest.raises(EnvironmentProblem, match="clang libbpf-dev.*setup.sh"):
        build.build(str(src), str(out))
    with pytest.raises(EnvironmentProblem, match="clang libbpf-dev"):
        build.object_path("a", str(src), str(out))
    assert bpf_cli.main(["build"]) == 2
    assert "clang libbpf-dev" in capsys.readouterr().err


def test_without_clang_an_object_already_built_still_loads(tree, monkeypatch):
    src, out, _ = tree
    build.build(str(src), str(out))
    monkeypatch.setenv("PATH", str(src))
    assert build.object_path("b", str(src), str(out)) == str(out / "b.bpf.o")


def test_without_libbpf_headers_the_error_names_the_packages(tree, monkeypatch):
    src, out, _ = tree
    monkeypatch.setattr(build, "HEADERS", "/nonexistent/bpf_helpers.h")
    with pytest.raises(EnvironmentProblem, match="libbpf-dev"):
        build.build(str(src), str(out))


def test_without_libbpf_so_the_error_names_the_packages(monkeypatch):
    real = ctypes.CDLL

    def cdll(name, *args, **kwargs):
        if name == "libbpf.so.1":
            raise OSError("libbpf.so.1: cannot open shared object file")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(loader, "_lib", None)
    monkeypatch.setattr(ctypes, "CDLL", cdll)
    with pytest.raises(EnvironmentProblem, match="libbpf.so.1.*clang libbpf-dev"):
        loader._libbpf()


def test_layouts_pack_by_name_with_c_offsets():
    from emulator.dataplane.lossless import ecnq, pfc
    assert ecnq.CONFIG.offsets["red.kmin"] == 16 and ecnq.CONFIG.offsets["trim.at"] == 48
    assert ecnq.CONFIG.size == 88
    assert pfc.ENTRY.size == pfc.ENTRY_SIZE == 136 and pfc.E_LATE == 128
    assert pfc.CONFIG.offsets["dscp"] == 72 and pfc.CONFIG.offsets["red.min_len"] == 104
    with pytest.raises(ValueError, match="missing"):
        ecnq.CONFIG.pack_fields(index=0)
    red = ecnq.red(1000, 2000, 0.0, 500)
    assert red["red.pmul"] == 1                    # at least 1/65536, as before
    assert ecnq.red(1000, 2000, 1.0, 500)["red.pmul"] == 1 << 16
