"""``python -m traffic engine`` as a child process: start, wait until ready, go,
result.  Used by the traffic mix (``experiments.workloads.mix``) and by a server's worker
(``dataplane.cluster.worker``), which runs that server's part of a plan."""

import json
import os
import select
import sys
import time

from emulator.dataplane.ovs.controller_proc import REPO
from emulator.dataplane.system.proc import PIPE, Child, TimedOut
from emulator.errors import RunFailed


class EngineProcess:
    """``python -m traffic engine`` on a plan: start, wait until ready, go, result."""

    def __init__(self, plan, workdir, env=None, name="engine"):
        self.plan_path = os.path.join(workdir, f"{name}-plan.json")
        self.out = os.path.join(workdir, f"{name}.json")
        self.err_path = os.path.join(workdir, f"{name}.stderr")
        with open(self.plan_path, "w") as f:
            json.dump(plan, f, indent=1)
        self.duration = plan["duration"]
        self.env = env
        self.proc = None
        self._pending = b""

    def start(self, timeout=60):
        self._err = open(self.err_path, "w")
        self.proc = Child.start(
            [sys.executable, "-m", "traffic", "engine", "--plan", self.plan_path,
             "--out", self.out], "traffic engine", cwd=REPO, stdin=PIPE, stdout=PIPE,
            stderr=self._err, env=self.env, text=True)
        if self.next_line(timeout, "'ready'") != "ready":
            self.kill()
            raise RunFailed(f"traffic engine did not get ready: {self._stderr_tail()}")

    def go(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def next_line(self, timeout, waiting_for="a line"):
        """The next line the engine prints, stripped; None if none within ``timeout`` s.

        Read unbuffered (``os.read``): a line left in a file object's buffer
        would wait, unseen by ``select``, until the engine's next write."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._pending:
            if not select.select([fd], [], [], max(deadline - time.monotonic(), 0))[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self.kill()
                raise RunFailed(f"traffic engine exited before {waiting_for}: "
                                f"{self._stderr_tail()}")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode().strip()

    def wait_line(self, word, timeout):
        """Wait until the engine prints ``word`` on a line (e.g. ``flowing``)."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.next_line(deadline - time.monotonic(), repr(word))
            if line is None:
                self.kill()
                raise RunFailed(f"traffic engine did not say {word!r} within {timeout:.0f}s")
            if line == word:
                return

    def stop(self):
        """End the sending now (the engine reads this between progress lines)."""
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()

    def result(self, timeout=None):
        timeout = timeout or self.duration + 60
        try:
            self.proc.wait(timeout=timeout)
        except TimedOut:
            self.kill()
            raise RunFailed(f"traffic engine did not finish within {timeout:.0f}s") from None
        finally:
            self._err.close()
        if self.proc.returncode != 0:
            raise RunFailed(f"traffic engine exited {self.proc.returncode}: "
                            f"{self._stderr_tail()}")
        with open(self.out) as f:
            return json.load(f)

    def kill(self):
        if self.proc:
            self.proc.kill()

    def _stderr_tail(self):
        try:
            with open(self.err_path) as f:
                lines = f.read().strip().splitlines()
            return lines[-1] if lines else "no message"
        except OSError:
            return "no message"
