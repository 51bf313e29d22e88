"""Every fabric an integration test builds must leave clean logs.

A Session records, when it closes, the controller's handler exceptions /
OpenFlow errors / tracebacks and the ERR/EMER lines ovs-vswitchd wrote about
its bridges (``emulator.dataplane.observe.logs``; deliberately downed ports are allowed).  Any
such line fails the test that closed the session -- or, for module-scoped
fabrics, the whole run at its end.
"""

import pytest

from emulator.dataplane import session


def _new_problems(start):
    return [(tag, p) for tag, probs in session.CLOSED[start:] for p in probs]


@pytest.fixture(autouse=True)
def clean_logs():
    start = len(session.CLOSED)
    yield
    bad = _new_problems(start)
    assert not bad, "problems in the logs of the fabrics this test built:\n" + "\n".join(
        f"  run {tag}: {line}" for tag, line in bad[:20])


@pytest.fixture(scope="session", autouse=True)
def clean_logs_everywhere():
    yield
    bad = _new_problems(0)
    assert not bad, "problems in the logs of fabrics built by module fixtures:\n" + "\n".join(
        f"  run {tag}: {line}" for tag, line in bad[:20])
