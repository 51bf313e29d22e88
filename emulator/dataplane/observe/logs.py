"""What a run's logs say went wrong: the controller's and Open vSwitch's.

``controller_problems`` lives in session (handler exceptions, OpenFlow errors,
tracebacks).  Here: the ``|ERR|``/``|EMER|`` lines ovs-vswitchd wrote about one
run's bridges and ports (every one carries ``fl<run tag>``) since an offset in
its log.  Some ERR lines are the expected echo of a fault injected on purpose
(a port set down); they are allowed explicitly, by pattern.
"""

import os
import re

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


def ovs_problems(offset, tag, allow=(), own_logs=()):
    """ERR/EMER lines written since ``offset`` that name run ``tag``'s devices, in
    the machine's ovs-vswitchd log and in ``own_logs`` (the run's datapath
    instances' logs, read whole)."""
    text = ""
    for path, start in [(OVS_LOG, offset)] + [(p, 0) for p in own_logs]:
        try:
            with open(path, errors="replace") as f:
                if os.path.getsize(path) < start:   # rotated meanwhile: read it all
                    start = 0
                f.seek(start)
                text += f.read()
        except OSError:
            pass
    name = re.compile(rf"\bfl{re.escape(tag)}")
    allowed = EXPECTED + [re.compile(a) for a in allow]
    return [line for line in text.splitlines()
            if BAD.search(line) and name.search(line)
            and not any(a.search(line) for a in allowed)]
