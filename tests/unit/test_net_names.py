"""The interface group that carries a run's tag (pure): teardown deletes the run's
veths with one request by group (``ifaces.delete_interfaces``)."""

from emulator.dataplane.links.ifaces import link_group


def test_each_run_has_its_own_interface_group():
    assert link_group("0a1f") == 0x464C0A1F                 # "FL" and the tag
    groups = {link_group(f"{t:04x}") for t in range(1 << 16)}
    assert len(groups) == 1 << 16 and max(groups) < 1 << 32
    assert 0 not in groups                                  # never the default group 0
