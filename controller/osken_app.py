"""The os-ken shim: with ``ofcodec`` and ``launch``, the only modules that import os_ken.

Model: ``controller.policy`` decides; this module only translates and talks.
Switch state is always reached by *diff*, never by blind re-install:

* a switch reaches MAIN state (connect or reconnect, in any order) ->
  read its port states (port desc), its flows (OF1.5 flow desc) and its
  groups (group desc), diff them against the policy's desired state and
  send only the differences, then a barrier. A controller restart over a
  correct switch sends nothing, so no counter is reset and no packet lost;
* a port status changes liveness -> the policy's new desired state is
  diffed against what was last installed on every connected switch, the
  changes sent to all of them first, then one barrier per switch.
  One structured ``CONVERGED {json}`` line gives monotonic timings.

A diff of ``BUNDLE_MIN`` messages or more goes as one bundle (atomic, ordered:
groups still first), each distinct message encoded once (``ofcodec.encode``).
Resyncs run in threads of their own (os-ken's hub), ``RESYNC_PARALLEL`` at a
time: Open vSwitch applies one switch while the controller encodes the next.
A switch belongs to one resync or push at a time (a lock each, taken before
``_mutex``, which guards the shared state and is never held over I/O); until
its resync is confirmed it is not ``installed``, pushes skip it, and a resync
that finds liveness changed meanwhile catches up.

Liveness: a port is live unless a switch said it is down (port desc or
port status), so a switch that has not connected yet does not stop the
others from routing over it.

Everything is OpenFlow 1.5 (OVS 3.1 speaks it; copy_field and the group
properties need it). The ECMP hash is OVS's Netronome experimenter group
property (include/openflow/netronome-ext.h, ``ntr_group_prop_selection_method``):
pad(4) method[16] param(8) then OXM TLVs whose values are all-ones masks.

Handler exceptions are fatal (``CONTROLLER-EXCEPTION`` then exit 1);
OpenFlow errors from a switch are logged with ``OFP-ERROR``.
The topology document's path comes from the environment variable
FABRIC_TOPOLOGY, and the run's modes from its ``modes`` block
(controller.topology.Modes; names in lab.modes): the failover mode (default
fast-failover; under ``none`` port status is logged and ignored and every port
counts as live: nothing reroutes, docs/failover.md), the load-balancing mode
(controller/lb.py, docs/load-balancing.md), a dragonfly's routing, and the
BFD hold-down: a port whose BFD session failed (LIVE cleared, carrier up) is
held down after it comes back (controller/damping.py), ``BASE:MAX`` in
seconds (default ``0``: off; ``drill --bfd`` asks for 3:30). The expiry of a
hold-down reaches the app as an event, so it is handled in order with the
switches' messages.
"""

import itertools
import json
import logging
import os
import time

from os_ken.app.ofctl import api as ofctl_api
from os_ken.app.ofctl import exception as ofctl_exc
from os_ken.base import app_manager
from os_ken.controller import event, ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    HANDSHAKE_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as parser

from lab.modes import Failover

from . import damping, lb, policy
from . import state as state_mod
from . import topology as topology_mod
from .handlers import _die, fatal
from .messages import SwitchState
from .ofcodec import encode, port_is_live, read_ports, read_tables, to_osken, wire

LOG = logging.getLogger(__package__)


TOPOLOGY_ENV = "FABRIC_TOPOLOGY"
EVENT_QUEUE = 1 << 16         # events this app may have waiting (os-ken's default: 128)
BUNDLE_MIN = state_mod.BUNDLE_MIN   # a switch's diff this long goes as one bundle
RESYNC_PARALLEL = 8           # switches resynced at once
DESIRED_KEPT = 2              # desired states kept, by liveness
XID_BASE = 1 << 31            # our messages' xids (os-ken's own count up from 0)


# ---- the app -----------------------------------------------------------------

class EventHoldDownExpired(event.EventBase):
    """A BFD hold-down may have run out (sent by the app to itself)."""


class FabricController(app_manager.OSKenApp):
    """Installs policy.desired_state on every switch and keeps it converged."""

    OFP_VERSIONS = [ofp.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # os-ken gives every app a queue of 128 events.  A handler of this app
        # waits for barrier replies (resync, push); meanwhile a large fabric's
        # PORT_STATUS and connect events fill the queue, the switch's receive
        # loop blocks putting the next one, and the barrier reply behind it is
        # never delivered: with 40 switches the controller stopped after 2-3.
        # A queue as deep as any fabric's burst of events keeps replies moving.
        self.events = hub.Queue(EVENT_QUEUE)
        self._events_sem = hub.BoundedSemaphore(EVENT_QUEUE)
        path = os.environ.get(TOPOLOGY_ENV)
        if not path:
            raise RuntimeError(f"{TOPOLOGY_ENV} is not set: no topology to load")
        self.topo = topology_mod.load(path)
        modes = self.topo.modes                # the document's modes block
        self.failover = modes.failover
        self.routing = modes.routing                   # a dragonfly's (controller/dragonfly.py)
        self.all_ports = self.topo.all_ports()
        self.down = set()          # (dpid, port) a switch reported down
        self._desired_for = {}     # live -> desired state: the last computed
        self.dps = {}              # dpid -> connected datapath
        self.installed = {}        # dpid -> SwitchState last confirmed by barrier
        self._locks = {}           # dpid -> lock held by the resync or push on it
        self._slots = hub.Semaphore(RESYNC_PARALLEL)
        self._mutex = hub.Semaphore(1)   # down, dps, installed, desired, hold-down
        self._sends = itertools.count()
        self.ofp_errors = 0
        self._deferred = []        # port events waiting for the burst's last one to push
        self.holddown = damping.parse_holddown(modes.bfd_holddown)   # "0": off
        self._holddown_timer = None
        LOG.info("topology %s: %d switches, %d host ports; failover %s", self.topo.name,
                 len(self.topo.switches), len(self.topo.host_ports), self.failover)
        self.lb = lb.Balancer(self.topo, modes.lb, lb.port_rates(path))
        LOG.info("load balancing %s; routing %s", self.lb.mode, self.routing)
        if self.lb.reactive:
            hub.spawn(self._lb_poll)
        hub.spawn(self._prewarm)

    def _prewarm(self):
        """Compute and encode the all-live state while the fabric is being built
        (an exception here comes back, fatal, from the first resync)."""
        with self._mutex:
            desired = self.desired(self.live())
        for state in desired.values():
            for msg in state.groups | state.flows:
                encode(msg)

    def live(self):
        if self.failover == Failover.NONE:
            return self.all_ports        # mode none: liveness is ignored
        return self.all_ports - self.down

    def desired(self, live):
        """The policy's state for ``live`` (call with ``_mutex``); the last ones are
        kept, since 40 switches connecting in a row ask for the same liveness."""
        live = frozenset(live)
        state = self._desired_for.pop(live, None)
        if state is None:
            state = state_mod.desired(self.topo, live, self.topo.modes)
        while len(self._desired_for) >= DESIRED_KEPT:
            del self._desired_for[next(iter(self._desired_for))]
        self._desired_for[live] = state           # the newest last
        return state

    def _request(self, msg, reply_cls, multi=True):
        return ofctl_api.send_msg(self, msg, reply_cls=reply_cls, reply_multi=multi)

    def _barrier(self, dp):
        ofctl_api.send_msg(self, parser.OFPBarrierRequest(dp), reply_cls=parser.OFPBarrierReply)

    def _send(self, dp, msgs):
        """Send ``msgs`` in one write, as one bundle from BUNDLE_MIN messages on;
        returns (bytes on the wire, bundled)."""
        if not msgs:
            return 0, False
        xid = XID_BASE | (next(self._sends) << 16) % XID_BASE    # a block of 65536 each
        buf, bundled = wire(msgs, xid, BUNDLE_MIN)
        if not dp.send(buf):
            raise ofctl_exc.InvalidDatapath(result=dp.id)
        return len(buf), bundled

    def _lock(self, dpid):
        return self._locks.setdefault(dpid, hub.Semaphore(1))

    def _log_converged(self, **fields):
        LOG.info("CONVERGED %s", json.dumps(fields, sort_keys=True))

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    @fatal
    def state_change(self, ev):
        dp = ev.datapath
        if ev.state == DEAD_DISPATCHER:
            with self._mutex:
                if dp.id is not None and self.dps.get(dp.id) is dp:
                    del self.dps[dp.id]
                    self.installed.pop(dp.id, None)
                    LOG.info("switch %016x disconnected", dp.id)
            return
        if dp.id not in self.topo.by_dpid:
            LOG.error("switch %016x is not in the topology: left alone", dp.id)
            return
        if dp.ofproto.OFP_VERSION != ofp.OFP_VERSION:
            raise RuntimeError(f"switch {dp.id:016x} speaks OpenFlow version "
                               f"{dp.ofproto.OFP_VERSION:#x}, need 1.5 (protocols=OpenFlow15)")
        with self._mutex:
            self.dps[dp.id] = dp
            self.installed.pop(dp.id, None)     # pushes leave it to its resync
        hub.spawn(self._resync_task, dp, time.monotonic())

    def _resync_task(self, dp, t_connect):
        """One switch's resync, in a thread of its own (fatal on an exception)."""
        try:
            with self._slots, self._lock(dp.id):
                t0 = self.resync(dp, t_connect)
            if t0 is not None:                   # this switch's ports changed liveness
                self.push(t0, event="connect-ports", dpid=dp.id)
        except ofctl_exc.InvalidDatapath:
            # The connection went away mid-resync; its next connect resyncs.
            LOG.warning("switch %016x went away during resync", dp.id)
        except Exception:          # noqa: BLE001 - a dead resync must not look alive
            _die("resync")

    def resync(self, dp, t_connect=None):
        """Read the switch's ports, flows and groups; send only the differences.

        Called with the switch's lock held.  Returns the start time when the
        switch's ports changed liveness (the caller pushes to the others)."""
        t0 = time.monotonic()
        dpid = dp.id
        ports = read_ports(self._request, dp)
        mine = {(d, p) for d, p in self.all_ports if d == dpid}
        with self._mutex:
            old_live = self.live()
            self.down = (self.down - mine) | {(dpid, p) for d, p in mine if p not in ports
                                              or (dpid, p) in self.holddown.held()}
            new_live = self.live()
        flows, groups = read_tables(self._request, dp)
        with self._mutex:
            live = self.live()
            state = self.desired(live)[dpid]
        msgs = policy.diff(SwitchState(frozenset(flows), frozenset(groups)), state)
        sent, (size, bundled) = len(msgs), self._send(dp, msgs)
        self._barrier(dp)
        while True:
            with self._mutex:           # installed only for the liveness of the moment
                if self.live() == live or self.dps.get(dpid) is not dp:
                    if self.dps.get(dpid) is dp:
                        self.installed[dpid] = state
                    break
                live = self.live()      # port events handled meanwhile: catch up
                new = self.desired(live)[dpid]
            msgs = policy.diff(state, new)
            sent, (more, _) = sent + len(msgs), self._send(dp, msgs)
            size += more
            self._barrier(dp)
            state = new
        t1 = time.monotonic()
        self._log_converged(event="connect", dpid=dpid, switch=self.topo.by_dpid[dpid].name,
                            found_flows=len(flows), found_groups=len(groups), sent=sent,
                            sent_bytes=size, in_bundle=bundled,
                            t_event=round(t0, 6), t_done=round(t1, 6),
                            wait_ms=round((t0 - (t_connect or t0)) * 1000, 3),
                            convergence_ms=round((t1 - t0) * 1000, 3))
        return t0 if new_live != old_live else None

    def push(self, t0, **why):
        """Send every installed switch its diff to the current liveness's state;
        barrier all.  Holds their locks (in dpid order) from the diff to the
        barrier: pushes and resyncs never interleave on a switch.

        The CONVERGED line breaks the time down: ``compute_ms`` (from the event
        that triggered the push to the push: the policy's recomputation),
        ``send_ms`` (diffs and sends), ``barrier_ms`` (until every touched switch
        confirmed), with the messages' count and ``bytes``."""
        with self._mutex:
            held = [d for d in sorted(self.dps) if d in self.installed]
        locks = [self._lock(d) for d in held]
        for lock in locks:
            lock.acquire()
        try:
            with self._mutex:     # gone, or mid-resync (it reads the switch itself): skipped
                desired = self.desired(self.live())
                todo = [(d, self.dps[d], self.installed[d]) for d in held
                        if d in self.dps and d in self.installed]
            t_push = time.monotonic()
            sent, size, bundled, touched = 0, 0, 0, []
            for dpid, dp, old in todo:
                msgs = policy.diff(old, desired[dpid])
                if not msgs:
                    continue
                try:
                    n, b = self._send(dp, msgs)
                except ofctl_exc.InvalidDatapath:
                    LOG.warning("switch %016x went away during push", dpid)
                    continue
                size, sent, bundled = size + n, sent + len(msgs), bundled + b
                touched.append((dpid, dp))
            t_sent = time.monotonic()
            for dpid, dp in touched:
                try:
                    self._barrier(dp)
                    with self._mutex:
                        if self.dps.get(dpid) is dp and dpid in self.installed:
                            self.installed[dpid] = desired[dpid]
                except ofctl_exc.InvalidDatapath:
                    LOG.warning("switch %016x went away during push", dpid)
        finally:
            for lock in locks:
                lock.release()
        t1 = time.monotonic()
        batch = why.pop("batch", None) or [(t0, why)]
        stages = {"compute_ms": round((t_push - batch[-1][0]) * 1000, 3),
                  "send_ms": round((t_sent - t_push) * 1000, 3),
                  "barrier_ms": round((t1 - t_sent) * 1000, 3), "bytes": size,
                  "bundled": bundled}
        # one line per event the push served (a burst of port events shares one push)
        for t_ev, fields in batch:
            self._log_converged(switches=[f"{d:x}" for d, _ in touched], sent=sent,
                                t_event=round(t_ev, 6), t_done=round(t1, 6),
                                convergence_ms=round((t1 - t_ev) * 1000, 3),
                                **stages, **fields)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    @fatal
    def port_status(self, ev):
        t0 = time.monotonic()
        dpid, desc = ev.msg.datapath.id, ev.msg.desc
        key = (dpid, desc.port_no)
        up = ev.msg.reason != ofp.OFPPR_DELETE and port_is_live(desc)
        gray = (ev.msg.reason != ofp.OFPPR_DELETE and not up
                and not desc.state & ofp.OFPPS_LINK_DOWN
                and not desc.config & ofp.OFPPC_PORT_DOWN)
        if key in self.all_ports:
            LOG.info("port %016x:%d %s%s", *key, "up" if up else "down",
                     " (liveness: BFD)" if gray else "")
            with self._mutex:
                if self.failover == Failover.NONE:
                    if up != (key not in self.down):     # recorded, never acted on
                        (self.down.discard if up else self.down.add)(key)
                elif self.holddown.event(key, up, gray, t0) is None and up \
                        and key in self.holddown.held():
                    LOG.info("port %016x:%d held down for %.3f s (BFD hold-down, %d flap(s))",
                             *key, self.holddown.hold[key], self.holddown.flaps.get(key, 0))
                    self._arm_holddown()
                else:
                    self._port_change(key, up, t0)
        self._flush()

    def _flush(self):
        """Push the deferred port events; a burst (both ends of a cut, a switch's
        ports) is pushed once, by its last event."""
        if not self._deferred or self._port_status_queued():
            return
        batch, self._deferred = self._deferred, []
        for _, fields in batch:
            fields["coalesced"] = len(batch)
        self.push(batch[0][0], batch=batch)
        if self.lb.reactive:
            self._lb_send(self.lb.set_live(self.live(), time.monotonic()))

    def _port_change(self, key, up, t0, **extra):
        if up == (key not in self.down):
            return
        if up:
            self.down.discard(key)
        else:
            self.down.add(key)
        self._deferred.append((t0, {"event": "port", "dpid": key[0], "port": key[1],
                                    "up": up, **extra}))

    def _arm_holddown(self):
        deadline = self.holddown.next_deadline()
        if deadline is None or self._holddown_timer == deadline:
            return
        self._holddown_timer = deadline
        hub.spawn_after(max(0.0, deadline - time.monotonic()),
                        lambda: self.send_event(self.name, EventHoldDownExpired()))

    @set_ev_cls(EventHoldDownExpired)
    @fatal
    def holddown_expired(self, ev):
        t0 = time.monotonic()
        with self._mutex:
            self._holddown_timer = None
            for key in self.holddown.expire(t0):
                LOG.info("port %016x:%d up after its BFD hold-down", *key)
                self._port_change(key, True, t0, held=True)
            self._arm_holddown()
        self._flush()

    def _port_status_queued(self):
        """Another PORT_STATUS waits in this app's event queue: one push can serve both
        (a 40-switch recompute takes about a second; a burst paid it per event)."""
        try:
            return any(isinstance(item[0], ofp_event.EventOFPPortStatus)
                       for item in list(self.events.queue))
        except (AttributeError, TypeError, IndexError):
            return False

    # ---- load balancing (controller/lb.py decides; this only talks) ----------
    def _lb_send(self, pairs):
        """Send [(dpid, message)] to connected switches; a gone switch resyncs later."""
        for dpid, msg in pairs:
            dp = self.dps.get(dpid)
            if dp is not None:
                dp.send_msg(to_osken(dp, msg))

    def _lb_poll(self):
        """Port stats of every switch and placed-flow stats every lb.POLL_S; then tick."""
        try:
            while True:
                hub.sleep(lb.POLL_S)
                if set(self.dps) != set(self.installed):
                    continue     # a resync is reading flow descs: its replies are its own
                for dpid, dp in list(self.dps.items()):
                    dp.send_msg(parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
                    # OVS answers OF1.5 FLOW_DESC, not FLOW_STATS (BAD_MULTIPART)
                    dp.send_msg(parser.OFPFlowDescStatsRequest(
                        dp, 0, 0, ofp.OFPP_ANY, ofp.OFPG_ANY, lb.COOKIE_LB,
                        0xFFFFFFFFFFFFFFFF, parser.OFPMatch()))
                self._lb_send(self.lb.tick(time.monotonic()))
        except Exception:          # noqa: BLE001 - a dead poller must not look alive
            _die("_lb_poll")

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    @fatal
    def packet_in(self, ev):
        dp = ev.msg.datapath
        msgs = self.lb.packet_in(dp.id, bytes(ev.msg.data), time.monotonic())
        self._lb_send([(dp.id, m) for m in msgs])

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    @fatal
    def port_stats_reply(self, ev):
        self.lb.port_stats(ev.msg.datapath.id, {s.port_no: s.tx_bytes for s in ev.msg.body},
                           time.monotonic())

    @set_ev_cls(ofp_event.EventOFPFlowDescStatsReply, MAIN_DISPATCHER)
    @fatal
    def flow_stats_reply(self, ev):
        counts = {}
        for s in ev.msg.body:
            m = s.match
            counts[(m.get("ipv4_src"), m.get("ipv4_dst"), m.get("udp_src"))] = \
                s.stats.get("byte_count", 0)
        self.lb.flow_stats(ev.msg.datapath.id, counts, time.monotonic())

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [HANDSHAKE_DISPATCHER, CONFIG_DISPATCHER, MAIN_DISPATCHER])
    @fatal
    def error(self, ev):
        m = ev.msg
        self.ofp_errors += 1
        LOG.error("OFP-ERROR switch=%s xid=%s type=%s code=%s data=%s",
                  f"{m.datapath.id:016x}" if m.datapath.id is not None else "?",
                  m.xid, m.type, m.code, bytes(m.data[:64]).hex())
