"""Compiling the ``*.bpf.c`` sources of this package with clang into ``build/``.

``build()`` compiles every source whose object is missing or stale: next to
each object, ``X.bpf.o.stamp`` records a hash of what it was made from (the
source, the package's headers, the flags) and clang's version.  ``setup.sh``
calls it (``python -m emulator.dataplane.bpf build``); the loader calls
``object_path``, which builds on demand when the object is missing or its
source, a header or the flags changed (on a multi-server worker, on that
server), and otherwise needs no compiler.  Every warning is an error.
"""

import fcntl
import glob
import hashlib
import os
import shutil
import sysconfig

from emulator.dataplane.system.proc import attempt
from emulator.errors import EnvironmentProblem

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "build")
HEADERS = "/usr/include/bpf/bpf_helpers.h"
PACKAGES = "clang libbpf-dev"
INSTALL = (f"install the Debian packages {PACKAGES} (apt-get install -y {PACKAGES}; "
           "./setup.sh installs them)")
# -g: BTF, which libbpf needs for global data (the programs' per-port constants);
# -mcpu=v3: atomic fetch-and-add, whose result the PFC program uses; every
# warning is an error (the flags are part of an object's stamp: changing them
# rebuilds every object)
FLAGS = ["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-target", "bpf", "-mcpu=v3"]
_checked = {}                         # source path -> object path, this process


def sources(where=HERE):
    return sorted(glob.glob(os.path.join(where, "*.bpf.c")))


def headers(where=HERE):
    """The package's headers: every one counts for every object (``source_hash``)."""
    return sorted(glob.glob(os.path.join(where, "*.h")))


def _include_flags():
    """The multiarch include directory (asm/types.h), which -target bpf omits."""
    arch = sysconfig.get_config_var("MULTIARCH") or f"{os.uname().machine}-linux-gnu"
    path = os.path.join("/usr/include", arch)
    return ["-I", path] if os.path.isdir(path) else []


def _clang():
    clang = shutil.which("clang")
    if clang is None:
        raise EnvironmentProblem(f"eBPF programs are compiled with clang, which is not "
                                 f"installed: {INSTALL}")
    if not os.path.exists(HEADERS):
        raise EnvironmentProblem(f"eBPF programs need libbpf's headers ({HEADERS}): "
                                 f"{INSTALL}")
    return clang


def clang_version(clang):
    r = attempt([clang, "--version"], timeout=30)
    if r.returncode != 0:
        raise EnvironmentProblem(f"{clang} --version failed: {r.stderr.strip()}")
    return r.stdout.splitlines()[0].strip()


def source_hash(source):
    """What the object of ``source`` depends on, besides the compiler."""
    h = hashlib.sha256()
    here = os.path.dirname(source)
    for path in [source] + headers(here):
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
    h.update(" ".join(FLAGS).encode())
    return h.hexdigest()


def object_of(source, build_dir=BUILD):
    return os.path.join(build_dir, os.path.basename(source)[:-len(".c")] + ".o")


def _stamp(obj):
    try:
        with open(obj + ".stamp") as f:
            lines = f.read().splitlines()
        return lines[0], lines[1]                 # source hash, clang version
    except (OSError, IndexError):
        return None, None


def stale(source, build_dir=BUILD, version=None):
    """Whether the object of ``source`` is missing, or made from another source
    (or, with ``version`` given, by another clang)."""
    obj = object_of(source, build_dir)
    if not os.path.exists(obj):
        return True
    made_from, made_by = _stamp(obj)
    return made_from != source_hash(source) or (version is not None and made_by != version)


def compile_one(source, clang, version, build_dir=BUILD):
    """Compile ``source`` into ``build_dir`` (atomically: another process may be
    loading the object) and record its stamp."""
    os.makedirs(build_dir, exist_ok=True)
    obj = object_of(source, build_dir)
    tmp = f"{obj}.{os.getpid()}.tmp"
    cmd = [clang, *FLAGS, *_include_flags(), "-c", source, "-o", tmp]
    r = attempt(cmd, timeout=120)
    if r.returncode != 0:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise EnvironmentProblem(f"clang could not compile {os.path.basename(source)}:\n"
                                 + r.stderr.strip())
    with open(tmp + ".stamp", "w") as f:
        f.write(f"{source_hash(source)}\n{version}\n")
    os.replace(tmp, obj)
    os.replace(tmp + ".stamp", obj + ".stamp")
    return obj


def build(where=HERE, build_dir=BUILD, force=False):
    """Compile every source of ``where`` whose object is missing or stale;
    returns the objects compiled."""
    clang = _clang()
    version = clang_version(clang)
    made = []
    with _locked(build_dir):
        for source in sources(where):
            if force or stale(source, build_dir, version):
                made.append(compile_one(source, clang, version, build_dir))
    return made


def object_path(name, where=HERE, build_dir=BUILD):
    """The object of source ``name`` (``pfc`` for ``pfc.bpf.c``), compiled first
    if it is missing or its source changed."""
    source = os.path.join(where, f"{name}.bpf.c")
    obj = _checked.get(source)
    if obj is not None:
        return obj
    if not os.path.exists(source):
        raise FileNotFoundError(source)
    if stale(source, build_dir):
        clang = _clang()
        with _locked(build_dir):
            if stale(source, build_dir):
                compile_one(source, clang, clang_version(clang), build_dir)
    obj = _checked[source] = object_of(source, build_dir)
    return obj


class _locked:
    """An exclusive lock on the build directory (two processes may build at once)."""

    def __init__(self, build_dir):
        self.build_dir = build_dir

    def __enter__(self):
        os.makedirs(self.build_dir, exist_ok=True)
        self.f = open(os.path.join(self.build_dir, ".lock"), "w")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()
