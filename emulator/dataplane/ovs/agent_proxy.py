"""The switch-agent proxy: every switch's OpenFlow connection through a timing model.

Model.  With ``--switch-agent hardware|FILE`` switches do not connect to the
controller but to this process (``python -m emulator.dataplane.ovs.agent_proxy``),
which opens a connection to the controller for each switch that connects and
relays OpenFlow messages both ways, each delivered when the switch's agent
model (``emulator.fabric.switch_agent.Agent``, one per connection) says: a
flow or group modification reaches Open vSwitch when the modelled agent has
installed it, in order, so Open vSwitch's tables change at the modelled
times; a barrier reaches it (and its reply leaves) after the changes before
it; a PORT_STATUS reaches the controller after the modelled event latency.
Each switch has its kind's model (``--params``: a default and one per
datapath id, ``switch_agent.Fleet.for_dpids``): the default until the
switch names itself in its FEATURES_REPLY, its own from then on.
Nothing else is touched: the data plane, fast-failover groups and the
modelled carrier detection (a port-mod on the bridge's own management
socket) never pass through here.  It reads only OpenFlow headers (and a
bundle member's type), so it works for any controller app.

Each FLOW_MOD and GROUP_MOD is read for what it does (``change_of``: an
insertion, modification or deletion, its table and priority), so the agent
keeps its table's occupancy and charges an insertion for the rules it moves.

It logs, one JSON line per batch of messages read (``agent.jsonl``): the
direction, the switch (its datapath id, from FEATURES_REPLY), the time read
and the time the last one was delivered (CLOCK_MONOTONIC s), the messages,
changes (by kind, ``ops``) and barriers (and each PORT_STATUS and barrier
reply from the switch); the drill reports the push it saw beside the one it
predicted.  ``AgentProxy`` starts and stops the process.
"""

import argparse
import heapq
import itertools
import json
import os
import signal
import socket
import struct
import sys
import threading
import time

from emulator.dataplane.ovs.controller_proc import REPO, free_port, listening, wait_until
from emulator.dataplane.system.proc import STDOUT, Child
from emulator.fabric import switch_agent as model

# OpenFlow 1.3-1.5 message types (the header's second byte)
ECHO_REQUEST, ECHO_REPLY, FEATURES_REPLY, PORT_STATUS = 2, 3, 6, 12
FLOW_MOD, GROUP_MOD, BARRIER_REQUEST, BARRIER_REPLY, BUNDLE_ADD = 14, 15, 20, 21, 34
HEADER = struct.Struct("!BBHI")
BUNDLE_ADD_HEAD = 16          # header, bundle_id, pad, flags; then the member message


FLOW_CMD = {0: model.ADD, 1: model.MODIFY, 2: model.MODIFY, 3: model.DELETE, 4: model.DELETE}
GROUP_CMD = {0: model.ADD, 1: model.MODIFY, 2: model.DELETE, 3: model.MODIFY, 5: model.MODIFY}
U16, U32 = struct.Struct("!H"), struct.Struct("!I")


def change_of(msg):
    """The table change (``switch_agent.Change``) a FLOW_MOD or GROUP_MOD makes, or None.
    OpenFlow 1.0's flow mod (match first) and 1.1+'s (cookie, table, command,
    priority, then the match: its length is the match's second field) are read."""
    t = msg[1]
    try:
        if t == FLOW_MOD and msg[0] == 1:
            prio = U16.unpack_from(msg, 62)[0]
            return model.Change(FLOW_CMD.get(U16.unpack_from(msg, 56)[0], model.MODIFY), 0,
                                prio, (0, prio, bytes(msg[8:48])))
        if t == FLOW_MOD:
            table, prio = msg[24], U16.unpack_from(msg, 30)[0]
            mlen = U16.unpack_from(msg, 50)[0] if len(msg) >= 52 else 0
            return model.Change(FLOW_CMD.get(msg[25], model.MODIFY), table, prio,
                                (table, prio, bytes(msg[48:48 + mlen])))
        if t == GROUP_MOD:
            gid = U32.unpack_from(msg, 12)[0]
            return model.Change(GROUP_CMD.get(U16.unpack_from(msg, 8)[0], model.MODIFY),
                                None, 0, ("group", gid))
    except (struct.error, IndexError):      # too short to say: a change of unknown kind
        return model.Change(model.MODIFY, None, 0, None)
    return None


def classify_down(msg):
    """(kind, [Change]) of a message from the controller."""
    t = msg[1]
    if t in (ECHO_REQUEST, ECHO_REPLY):
        return model.ECHO, []
    if t in (FLOW_MOD, GROUP_MOD):
        return model.CHANGE, [change_of(msg)]
    if t == BUNDLE_ADD and len(msg) > BUNDLE_ADD_HEAD + 1 and \
            msg[BUNDLE_ADD_HEAD + 1] in (FLOW_MOD, GROUP_MOD):
        return model.CHANGE, [change_of(msg[BUNDLE_ADD_HEAD:])]
    if t == BARRIER_REQUEST:
        return model.BARRIER, []
    return model.OTHER, []


def classify_up(msg):
    return model.PORT_STATUS if msg[1] == PORT_STATUS else model.OTHER


def read_msgs(sock, buf):
    """(the whole OpenFlow messages received next, the rest); ([], b"") at end of stream."""
    while True:
        msgs, off = [], 0
        while len(buf) - off >= HEADER.size:
            length = HEADER.unpack_from(buf, off)[2]
            if length < HEADER.size:
                raise ConnectionError(f"OpenFlow message of length {length}")
            if len(buf) - off < length:
                break
            msgs.append(buf[off:off + length])
            off += length
        buf = buf[off:]
        if msgs:
            return msgs, buf
        more = sock.recv(1 << 16)
        if not more:
            return [], b""
        buf += more


class Pipe:
    """One direction of a connection: messages written at their release times by a
    thread of its own (a condition variable's timed wait: sub-millisecond on time,
    where an event loop's timers round up to the millisecond)."""

    def __init__(self, sock):
        self.sock = sock
        self.heap, self.seq = [], itertools.count()
        self.cond = threading.Condition()
        self.closed = False

    def put(self, release, data):
        with self.cond:
            heapq.heappush(self.heap, (release, next(self.seq), data))
            self.cond.notify()

    def close(self):
        with self.cond:
            self.closed = True
            self.cond.notify()

    def run(self):
        while True:
            with self.cond:
                while not self.closed:
                    if self.heap:
                        delay = self.heap[0][0] - time.monotonic()
                        if delay <= 0:
                            break
                        self.cond.wait(delay)
                    else:
                        self.cond.wait()
                if self.closed:
                    return
                now = time.monotonic()
                out = []
                while self.heap and self.heap[0][0] <= now:
                    out.append(heapq.heappop(self.heap)[2])
            self.sock.sendall(b"".join(out))


class Relay:
    """One switch's connection: switch <-> proxy <-> controller, through its Agent."""

    def __init__(self, proxy, sw):
        self.proxy = proxy
        self.agent = model.Agent(proxy.params_of(None))
        self.lock = threading.Lock()          # the agent's state: both directions use it
        self.sw = sw
        self.dpid = None
        self.ended = threading.Event()

    def run(self):
        try:
            ctl = socket.create_connection(self.proxy.upstream, timeout=5)
        except OSError:
            self.sw.close()                  # the switch retries; the controller may be back
            return
        ctl.settimeout(None)
        ctl.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        to_sw, to_ctl = Pipe(self.sw), Pipe(ctl)
        threads = [threading.Thread(target=self._guard, args=(f, a), daemon=True)
                   for f, a in ((to_sw.run, ()), (to_ctl.run, ()),
                                (self.down, (ctl, to_sw)), (self.up, (self.sw, to_ctl)))]
        self.done = threading.Event()
        for t in threads:
            t.start()
        self.done.wait()
        for pipe in (to_sw, to_ctl):
            pipe.close()
        for sock in (self.sw, ctl):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self.ended.set()

    def _guard(self, fn, args):
        """Run one side; when it ends (a connection closed or reset) end the relay."""
        try:
            fn(*args)
        except OSError:
            pass
        finally:
            self.done.set()

    def down(self, sock, pipe):
        buf = b""
        while True:
            msgs, buf = read_msgs(sock, buf)
            if not msgs:
                return
            now = time.monotonic()
            barriers, kinds = 0, {}
            last = now
            with self.lock:
                for m in msgs:
                    kind, ops = classify_down(m)
                    for c in ops:
                        kinds[c.op] = kinds.get(c.op, 0) + 1
                    barriers += kind == model.BARRIER
                    release = self.agent.to_switch(now, kind, ops=ops)
                    last = max(last, release)
                    pipe.put(release, m)
            self.proxy.log({"d": "down", "dpid": self.dpid, "t": round(now, 6),
                            "out": round(last, 6), "msgs": len(msgs),
                            "changes": sum(kinds.values()), "barriers": barriers,
                            **({"ops": kinds} if kinds else {})})

    def up(self, sock, pipe):
        buf = b""
        while True:
            msgs, buf = read_msgs(sock, buf)
            if not msgs:
                return
            now = time.monotonic()
            for m in msgs:
                if m[1] == FEATURES_REPLY and len(m) >= 16:
                    dpid = struct.unpack_from('!Q', m, 8)[0]
                    self.dpid = f"{dpid:x}"
                    with self.lock:
                        self.agent.p = self.proxy.params_of(dpid)
                kind = classify_up(m)
                with self.lock:
                    release = self.agent.to_controller(now, kind)
                pipe.put(release, m)
                if kind == model.PORT_STATUS or m[1] == BARRIER_REPLY:
                    self.proxy.log({"d": "up", "dpid": self.dpid, "t": round(now, 6),
                                    "out": round(release, 6),
                                    "port_status" if kind == model.PORT_STATUS
                                    else "barrier_reply": 1})


def load_params(doc):
    """(default Params, {dpid: Params}) of ``--params``: one model's parameters, or
    ``{default: ..., dpids: {dpid: ...}}`` (None: ideal, no delay)."""
    def one(d):
        return model.Params() if d is None else model.from_dict(d)
    if "dpids" not in doc:
        return one(doc), {}
    return one(doc.get("default")), {int(k): one(v) for k, v in doc["dpids"].items()}


class Proxy:
    def __init__(self, params, upstream, log_path):
        self.params, self.by_dpid = params
        self.upstream = upstream
        self.log_file = open(log_path, "a", buffering=1)
        self.log_lock = threading.Lock()
        self.relays = []
        self.params_path = log_path + ".params"     # SIGUSR1: read new parameters here

    def reload(self, *_):
        """New parameters for every switch from now on (a job drill's stretched clock)."""
        with open(self.params_path) as f:
            doc = json.load(f)
        self.params, self.by_dpid = load_params(doc)
        for relay in list(self.relays):
            with relay.lock:
                relay.agent.p = self.params_of(int(relay.dpid, 16) if relay.dpid else None)
        self.log({"d": "params", "t": round(time.monotonic(), 6), "params": doc})

    def params_of(self, dpid):
        return self.by_dpid.get(dpid, self.params)

    def log(self, rec):
        line = json.dumps(rec) + "\n"
        with self.log_lock:
            self.log_file.write(line)

    def _accept(self, server):
        while True:
            conn, _ = server.accept()
            if conn.family == socket.AF_INET:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            relay = Relay(self, conn)
            self.relays = [r for r in self.relays if not r.ended.is_set()] + [relay]
            threading.Thread(target=relay.run, daemon=True).start()

    def serve(self, listen, unix):
        servers = [socket.create_server(listen)]
        if unix:
            if os.path.exists(unix):
                os.unlink(unix)
            servers.append(socket.create_server(unix, family=socket.AF_UNIX))
            os.chmod(unix, 0o600)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGUSR1, self.reload)
        for server in servers:
            threading.Thread(target=self._accept, args=(server,), daemon=True).start()
        print(f"agent proxy listening on {listen[0]}:{listen[1]}", flush=True)
        while not stop.wait(1.0):
            pass
        for server in servers:
            server.close()


def hostport(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m emulator.dataplane.ovs.agent_proxy")
    ap.add_argument("--upstream", type=hostport, required=True, help="controller HOST:PORT")
    ap.add_argument("--listen", type=hostport, required=True, help="HOST:PORT for switches")
    ap.add_argument("--unix", help="also accept switches on this unix socket")
    ap.add_argument("--params", required=True, help="the model's parameters (JSON)")
    ap.add_argument("--log", required=True, help="agent.jsonl")
    a = ap.parse_args(argv)
    Proxy(load_params(json.loads(a.params)), a.upstream, a.log).serve(a.listen, a.unix)
    return 0


class AgentProxy:
    """The proxy as a child process of a run (started after the controller)."""

    def __init__(self, params, upstream, log_path, env=None, unix=None, kinds=None):
        """``params``: a switch_agent.Fleet (or one Params); ``kinds``: {dpid: kind}."""
        self.params, self.unix, self.log_path = model.fleet(params), unix, log_path
        self.kinds = kinds or {}
        self.port = free_port()
        self.argv = [sys.executable, "-m", "emulator.dataplane.ovs.agent_proxy",
                     "--upstream", f"{upstream[0]}:{upstream[1]}",
                     "--listen", f"127.0.0.1:{self.port}", "--params",
                     json.dumps(self.params.for_dpids(self.kinds)), "--log", log_path]
        if unix:
            self.argv += ["--unix", unix]
        self.env = env
        self.proc = None

    @property
    def url(self):
        return f"tcp:127.0.0.1:{self.port}"

    def start(self, timeout=30):
        self.out = open(self.log_path + ".stdout", "a")
        self.proc = Child.start(self.argv, "the switch-agent proxy",
                                log=f"{self.log_path}.stdout", cwd=REPO, stdout=self.out,
                                stderr=STDOUT, env=self.env, new_session=True)
        self.proc.wait_ready(
            lambda: listening(self.port) and (self.unix is None or os.path.exists(self.unix)),
            timeout, f"the switch-agent proxy to listen on port {self.port}")

    def set_params(self, params):
        """Every switch's model from now on (the proxy reads them on SIGUSR1)."""
        params = model.fleet(params)
        with open(self.log_path + ".params", "w") as f:
            json.dump(params.for_dpids(self.kinds), f)
        n = len(self.records())
        self.proc.send_signal(signal.SIGUSR1)
        wait_until(lambda: any(r["d"] == "params" for r in self.records()[n:]), 10,
                   "the switch-agent proxy to take its new parameters")
        self.params = params

    def records(self):
        """The proxy's log so far, parsed."""
        try:
            with open(self.log_path) as f:
                return [json.loads(line) for line in f if line.strip()]
        except OSError:
            return []

    def stop(self, timeout=10):
        if self.proc is None:
            return None
        status = self.proc.stop(timeout)
        self.out.close()
        return status


def start_for(session, url, unix):
    """The proxy of ``session`` in front of its controller at ``url`` (tcp:HOST:PORT),
    also on a unix socket when ``unix`` (switches in datapath instances); started."""
    _, host, port = url.split(":")
    agent = AgentProxy(session.switch_agent, (host, int(port)),
                       os.path.join(session.dir, "agent.jsonl"), env=session.child_env(),
                       unix=session.state.path("agent.sock") if unix else None,
                       kinds={sw["dpid"]: sw["kind"] for sw in session.topo["switches"]})
    session.state.record("agent", agent.argv)
    session.progress(f"switch agents: {session.switch_agent.text()} (proxy on "
                     f"127.0.0.1:{agent.port})")
    agent.start()
    session.results["switch_agent"] = session.switch_agent.as_dict()
    return agent


if __name__ == "__main__":
    sys.exit(main())
