"""After a fabric test: the controller's log and Open vSwitch's log must be clean.

Model.  A test notes ``offset = ovs_log_offset()`` before it builds a fabric;
afterwards ``problems(session, offset)`` returns every line that should fail
it: the controller's handler exceptions, OpenFlow errors and tracebacks
(``session.controller_problems``) and the ``|ERR|``/``|EMER|`` lines that
ovs-vswitchd wrote since ``offset`` about this run's bridges and ports (every
one carries ``fl<run tag>``).  Some ERR lines are the expected echo of a fault
a test injected on purpose; they are allowed explicitly, by pattern, below.
"""

import os

from emulator.dataplane.observe.logs import OVS_LOG, ovs_log_offset, ovs_problems  # noqa: F401
from emulator.dataplane.session import controller_problems


def problems(session, offset, allow=()):
    """Everything in the run's controller log and OVS's log that should fail a test."""
    out = []
    log = os.path.join(session.dir, "controller.log")
    if os.path.exists(log):
        out += [f"controller: {line}" for line in controller_problems(log)]
    out += [f"ovs-vswitchd: {line}" for line in ovs_problems(offset, session.results["run"],
                                                             allow)]
    return out
