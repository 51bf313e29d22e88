"""Modeled loss-of-signal detection: the switches learn of a cut after ``delay``.

Model.  Hardware notices a dead link from its PHY: loss of signal plus a
debounce, typically about a millisecond, and then its forwarding (a
fast-failover group's liveness, the controller's PORT_STATUS) acts on it.
Open vSwitch's userspace datapath instead learns of a veth's carrier loss in
its main loop, between forwarding passes, and the cached datapath flows keep
their old actions until the revalidator's next dump: 13-85 ms on a loaded
fabric (docs/failover.md), an artefact of this platform, not of any switch.

With ``Detector(session, delay_s)`` the Injector still cuts the link the
same way (carrier goes), then, ``delay_s`` after the cut, tells the switch at
each end itself, as its PHY would:

* an OpenFlow port-mod setting the port's config ``PORT_DOWN``, sent on the
  bridge's management socket (``<rundir>/<bridge>.mgmt``), connected before
  any fault: no fork/exec on the fault's path.  OVS takes the port out of
  fast-failover liveness (``may_enable``) in the same loop pass and sends
  PORT_STATUS to the controller, which treats a config-down port as dead;
* the port-mod also makes OVS revalidate every cached datapath flow at once
  (a port reconfiguration wakes the revalidators), so the datapath acts on
  the news, not only the next translation.  Forcing it further with
  ``revalidator/purge`` after the barrier was measured and bought nothing
  (longest gap median 17.1 ms with it, 16.7 ms without, 8 repeats each).

The switch's data plane acts at the same modelled instant: the adaptive-routing
stage (``--lb dlb|packet``, dataplane.adaptive) is told at the cut when the
delay ends, and its programs skip the port from the first frame after that
time (they read the clock themselves: a late wake-up of this process, a few ms
on a loaded machine, does not stretch the data plane's detection).  Restoring
the link clears the config bit the same way.  Every notification is logged
with CLOCK_MONOTONIC ns: sent, and acknowledged by the switch.

What it does not model: the far end of a one-sided cut learns at the same
instant as the near end (hardware: its own loss of signal, same delay);
link-up debounce (ports come back as soon as they are up); and a gray
failure (no carrier loss) is never signalled here: that is BFD's job.
"""

import os
import socket
import threading
import time

from os_ken.ofproto import ofproto_parser
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from emulator.errors import ConfigError, RunFailed
from emulator.fabric.units import parse_duration


def parse_detect(text):
    """``--detect``: ``os`` (OVS's own carrier polling) -> None, or a delay in seconds.

    ``1ms``, ``500us``, ``0.002s`` or a bare number of milliseconds; 0 is allowed
    (tell the switches at once).
    """
    t = str(text).strip().lower()
    if t == "os":
        return None
    try:
        v = parse_duration(t + "ms" if t.replace(".", "", 1).isdigit() else t)
    except ValueError:
        v = None
    if v is not None and v <= 10:
        return v
    raise ConfigError("--detect", f"{text!r}: use os, or a delay such as 1ms, 500us "
                                  "(0 to 10 s)")


class _Datapath:
    """What os-ken's message classes need of a datapath to serialize."""
    ofproto = ofp
    ofproto_parser = parser


class MgmtConnection:
    """One bridge's OpenFlow management socket (OpenFlow 1.3), kept open.

    A reader thread answers echo requests and records barrier replies and
    errors, so ``port_down``/``port_up`` return at once and ``wait_barriers``
    waits for the switch's acknowledgement.
    """

    def __init__(self, path, timeout=5.0):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except OSError as e:
            self.sock.close()
            raise RunFailed(f"cannot connect to the bridge's OpenFlow socket {path}: {e}")
        self._xid = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._acked = 0
        self.errors = []
        self._send(parser.OFPHello(_Datapath()))
        version, msg_type, _, _ = self._read_msg()
        if msg_type != ofp.OFPT_HELLO or version < ofp.OFP_VERSION:
            self.sock.close()
            raise RunFailed(f"{path}: the switch does not speak OpenFlow 1.3")
        self.sock.settimeout(None)
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name=f"mgmt:{os.path.basename(path)}")
        self._reader.start()

    def _send(self, msg):
        with self._lock:
            self._xid += 1
            msg.xid = self._xid
            msg.serialize()
            self.sock.sendall(msg.buf)
            return self._xid

    def _read_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError(self.path)
            buf += chunk
        return buf

    def _read_msg(self):
        head = self._read_exact(8)
        version, msg_type, length, xid = ofproto_parser.header(head)
        body = self._read_exact(length - 8) if length > 8 else b""
        return version, msg_type, xid, body

    def _read_loop(self):
        try:
            while True:
                _, msg_type, xid, body = self._read_msg()
                if msg_type == ofp.OFPT_ECHO_REQUEST:
                    reply = parser.OFPEchoReply(_Datapath(), data=body)
                    with self._lock:
                        reply.xid = xid
                        reply.serialize()
                        self.sock.sendall(reply.buf)
                elif msg_type == ofp.OFPT_ERROR:
                    self.errors.append(body[:4].hex())
                if msg_type in (ofp.OFPT_BARRIER_REPLY, ofp.OFPT_ERROR):
                    with self._cond:
                        self._acked = max(self._acked, xid)
                        self._cond.notify_all()
        except (OSError, EOFError):
            with self._cond:
                self._acked = float("inf")     # nobody waits on a closed socket
                self._cond.notify_all()

    def port_config(self, port_no, hw_addr, down):
        """Set or clear ``PORT_DOWN`` on one port; returns the barrier's xid."""
        self._send(parser.OFPPortMod(_Datapath(), port_no=port_no, hw_addr=hw_addr,
                                     config=ofp.OFPPC_PORT_DOWN if down else 0,
                                     mask=ofp.OFPPC_PORT_DOWN))
        return self._send(parser.OFPBarrierRequest(_Datapath()))

    def wait_barrier(self, xid, timeout):
        with self._cond:
            if not self._cond.wait_for(lambda: self._acked >= xid, timeout):
                raise RunFailed(f"{self.path}: no barrier reply within {timeout}s")
        if self.errors:
            raise RunFailed(f"{self.path}: the switch refused a port-mod "
                            f"(OpenFlow error type/code {self.errors[-1]})")

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._reader.join(timeout=2)


def hw_addr(intf, sysfs="/sys"):
    with open(f"{sysfs}/class/net/{intf}/address") as f:
        return f.read().strip()


class Detector:
    """Tells switches of their ports' loss of signal, ``delay_s`` after a cut."""

    def __init__(self, session, delay_s, clock=time.monotonic_ns):
        self.delay_s = delay_s
        self.clock = clock
        # the switches' own data plane hears of it with their OpenFlow agent
        stage = getattr(session, "adaptive", None)
        self.listeners = [stage.link_news] if stage is not None else []
        net = session.net
        self._ports = {(sw["name"], p["port"]):
                       (sw["bridge"], hw_addr(p["intf"], net.sysfs(sw["name"])))
                       for sw in session.topo["switches"] for p in sw["ports"]}
        self._conns = {}
        try:
            for sw in session.topo["switches"]:
                self._conns[sw["bridge"]] = MgmtConnection(
                    net.ovs(sw["name"]).mgmt_path(sw["bridge"]))
        except BaseException:
            self.close()
            raise

    def notify(self, ports, down, t_cut_ns=None, timeout=5.0):
        """Port-mods for ``ports`` [(switch, port number)], after the modeled delay.

        ``down`` ports wait until ``t_cut_ns + delay``; ports coming up are told
        at once.  Returns the notification's timestamps (monotonic ns).
        """
        cut = down and t_cut_ns is not None
        if cut:
            due = t_cut_ns + int(self.delay_s * 1e9)
            for listener in self.listeners:      # the data plane acts at ``due`` itself
                listener(ports, down, due)
            while self.clock() < due:
                left = (due - self.clock()) / 1e9
                if left > 0.0015:
                    time.sleep(left - 0.001)     # sleep most of it, spin the last ms
        t_sent = self.clock()
        if not cut:
            for listener in self.listeners:
                listener(ports, down, t_sent)
        pending = []
        for sw, port in ports:
            bridge, mac = self._ports[(sw, port)]
            conn = self._conns[bridge]
            pending.append((conn, conn.port_config(port, mac, down)))
        for conn, xid in pending:
            conn.wait_barrier(xid, timeout)
        return {"detect_ms": round(self.delay_s * 1e3, 3), "t_notify_ns": t_sent,
                "t_acked_ns": self.clock(), "ports": [f"{sw}:{port}" for sw, port in ports]}

    def close(self):
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
