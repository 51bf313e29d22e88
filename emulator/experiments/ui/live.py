"""``--ui`` on run, drill and compare, and report.html in every results directory.

Model.  ``around`` wraps every fabric command: without ``--ui`` nothing
is served; with it one ``LiveView`` serves the page for the whole command
(``args.ui_view``); a command whose fabrics the page does not follow refuses
``--ui`` (``check_command``, exit 2).  When the command ends, every results
directory its Sessions made that has no report.html yet gets one (``pages``:
the sub-commands that draw none of their own).  Each fabric the command builds is ``attach``ed (a
``recorder.Recorder`` samples it and the page redraws; the first one starts
the server, which prints ``ui: URL``) and ``detach``ed before it is torn
down; ``stop()`` (in ``finally``) ends the server.

``write_report(dir, ...)`` saves the recorded series (``series.json``) and
writes ``report.html``, built by ``report_doc`` from the results directory's
files alone (topology.json, results.json, series.json, faults.jsonl), so
``emulator ui DIR`` shows a finished run the same way.
"""

import json
import os

from emulator.dataplane import session as session_mod
from emulator.errors import ConfigError
from emulator.experiments.ui.model import view_model
from emulator.experiments.ui.recorder import Recorder, marker
from emulator.experiments.ui.server import UiServer
from emulator.report import page
from emulator.report.summary import summary

FLOW_BIN_MS = 10


def add_arguments(p):
    """``--ui`` and ``--ui-bind`` (run, drill, compare)."""
    p.add_argument("--ui", action="store_true",
                   help="serve a live page of the fabric (links by load, cuts, queues, drops, "
                        "faults) on 127.0.0.1 at a free port; prints 'ui: URL' (with its token)")
    p.add_argument("--ui-bind", default="127.0.0.1", metavar="ADDRESS",
                   help="with --ui: the address to listen on (default 127.0.0.1; anything "
                        "else shows the fabric to whoever reaches that address with the token)")


SERVED = ("run", "drill", "compare")      # the commands whose fabrics the page follows


def check_command(command):
    """``--ui`` on a command whose fabrics the page does not follow: one clear error,
    before any option is read further or anything is built."""
    if command not in SERVED:
        raise ConfigError("--ui", f"not with {command}: the live page follows run, drill "
                                  "under probes and compare of load-balancing modes "
                                  "(report.html is written either way)")


def check_supported(command, spec):
    """``--ui`` where the page is not drawn: one clear error before anything is built."""
    check_command(command)
    if command == "compare" and spec.workload.startswith("simai:"):
        raise ConfigError("--ui", "not with compare --workload simai:FILE: the live page "
                                  "follows compare of load-balancing modes on collectives")


class LiveView:
    """The live page of a command: one server, one recorder per attached fabric."""

    def __init__(self, bind, out=print):
        self.server = UiServer(page.render, bind)
        self.out = out
        self.recorder = None
        self.doc = None

    @classmethod
    def from_spec(cls, spec, out=print):
        """None without ``--ui``; checked before anything is built."""
        if not spec.ui:
            return None
        UiServer(page.render, spec.ui_bind).start().stop()     # can it listen there?
        return cls(spec.ui_bind, out)

    def start(self):
        self.server.start()
        self.out(f"ui: {self.server.url}")
        return self

    def attach(self, session, title=None):
        """Show ``session``'s fabric and start sampling it (the server starts with the
        first fabric, every argument checked by then)."""
        if self.server.httpd is None:
            self.start()
        self.detach()
        model = view_model(session.topo)
        self.recorder = Recorder(session, model)
        self.doc = {"model": model, "samples": [], "events": [], "flows": [],
                    "title": title or f"{model['fabric']} (run {model['run']})",
                    "t0_ns": self.recorder.t0_ns}
        self.server.hub.set_doc(self.doc)
        self.recorder.listeners.append(self.server.hub.add)
        self.recorder.start()

    def set_flows(self, flows):
        """A drill's probe flows ([{name, path, crosses}]) drawn along their paths."""
        if self.doc is not None:
            self.server.hub.set_doc(dict(self.server.hub.doc, flows=flows))

    def detach(self):
        """Stop sampling; returns what was recorded ({t0_ns, samples, events}) or None."""
        if self.recorder is None:
            return None
        rec, self.recorder = self.recorder, None
        rec.stop()
        samples, events = rec.snapshot()
        return {"t0_ns": rec.t0_ns, "samples": samples, "events": events,
                "recorder": {"period_s": rec.period_s, "samples": len(samples),
                             "cpu_s": round(rec.cpu_s, 3)}}

    def stop(self):
        try:
            self.detach()
        finally:
            self.server.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


def around(command_main, name, spec, args, out=print):
    """Run ``command_main(spec, args, out)`` (a command of experiments.commands) with the
    page of ``--ui`` as ``args.ui_view`` (None without), stopped when the command ends."""
    if spec.ui:
        check_supported(name, spec)
    view = LiveView.from_spec(spec, out)
    args.ui_view = view
    first = len(session_mod.MADE)
    try:
        return command_main(spec, args, out)
    finally:
        try:
            if view is not None:
                view.stop()
        finally:
            pages(session_mod.MADE[first:], out)


def pages(dirs, out=None):
    """report.html into each results directory of ``dirs`` the command left without
    one (a sub-command that draws no page of its own: the fabric, its faults and its
    summary, from the directory's files alone)."""
    for d in dirs:
        if os.path.exists(os.path.join(d, "topology.json")) and \
                not os.path.exists(os.path.join(d, "report.html")):
            write_report(d, out=out)


def flow_series(timelines, t0_ns, bin_ms=FLOW_BIN_MS):
    """A drill's per-flow timelines ({flow: (t0_ns, bytes per ms)}) as Mbit/s in
    ``bin_ms`` bins on the page's time axis (s since ``t0_ns``)."""
    if not timelines:
        return None
    start = min(t for t, _ in timelines.values())
    n = max((t - start) // 1_000_000 + len(tl) for t, tl in timelines.values())
    ts = [round((start + i * 1_000_000 - t0_ns) / 1e9, 3) for i in range(0, n, bin_ms)]
    lines = {}
    for key, (t, tl) in sorted(timelines.items()):
        shift = (t - start) // 1_000_000
        full = [0] * shift + list(tl) + [0] * (n - shift - len(tl))
        lines[key] = [round(sum(full[i:i + bin_ms]) * 8 / (bin_ms / 1e3) / 1e6, 3)
                      for i in range(0, n, bin_ms)]
    return {"t": ts, "lines": lines}


def write_report(d, recorded=None, flows=None, timelines=None, summary=None, out=None):
    """series.json and report.html into results directory ``d``; never fails a run.
    ``summary``: lines of text for a run without results.json (a drill's repeats)."""
    try:
        rec = recorded or {}
        t0 = rec.get("t0_ns") or _first_event_ns(d, timelines)
        series = {"t0_ns": t0, "recorder": rec.get("recorder"),
                  "samples": rec.get("samples", []), "flows": flows or [],
                  "flow_series": flow_series(timelines, t0) if timelines else None,
                  "summary": summary or []}
        with open(os.path.join(d, "series.json"), "w", encoding="utf-8") as f:
            json.dump(series, f, separators=(",", ":"))
        return page.write(os.path.join(d, "report.html"), report_doc(d))
    except Exception as e:          # noqa: BLE001 - a page never fails the run
        if out is not None:
            out(f"report.html not written: {type(e).__name__}: {e}")
        return None


def _first_event_ns(d, timelines):
    if timelines:
        return min(t for t, _ in timelines.values())
    evs = _fault_log(d)
    return evs[0]["t_ns"] if evs else 0


def _fault_log(d):
    try:
        with open(os.path.join(d, "faults.jsonl"), encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def report_doc(d):
    """The page's data from results directory ``d``'s files."""
    with open(os.path.join(d, "topology.json"), encoding="utf-8") as f:
        topo = json.load(f)
    series = {}
    if os.path.exists(os.path.join(d, "series.json")):
        with open(os.path.join(d, "series.json"), encoding="utf-8") as f:
            series = json.load(f)
    lines = series.get("summary", [])
    if os.path.exists(os.path.join(d, "results.json")):
        with open(os.path.join(d, "results.json"), encoding="utf-8") as f:
            results = json.load(f)
        try:
            lines = summary(results, topo).splitlines()
        except (KeyError, TypeError, ValueError) as e:
            lines = [f"(no summary: {type(e).__name__}: {e})"]
    model = view_model(topo)
    t0 = series.get("t0_ns") or 0
    return {"model": model, "samples": series.get("samples", []),
            "events": [marker(ev, t0) for ev in _fault_log(d)],
            "flows": series.get("flows", []), "flow_series": series.get("flow_series"),
            "title": f"{model['fabric']} (run {model['run']})", "summary": lines}


class attached:
    """``with Session(...) as s, attached(view, s) as page:`` the fabric on the page
    while the block runs (``view`` None: nothing); ``page.recorded`` after it.  With
    ``report=True`` report.html is written as the block ends (the fabric still up),
    with what the block put in ``page``: a drill's ``flows`` (``page.show_flows``),
    its first repeat's ``timelines`` and its ``repeats``."""

    def __init__(self, view, session, title=None, report=False):
        self.view, self.session, self.title, self.report = view, session, title, report
        self.recorded = self.timelines = None
        self.flows, self.repeats = [], []

    @classmethod
    def of(cls, args, session, title):
        """The page of ``args.ui_view`` (``around``), report.html at the end."""
        return cls(getattr(args, "ui_view", None), session, title, report=True)

    def show_flows(self, paths, crossing):
        """A drill's probe flows ({flow: path}), drawn along their paths; ``crossing``
        ({flow: whether it crosses the fault}) returned."""
        self.flows = [{"name": k, "path": p, "crosses": crossing.get(k)}
                      for k, p in paths.items()]
        if self.view is not None:
            self.view.set_flows(self.flows)
        return crossing

    def keep(self, timelines):
        """A drill's per-flow timelines for report.html; True."""
        self.timelines = timelines
        return True

    def __enter__(self):
        if self.view is not None:
            self.view.attach(self.session, self.title)
        return self

    def __exit__(self, *exc):
        if self.view is not None:
            self.recorded = self.view.detach()
        if self.report:
            write_report(self.session.dir, self.recorded, self.flows, self.timelines,
                         [repeat_line(r) for r in self.repeats], out=self.view and
                         self.view.out)
        return False


def repeat_line(r):
    """One line of a drill's repeat for the page (its verdict, its worst crossing flow)."""
    worst = max((f.get("loss_window_ms") or 0 for f in r.get("flows", {}).values()
                 if f.get("crosses")), default=0)
    return (f"repeat {r.get('repeat', 0) + 1}: worst loss window {worst:g} ms over the "
            f"crossing flows, {r.get('fidelity', {}).get('verdict', '?')}")
