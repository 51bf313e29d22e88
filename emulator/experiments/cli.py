"""The interactive fabric CLI (``run --cli``): Mininet's CLI plus fault and view commands.

Model.  Everything Mininet's CLI does (``h1 ping h2``, ``xterm``, ``py``)
still works; on top, the commands a network engineer reaches for while
developing a controller app, using the same injector and counters as
``drill`` and the fidelity verdict:

  cut LINK [a|b|both]          take a link down (modeled 1 ms detection)
  restore [LINK]               bring it (or every cut link) back, end its loss
  flap LINK COUNT PERIOD       COUNT down/up cycles (e.g. flap leaf1-spine1 5 200ms)
  loss LINK PERCENT [a|b|both] gray failure: drop PERCENT % leaving that end
  links [SECONDS]              per link direction: Mbit/s, queue backlog, drops
  capture NODE[:PORT],...      start a pcap per interface (dataplane.observe.capture)
  capture stop                 stop it; the files stay in the results directory

A bad argument prints one ``error:`` line and the prompt comes back.
"""

import sys
import time

from mininet.cli import CLI
from mininet.log import output

from emulator.dataplane.faults import Injector
from emulator.dataplane.observe import capture as cap
from emulator.dataplane.observe.counters import QueueCounters, link_names
from emulator.errors import ConfigError, FabricError, RunFailed
from emulator.experiments.spec.scenario import parse_duration

DEFAULT_DETECT_S = 0.001


class FabricCLI(CLI):
    prompt = "fabric> "

    def __init__(self, session, stdin=sys.stdin, script=None, detect=DEFAULT_DETECT_S):
        self.session = session
        self.inj = Injector(session, detect=detect)
        self.cut_links = []
        self.loss_link = None
        self.capture = None
        try:
            super().__init__(session.net.mn, stdin=stdin, script=script)
        finally:
            self.close()

    def close(self):
        self._stop_capture()
        self.inj.close()

    def _stop_capture(self):
        """Stop the CLI's capture, if any; its files join the run's captures."""
        if self.capture is None:
            return {}
        files = self.capture.stop()
        self.session.results.setdefault("captures", {}).update(files)
        self.capture = None
        return files

    def _guard(self, fn, line):
        try:
            fn(line.split())
        except (FabricError, RunFailed, ValueError, IndexError) as e:
            output(f"error: {e}\n")

    # ---- faults --------------------------------------------------------------

    def do_cut(self, line):
        """cut LINK [a|b|both]: take a link down, e.g. cut leaf1-spine1"""
        def cut(args):
            side = args[1] if len(args) > 1 else "both"
            ev = self.inj.link_down(args[0], side)
            self.cut_links.append((args[0], side))
            told = ev.get("detect")
            output(f"{args[0]} down ({side})"
                   + (f"; switches told after {told['detect_ms']} ms and acknowledged "
                      f"{(told['t_acked_ns'] - ev['t_cut_ns']) / 1e6:.1f} ms after the cut"
                      if told else "") + "\n")
        self._guard(cut, line)

    def do_restore(self, line):
        """restore [LINK]: bring a cut link (or every one) back and end its loss"""
        def restore(args):
            links = [c for c in self.cut_links if not args or c[0] == args[0]]
            for link, side in links:
                self.inj.link_up(link, side)
                self.cut_links.remove((link, side))
                output(f"{link} up\n")
            if self.loss_link and (not args or args[0] == self.loss_link):
                self.inj.loss_stop()
                output(f"{self.loss_link}: loss ended\n")
                self.loss_link = None
            elif not links:
                output("nothing to restore\n")
        self._guard(restore, line)

    def do_flap(self, line):
        """flap LINK COUNT PERIOD: COUNT down/up cycles, e.g. flap leaf1-spine1 5 200ms"""
        def flap(args):
            count, period = int(args[1]), parse_duration(args[2], "flap")
            self.inj.flap(args[0], count, period)
            output(f"{args[0]} flapped {count} times every {period * 1e3:g} ms; up\n")
        self._guard(flap, line)

    def do_loss(self, line):
        """loss LINK PERCENT [a|b|both]: drop PERCENT % of frames leaving that end"""
        def loss(args):
            pct = float(args[1].rstrip("%"))
            side = args[2] if len(args) > 2 else "a"
            self.inj.loss_start(args[0], pct, side)
            self.loss_link = args[0]
            output(f"{args[0]}: dropping {pct:g} % ({side}); 'restore' ends it\n")
        self._guard(loss, line)

    def do_storm(self, line):
        """storm NODE|LINK on|off: a PFC storm (lossless fabric): h1 pauses its ToR,
        leaf1-spine1 leaf1's port pauses spine1, until 'storm ... off'"""
        def storm(args):
            if self.session.pfc is None:
                raise ConfigError("storm", "the fabric is not lossless (-P lossless=true)")
            on = (args[1] if len(args) > 1 else "on") == "on"
            ev = self.inj.pfc_storm(args[0], on)
            output(f"{ev['end']} {'pauses its peer forever' if on else 'stopped pausing'}\n")
        self._guard(storm, line)

    def do_pfc(self, line):
        """pfc: every lossless port's buffer, pauses sent, paused s, ingress/watchdog drops"""
        def pfc(args):
            if self.session.pfc is None:
                output("the fabric is not lossless\n")
                return
            output(f"{'port':14s} {'buffer':>8s} {'pauses':>7s} {'paused_s':>9s} "
                   f"{'in_drops':>8s} {'wd_drops':>8s}\n")
            for name, buf, pauses, paused, ind, wdd in self.session.pfc.live():
                if buf or pauses or paused or ind or wdd:
                    output(f"{name:14s} {buf:8d} {pauses:7d} {paused:9.3f} {ind:8d} {wdd:8d}\n")
        self._guard(pfc, line)

    # ---- views ---------------------------------------------------------------

    def do_links(self, line):
        """links [SECONDS]: every link direction's load, queue backlog and drops"""
        def links(args):
            for row in link_table(self.session, float(args[0]) if args else 1.0):
                output(row + "\n")
        self._guard(links, line)

    def do_capture(self, line):
        """capture NODE[:PORT][,...] | capture stop: pcap per interface, in the results dir"""
        def capture(args):
            for name, n in sorted(self._stop_capture().items()):
                output(f"{self.session.dir}/{name}: {n} packets\n")
            if args and args[0] != "stop":
                specs = cap.parse(args[0], self.session.topo)
                self.capture = cap.Capture(self.session, specs,
                                           frame_len=self.session.net.mtu).start()
                output(f"capturing on {len(specs)} interface(s); 'capture stop' ends it\n")
        self._guard(capture, line)


def link_table(session, seconds):
    """Rows: per link direction, Mbit/s over ``seconds``, backlog bytes, drops (window)."""
    q = QueueCounters(session.net)
    try:
        before = q.read()
        time.sleep(seconds)            # the window the rates are measured over
        after = q.read()
    finally:
        q.close()
    names = link_names(session.topo)
    rows = [f"{'link':<18} {'Mbit/s':>9} {'backlog B':>10} {'drops':>7}"]
    for intf, (backlog, drops, sent) in sorted(after.items(),
                                              key=lambda kv: names.get(kv[0], kv[0])):
        if intf not in names:
            continue
        b = before.get(intf, (0, 0, 0))
        rows.append(f"{names[intf]:<18} {(sent - b[2]) * 8 / seconds / 1e6:>9.2f} "
                    f"{backlog:>10} {drops - b[1]:>7}")
    return rows
