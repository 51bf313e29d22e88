"""Per-run bookkeeping, so a run -- or ``emulator clean`` after a crash --
can remove exactly what the run created and nothing else.

Every run has a tag: 4 hex digits.  It appears
  * in every Linux name the run creates (``fl<tag>l1``, ``fl<tag>l1-e3``);
  * in the environment of every process the run starts
    (``FABRIC_LAB_RUN=<tag>``: Mininet's host shells, the controller, traffic
    processes inherit it), so processes are found even after SIGKILL;
  * in the state directory ``/run/fabric-lab/<tag>/``, which holds a lock
    file the live run keeps locked (``clean`` leaves live runs alone) and a
    journal of what was created.
"""

import fcntl
import json
import os
import re
import secrets
import time

STATE_ROOT = os.environ.get("FABRIC_LAB_STATE", "/run/fabric-lab")
RUN_ENV = "FABRIC_LAB_RUN"
NAME_RE = re.compile(r"^fl([0-9a-f]{4})[lsxn][0-9]+(-e[0-9]+)?$")


def tag_of_name(name):
    """The run tag in one of our bridge/interface names, or None if not ours."""
    m = NAME_RE.match(name)
    return m.group(1) if m else None


class RunState:
    """The state directory of one live run; hold it with ``with``."""

    def __init__(self, tag, directory, lock_fd):
        self.tag = tag
        self.dir = directory
        self._lock_fd = lock_fd

    @classmethod
    def create(cls, taken=()):
        """Pick a fresh tag (not in ``taken`` nor on disk) and lock its directory."""
        os.makedirs(STATE_ROOT, exist_ok=True)
        for _ in range(100):
            tag = secrets.token_hex(2)
            if tag in taken:
                continue
            directory = os.path.join(STATE_ROOT, tag)
            try:
                os.mkdir(directory)
            except FileExistsError:
                continue
            fd = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            state = cls(tag, directory, fd)
            state.record("run", {"pid": os.getpid(), "started": time.time()})
            return state
        raise RuntimeError("could not find a free run tag")

    @classmethod
    def create_named(cls, tag):
        """Lock the state directory of run ``tag`` on this machine (a server's share
        of a run started elsewhere: ``dataplane.worker``)."""
        os.makedirs(STATE_ROOT, exist_ok=True)
        directory = os.path.join(STATE_ROOT, tag)
        os.mkdir(directory)
        fd = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        state = cls(tag, directory, fd)
        state.record("run", {"pid": os.getpid(), "started": time.time()})
        return state

    def record(self, kind, what):
        """Journal something created, before or as it is created."""
        with open(os.path.join(self.dir, "journal"), "a", encoding="utf-8") as f:
            f.write(json.dumps({"kind": kind, "what": what}) + "\n")
            f.flush()

    def path(self, name):
        return os.path.join(self.dir, name)

    def release(self):
        """Remove the state directory (after everything else is gone)."""
        import shutil
        for name in os.listdir(self.dir):
            path = os.path.join(self.dir, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)        # a datapath instance's directory
            else:
                os.unlink(path)
        os.rmdir(self.dir)
        os.close(self._lock_fd)


def is_live(tag):
    """True if the run ``tag`` still holds its lock (its process is alive)."""
    path = os.path.join(STATE_ROOT, tag, "lock")
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def known_tags():
    try:
        return sorted(t for t in os.listdir(STATE_ROOT) if re.fullmatch(r"[0-9a-f]{4}", t))
    except FileNotFoundError:
        return []


def processes_of(tag=None):
    """PIDs whose environment carries FABRIC_LAB_RUN (= tag if given), not ours."""
    found = {}
    me = os.getpid()
    key = (RUN_ENV + "=").encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        for var in env.split(b"\0"):
            if var.startswith(key):
                value = var[len(key):].decode(errors="replace")
                if tag is None or value == tag:
                    found[int(entry)] = value
                break
    return found


def child_env(tag):
    """The environment of a process a run starts: ours plus the run tag.

    Passed explicitly (``env=``) to every child, so ``processes_of`` and
    ``emulator clean`` find them; the emulator's own environment is never
    changed.
    """
    return dict(os.environ, **{RUN_ENV: tag})
