"""After a link or switch comes back, the ECN marker counts the queues of every
switch port that sent into it afresh (dataplane.faults -> ecnq.reset)."""

from types import SimpleNamespace

from emulator.dataplane.faults import Injector
from emulator.fabric import addressing, presets


class Recorder:
    def __init__(self):
        self.calls = []

    def reset(self, ifnames):
        self.calls.append(sorted(ifnames))


def injector(tmp_path):
    topo = addressing.plan(presets.build("leaf-spine", {}))
    s = SimpleNamespace(topo=topo, dir=str(tmp_path), marker=Recorder())
    return Injector(s), topo


def intf(topo, switch, peer):
    sw = next(x for x in topo["switches"] if x["name"] == switch)
    return next(p["intf"] for p in sw["ports"] if p["peer"] == peer)


def test_both_switch_ends_of_a_link_are_requeued(tmp_path):
    inj, topo = injector(tmp_path)
    inj._requeue(inj.switch_ports("leaf1-spine2"))
    assert inj.s.marker.calls == [sorted([intf(topo, "leaf1", "spine2"),
                                          intf(topo, "spine2", "leaf1")])]
    inj._requeue(inj.switch_ports("h1-leaf1"))          # a host link: its switch end
    assert inj.s.marker.calls[-1] == [intf(topo, "leaf1", "h1")]


def test_without_a_marker_nothing_happens(tmp_path):
    inj, _ = injector(tmp_path)
    inj.s.marker = None
    inj._requeue(inj.switch_ports("leaf1-spine2"))      # no error
