"""Switch-agent micro-benchmarks: rules installed through the proxy into an Open vSwitch
bridge, timed by a minimal OpenFlow controller of its own.

Model.  ``Bench(params)`` makes one bridge of its own (userspace datapath,
no ports, named and tagged like a run's, removed in ``close``), starts the
switch-agent proxy with ``params`` in front of a listening socket, and points
the bridge at the proxy: Open vSwitch connects to the proxy, the proxy to
this process, which speaks just enough OpenFlow 1.3 (hello, features,
echo replies, flow mods, barriers).  A second connection, straight to the
bridge's management socket, reads how many rules its table holds
(aggregate statistics, every ``POLL_S``): the data plane's view, which a
barrier reply need not match (``dp_lag_ms``).

``Bench.run(op, n, priority)`` (once per Bench: the agent's table starts
empty) sends ``n`` changes of one priority (inserts into the empty table, or
modifications of ``n`` rules inserted first), then a barrier, and returns
the times from the first change sent: to the barrier reply (the control
plane's view) and to the table holding them all (the data plane's, for
insertions).  The published figures each profile reproduces are
``emulator.fabric.agents.profiles.BENCH`` (bench/bench_switch_agents.py).
"""

import socket
import struct
import threading
import time

from emulator.dataplane.ovs.agent_proxy import AgentProxy, read_msgs
from emulator.dataplane.ovs.controller_proc import free_port, wait_until
from emulator.dataplane.ovs.instances import Ovs
from emulator.dataplane.runstate import RunState, child_env
from emulator.dataplane.system import proc
from emulator.errors import RunFailed
from emulator.fabric.switch_agent import ADD, MODIFY

OF13 = 4
HELLO, ECHO_REQUEST, ECHO_REPLY, FEATURES_REQUEST, FEATURES_REPLY = 0, 2, 3, 5, 6
FLOW_MOD, BARRIER_REQUEST, BARRIER_REPLY = 14, 20, 21
MULTIPART_REQUEST, MULTIPART_REPLY, MP_AGGREGATE = 18, 19, 2
OFPFC = {ADD: 0, MODIFY: 2}          # ADD, MODIFY_STRICT
ANY = 0xffffffff
POLL_S = 0.002
HEADER = struct.Struct("!BBHI")


def header(kind, length, xid):
    return HEADER.pack(OF13, kind, length, xid)


def flow_mod(i, priority, command, xid):
    """An OpenFlow 1.3 FLOW_MOD in table 0: ip, ipv4_dst=10.<i>; drop (add) or output
    to the bridge's own port (modify: another action than the rule had)."""
    oxm = struct.pack("!IH", 0x80000a02, 0x0800) + struct.pack("!I", 0x80001804) \
        + struct.pack("!I", (10 << 24) | (i + 1))
    m = struct.pack("!HH", 1, 4 + len(oxm)) + oxm
    m += b"\0" * (-len(m) % 8)
    inst = b""
    if command == OFPFC[MODIFY]:
        out = struct.pack("!HHIH6x", 0, 16, 0xfffffffe, 0xffff)          # output:LOCAL
        inst = struct.pack("!HH4x", 4, 8 + len(out)) + out                # apply-actions
    body = struct.pack("!QQBBHHHIIIH2x", 0, 0, 0, command, 0, 0, priority, ANY, ANY, ANY, 0)
    length = 8 + len(body) + len(m) + len(inst)
    return header(FLOW_MOD, length, xid) + body + m + inst


def aggregate_request(xid):
    body = struct.pack("!HH4x", MP_AGGREGATE, 0) + struct.pack(
        "!B3xII4xQQ", 0xff, ANY, ANY, 0, 0) + struct.pack("!HH4x", 1, 4)
    return header(MULTIPART_REQUEST, 8 + len(body), xid) + body


class Conn:
    """One OpenFlow 1.3 connection: a reader thread answers echoes and hands every
    other message to ``on``; ``send`` writes."""

    def __init__(self, sock, on):
        self.sock, self.on = sock, on
        self.lock = threading.Lock()
        self.closed = False
        self.thread = threading.Thread(target=self._read, daemon=True)

    def start(self):
        self.send(header(HELLO, 8, 1))
        self.thread.start()

    def send(self, data):
        with self.lock:
            self.sock.sendall(data)

    def _read(self):
        buf = b""
        try:
            while True:
                msgs, buf = read_msgs(self.sock, buf)
                if not msgs:
                    return
                now = time.monotonic()
                for m in msgs:
                    if m[1] == ECHO_REQUEST:
                        self.send(header(ECHO_REPLY, len(m), HEADER.unpack_from(m)[3]) + m[8:])
                    else:
                        self.on(m, now)
        except OSError:
            pass
        finally:
            self.closed = True

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class Bench:
    """A bridge of its own behind the proxy with ``params`` (see the module docstring)."""

    def __init__(self, params, connect_timeout=20):
        self.state = RunState.create()
        # a run's bridge name (``runstate.NAME_RE``), so ``emulator clean`` finds a
        # leftover: no fabric numbers a switch 0
        self.bridge = f"fl{self.state.tag}s0"
        self.ovs = Ovs()
        self.ctl = self.mon = self.proxy = None
        self.replies, self.counts = {}, []
        self.cond = threading.Condition()
        self.xid = 100
        self.made = False
        try:
            self._start(params, connect_timeout)
        except BaseException:
            self.close()
            raise

    def _start(self, params, timeout):
        port = free_port()
        server = socket.create_server(("127.0.0.1", port))
        server.settimeout(timeout)
        self.proxy = AgentProxy(params, ("127.0.0.1", port),
                                self.state.path("agent.jsonl"), env=child_env(self.state.tag))
        self.state.record("agent", self.proxy.argv)
        self.proxy.start()
        self.state.record("bridge", self.bridge)
        self.ovs.vsctl("add-br", self.bridge, "--", "set", "bridge", self.bridge,
                       "datapath_type=netdev", "fail_mode=secure", "protocols=OpenFlow13",
                       "--", "set-controller", self.bridge, self.proxy.url)
        self.made = True
        try:
            sock, _ = server.accept()          # the proxy, for the bridge
        except socket.timeout:
            raise RunFailed(f"the bridge {self.bridge} did not connect through the "
                            f"switch-agent proxy within {timeout} s") from None
        finally:
            server.close()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.ctl = Conn(sock, self._on_ctl)
        self.ctl.start()
        self.ctl.send(header(FEATURES_REQUEST, 8, 2))
        mon = socket.socket(socket.AF_UNIX)
        mon.connect(self.ovs.mgmt_path(self.bridge))
        self.mon = Conn(mon, self._on_mon)
        self.mon.start()
        wait_until(lambda: self._features, timeout, "the bridge's FEATURES_REPLY")

    _features = False

    def _on_ctl(self, m, now):
        with self.cond:
            if m[1] == FEATURES_REPLY:
                self._features = True
            elif m[1] == BARRIER_REPLY:
                self.replies[HEADER.unpack_from(m)[3]] = now
            self.cond.notify_all()

    def _on_mon(self, m, now):
        if m[1] == MULTIPART_REPLY and len(m) >= 40:
            with self.cond:
                self.counts.append((now, struct.unpack_from("!I", m, 32)[0]))
                self.cond.notify_all()

    def _next(self):
        self.xid += 1
        return self.xid

    def flows(self, timeout=5.0):
        """The bridge's table size now (an aggregate request on the management socket)."""
        with self.cond:
            n = len(self.counts)
        self.mon.send(aggregate_request(self._next()))
        with self.cond:
            if not self.cond.wait_for(lambda: len(self.counts) > n, timeout):
                raise RunFailed("no aggregate statistics from the bridge")
            return self.counts[-1]

    def _barrier(self, timeout):
        xid = self._next()
        self.ctl.send(header(BARRIER_REQUEST, 8, xid))
        with self.cond:
            if not self.cond.wait_for(lambda: xid in self.replies, timeout):
                raise RunFailed(f"no barrier reply within {timeout} s")
            return self.replies[xid]

    def _send_all(self, n, priority, command, step=0):
        data = b"".join(flow_mod(i, priority + step * i, command, self._next())
                        for i in range(n))
        t0 = time.monotonic()
        self.ctl.send(data)
        return t0

    def run(self, op, n, priority=100, timeout=120.0, step=0):
        """{"barrier_ms", "per_rule_ms", and for insertions "table_ms", "lag_ms"}: see
        the module docstring.  Once per Bench: the agent's table starts empty.
        ``step``: each rule's priority this much above the one before (1: increasing
        order, the priority dependence's slow order under ``shift_order: lower``)."""
        if self.flows()[1]:
            raise RunFailed("a Bench measures once: its table is not empty")
        if op == MODIFY:
            self._send_all(n, priority, OFPFC[ADD])
            self._barrier(timeout)
            wait_until(lambda: self.flows()[1] >= n, timeout, "the rules to modify")
        t0 = self._send_all(n, priority, OFPFC[op], step)
        t_b = self._barrier(timeout)
        out = {"barrier_ms": (t_b - t0) * 1e3, "per_rule_ms": (t_b - t0) * 1e3 / n}
        if op == ADD:
            deadline = time.monotonic() + timeout
            while True:
                t, count = self.flows()
                if count >= n:
                    break
                if time.monotonic() > deadline:
                    raise RunFailed(f"the table held {count} of {n} rules after {timeout} s")
                time.sleep(POLL_S)
            out.update(table_ms=(t - t0) * 1e3, lag_ms=(t - t_b) * 1e3)
        return out

    def clear(self, timeout=120.0):
        """Delete every rule (straight on the management socket: no model) and wait."""
        self.ovs.vsctl("--", "--if-exists", "clear", "bridge", self.bridge, "flow_tables")
        proc.run(["ovs-ofctl", "-O", "OpenFlow13", "del-flows", self.bridge], timeout=30)
        wait_until(lambda: self.flows()[1] == 0, timeout, "an empty table")

    def close(self):
        for conn in (self.ctl, self.mon):
            if conn is not None:
                conn.close()
        try:
            if self.made:
                self.ovs.vsctl("--", "--if-exists", "del-br", self.bridge)
        finally:
            try:
                if self.proxy is not None:
                    self.proxy.stop()
            finally:
                self.state.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
