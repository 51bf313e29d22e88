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
import shutil
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
    def create_named(cls, tag, server):
        """Lock the state directory of run ``tag``'s share on ``server``, a run started
        elsewhere (``dataplane.cluster.worker``): ``<root>/on-<server>/<tag>``."""
        parent = os.path.join(STATE_ROOT, f"on-{server}")
        directory = os.path.join(parent, tag)
        for _ in range(3):       # another share's release may remove the empty parent
            os.makedirs(parent, exist_ok=True)
            try:
                os.mkdir(directory)
                break
            except FileNotFoundError:
                continue
        else:
            raise RuntimeError(f"could not make {directory}")
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
        for name in os.listdir(self.dir):
            path = os.path.join(self.dir, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)        # a datapath instance's directory
            else:
                os.unlink(path)
        os.rmdir(self.dir)
        os.close(self._lock_fd)
        remove_empty_shares(os.path.dirname(self.dir))


def remove_empty_shares(parent=None):
    """Remove ``<root>/on-<server>`` directories that no share of a run holds any more
    (``parent``: only that one)."""
    try:
        names = [os.path.basename(parent)] if parent else os.listdir(STATE_ROOT)
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith("on-"):
            try:
                os.rmdir(os.path.join(STATE_ROOT, name))
            except OSError:          # not empty, or gone already
                pass


def state_dirs(tag):
    """Run ``tag``'s state directories on this machine: its own (``<root>/<tag>``) and
    its shares as a server of runs started elsewhere (``<root>/on-<server>/<tag>``)."""
    out = [os.path.join(STATE_ROOT, tag)]
    try:
        shares = sorted(d for d in os.listdir(STATE_ROOT) if d.startswith("on-"))
    except FileNotFoundError:
        return out
    return out + [os.path.join(STATE_ROOT, d, tag) for d in shares]


def is_live(tag):
    """True if any process of run ``tag`` still holds one of its locks (the run's
    process, or a server's worker of it, is alive)."""
    for directory in state_dirs(tag):
        try:
            fd = os.open(os.path.join(directory, "lock"), os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
    return False


def known_tags():
    """Tags with a state directory here, as a run or as a server's share of one."""
    tags = set()
    try:
        top = os.listdir(STATE_ROOT)
    except FileNotFoundError:
        return []
    for name in top:
        if re.fullmatch(r"[0-9a-f]{4}", name):
            tags.add(name)
        elif name.startswith("on-"):
            try:
                tags |= {t for t in os.listdir(os.path.join(STATE_ROOT, name))
                         if re.fullmatch(r"[0-9a-f]{4}", t)}
            except OSError:
                pass
    return sorted(tags)


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
