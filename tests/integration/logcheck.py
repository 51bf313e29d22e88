"""After a fabric test: the controller's log and Open vSwitch's log must be clean.

Model.  A test notes ``offset = ovs_log_offset()`` before it builds a fabric;
afterwards ``problems(session, offset)`` returns every line that should fail
it: the controller's handler exceptions, OpenFlow errors and tracebacks
(``runner.controller_problems``) and the ``|ERR|``/``|EMER|`` lines that
ovs-vswitchd wrote since ``offset`` about this run's bridges and ports (every
one carries ``fl<run tag>``).  Some ERR lines are the expected echo of a fault
a test injected on purpose; they are allowed explicitly, by pattern, below.
"""

import os
import re

from emulator.runner import controller_problems

OVS_LOG = os.environ.get("FABRIC_LAB_OVS_LOG", "/var/log/openvswitch/ovs-vswitchd.log")
# ERR lines a deliberately downed port produces (a cut, a crashed switch).
EXPECTED = [
    re.compile(r"\|dpif_netdev\|ERR\|error receiving data from \S+: Network is down"),
]
BAD = re.compile(r"\|(ERR|EMER)\|")


def ovs_log_offset():
    """Current end of ovs-vswitchd's log (0 if there is none)."""
    try:
        return os.path.getsize(OVS_LOG)
    except OSError:
        return 0


def ovs_problems(offset, tag, allow=()):
    """ERR/EMER lines written since ``offset`` that name run ``tag``'s devices."""
    try:
        with open(OVS_LOG, errors="replace") as f:
            if os.path.getsize(OVS_LOG) < offset:   # rotated meanwhile: read it all
                offset = 0
            f.seek(offset)
            text = f.read()
    except OSError:
        return []
    name = re.compile(rf"\bfl{re.escape(tag)}")
    allowed = EXPECTED + [re.compile(a) for a in allow]
    return [line for line in text.splitlines()
            if BAD.search(line) and name.search(line)
            and not any(a.search(line) for a in allowed)]


def problems(session, offset, allow=()):
    """Everything in the run's controller log and OVS's log that should fail a test."""
    out = []
    log = os.path.join(session.dir, "controller.log")
    if os.path.exists(log):
        out += [f"controller: {line}" for line in controller_problems(log)]
    out += [f"ovs-vswitchd: {line}" for line in ovs_problems(offset, session.results["run"],
                                                             allow)]
    return out
