"""Concurrent resyncs and pushes in the os-ken app, on fake switches (no OVS).

The app resyncs switches in threads of their own (os-ken's hub: native
threads here), several at a time, while port events push diffs to the
installed ones.  Here the switches are FakeSwitches
(OpenFlow semantics: a flow needs its group, a group is added once), the
reads and barriers yield at random points, and a link is cut and restored
while the switches connect.  Whatever the interleaving, every switch must end
holding exactly the policy's state for the final liveness, the app's
``installed`` must say so, and no push may touch a switch mid-resync.
"""

import json
import random
import threading

import pytest
from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_5 as ofp

from controller import handlers, osken_app, policy
from controller.fakeswitch import FakeSwitch
from controller.messages import SwitchState
from emulator.fabric import addressing, presets


class Dp:
    ofproto = ofp

    def __init__(self, dpid):
        self.id = dpid
        self.xid = 0


class Event:
    def __init__(self, dp, state):
        self.datapath, self.state = dp, state


@pytest.fixture()
def app(tmp_path, monkeypatch):
    doc = addressing.plan(presets.build("leaf-spine", {"spines": "2", "leaves": "3",
                                                       "hosts_per_leaf": "2"}), "ab12")
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(dict(doc, modes={"failover": "fast-failover"})))
    monkeypatch.setenv(osken_app.TOPOLOGY_ENV, str(path))
    deaths = []
    monkeypatch.setattr(osken_app, "_die", deaths.append)
    monkeypatch.setattr(handlers, "_die", deaths.append)
    ctl = osken_app.FabricController()
    ctl.deaths = deaths
    return ctl


class OwnedLock:
    """A switch lock that knows its holder."""

    def __init__(self):
        self.lock, self.owner = threading.Lock(), None

    def acquire(self):
        self.lock.acquire()
        self.owner = threading.current_thread()

    def release(self):
        self.owner = None
        self.lock.release()

    __enter__ = acquire

    def __exit__(self, *exc):
        self.release()


def wire(ctl, rng, monkeypatch):
    """Fake switches behind ``ctl``: reads, sends and barriers that yield at random."""
    switches = {s.dpid: FakeSwitch(s.dpid) for s in ctl.topo.switches}
    phys = {"up": frozenset(ctl.topo.all_ports())}      # ports physically up
    resyncing = {}                            # dpid -> the thread resyncing it
    guard = threading.Lock()
    ctl._lock = lambda dpid: ctl._locks.setdefault(dpid, OwnedLock())

    def pause():
        hub.sleep(rng.choice((0, 0, 0.0005, 0.002)))

    def read_ports(request, dp):
        resyncing[dp.id] = threading.current_thread()
        pause()
        return {p for d, p in phys["up"] if d == dp.id}

    def read_tables(request, dp):
        pause()
        flows, groups = switches[dp.id].state()
        return set(flows), set(groups)

    def send(dp, msgs):
        # only the resync or push holding the switch's lock sends to it, and
        # a push never to a switch that is resyncing
        me = threading.current_thread()
        assert ctl._locks[dp.id].owner is me, hex(dp.id)
        assert resyncing.get(dp.id, me) is me, hex(dp.id)
        with guard:
            switches[dp.id].apply(msgs)      # raises on a message out of order
        pause()
        return 0, False

    def barrier(dp):
        pause()

    real_resync = ctl.resync

    def resync(dp, t_connect=None):
        try:
            return real_resync(dp, t_connect)
        finally:
            resyncing.pop(dp.id, None)

    monkeypatch.setattr(osken_app, "read_ports", read_ports)
    monkeypatch.setattr(osken_app, "read_tables", read_tables)
    ctl._send, ctl._barrier, ctl.resync = send, barrier, resync
    return switches, phys


def cut(ctl, phys, name_a, name_b, up):
    a = ctl.topo.by_name[name_a]
    p = next(p for p in a.ports if p.peer == name_b)
    ends = [(a.dpid, p.port), ctl.topo.peer_of(a.dpid, p.port)]
    for key in ends:
        phys["up"] = phys["up"] | {key} if up else phys["up"] - {key}
        with ctl._mutex:
            ctl._port_change(key, up, 0.0)
    ctl._flush()


def settle(ctl):
    for _ in range(2000):
        hub.sleep(0.002)
        if set(ctl.installed) == set(ctl.dps) and all(
                lock.owner is None for lock in ctl._locks.values()):
            return
    raise AssertionError("the app never settled")


def assert_converged(ctl, switches):
    assert not ctl.deaths
    desired = policy.desired_state(ctl.topo, ctl.live(), ctl.failover)
    for dpid, sw in switches.items():
        assert sw.state() == (desired[dpid].flows, desired[dpid].groups), hex(dpid)
        assert ctl.installed[dpid] == desired[dpid]


@pytest.mark.parametrize("seed", range(24))
def test_connects_cuts_and_restores_in_any_interleaving_converge(app, seed, monkeypatch):
    rng = random.Random(seed)
    switches, phys = wire(app, rng, monkeypatch)
    dps = {dpid: Dp(dpid) for dpid in switches}
    order = list(dps)
    rng.shuffle(order)
    for i, dpid in enumerate(order):
        app.state_change(Event(dps[dpid], MAIN_DISPATCHER))
        if i == len(order) // 2:
            cut(app, phys, "leaf1", "spine1", up=False)   # while half are resyncing
        hub.sleep(rng.choice((0, 0.001)))
    cut(app, phys, "leaf2", "spine2", up=False)
    hub.sleep(rng.choice((0, 0.001, 0.003)))
    cut(app, phys, "leaf1", "spine1", up=True)
    settle(app)
    assert_converged(app, switches)


def test_a_reconnect_mid_resync_leaves_the_new_connection_in_charge(app, monkeypatch):
    switches, phys = wire(app, random.Random(1), monkeypatch)
    dps = {dpid: Dp(dpid) for dpid in switches}
    for dp in dps.values():
        app.state_change(Event(dp, MAIN_DISPATCHER))
    leaf1 = app.topo.by_name["leaf1"].dpid
    hub.sleep(0)
    old, new = dps[leaf1], Dp(leaf1)
    app.state_change(Event(old, DEAD_DISPATCHER))
    app.state_change(Event(new, MAIN_DISPATCHER))
    settle(app)
    assert app.dps[leaf1] is new
    assert_converged(app, switches)


def test_a_restart_over_installed_switches_sends_nothing(app, monkeypatch):
    switches, _ = wire(app, random.Random(2), monkeypatch)
    desired = policy.desired_state(app.topo, app.topo.all_ports(), app.failover)
    for dpid, sw in switches.items():
        sw.apply(policy.diff(SwitchState(), desired[dpid]))
    sent = []
    send = app._send
    app._send = lambda dp, msgs: (sent.append(len(msgs)), send(dp, msgs))[1]
    for dpid in switches:
        app.state_change(Event(Dp(dpid), MAIN_DISPATCHER))
    settle(app)
    assert sum(sent) == 0
    assert_converged(app, switches)

