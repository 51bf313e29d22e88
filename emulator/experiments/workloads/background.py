"""Background iperf3 flows during a run (``run --background h1:h5:udp:10Mbps``).

Each spec ``SRC:DST[:tcp|udp[:RATE]]`` becomes an iperf3 server in DST and a
client in SRC, started before the workload and running for a given time in
a thread; their JSON results (parsed by ``traffic.iperf``) are folded into
the run's results under ``background``.
"""

import threading

from emulator.errors import ConfigError
from emulator.fabric.units import parse_rate
from traffic.iperf import Iperf3Server, run_client


def parse_spec(text, hosts):
    """'h1:h5:udp:10Mbps' -> dict; ConfigError naming the problem."""
    where = f"--background {text}"
    parts = text.split(":")
    if len(parts) < 2 or len(parts) > 4:
        raise ConfigError(where, "is not SRC:DST[:tcp|udp[:RATE]]")
    src, dst = parts[0], parts[1]
    for h in (src, dst):
        if h not in hosts:
            raise ConfigError(where, f"unknown host {h!r}")
    if src == dst:
        raise ConfigError(where, "source and destination are the same host")
    proto = parts[2] if len(parts) > 2 else "tcp"
    if proto not in ("tcp", "udp"):
        raise ConfigError(where, f"protocol {proto!r} is not tcp or udp")
    rate = None
    if len(parts) == 4:
        try:
            rate = parse_rate(parts[3])
        except ValueError as e:
            raise ConfigError(where, str(e))
    return {"src": src, "dst": dst, "protocol": proto, "rate_bps": rate}


class Background:
    """Runs the flows while the ``with`` block runs the workload."""

    def __init__(self, session, specs, duration):
        self.session = session
        self.specs = specs
        self.duration = duration
        self.results = []
        self._servers, self._threads = [], []

    def __enter__(self):
        ip_of = {h["name"]: h["ip"] for h in self.session.topo["hosts"]}
        try:
            for i, spec in enumerate(self.specs):
                port = 5201 + i
                host = self.session.net.hosts[spec["dst"]]
                self._servers.append(Iperf3Server(host, port=port))
                result = dict(spec, port=port)
                self.results.append(result)
                t = threading.Thread(target=self._client, daemon=True,
                                     args=(result, ip_of[spec["dst"]]))
                t.start()
                self._threads.append(t)
        except BaseException:
            self._stop()
            raise
        return self

    def _client(self, result, server_ip):
        host = self.session.net.hosts[result["src"]]
        try:
            result.update(run_client(host, server_ip, port=result["port"],
                                     udp=result["protocol"] == "udp",
                                     bitrate=result["rate_bps"], duration=self.duration))
        except (RuntimeError, TimeoutError, ValueError, KeyError) as e:
            result["error"] = str(e)

    def _stop(self):
        for s in self._servers:
            s.stop()

    def __exit__(self, *exc):
        for t in self._threads:
            t.join(timeout=self.duration + 30)
            if t.is_alive():
                self.results.append({"error": "an iperf3 client did not finish"})
        self._stop()
        return False
