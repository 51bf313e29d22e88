"""Open sockets inside other network namespaces from one process.

A socket belongs to the namespace it was created in, for its whole life,
whatever namespace its process is in later.  So one process can serve every
host of a fabric: enter a host's namespace (``setns``), create and bind the
socket there, come back.  The namespace is named by a path such as
``/proc/<pid>/ns/net`` (a Mininet host's shell) or ``/run/netns/NAME``.

Python 3.11 has no ``os.setns``: libc's is called through ctypes.  Only the
calling thread changes namespace; the engine that uses this is single-threaded.
"""

import ctypes
import os
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextmanager
def entered(path):
    """Run the block inside the network namespace at ``path`` (None: stay here)."""
    if path is None:
        yield
        return
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)
