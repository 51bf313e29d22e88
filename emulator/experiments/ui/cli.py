"""``emulator ui RESULTS_DIR``: a finished run's page, served like a live one.

The page comes from the directory's files (``live.report_doc``: topology,
results, the recorded series and the fault log), on 127.0.0.1 (or
``--ui-bind``) at a free port with a token; it serves until Ctrl-C.
report.html in the same directory is the same page, opened from disk.
"""

import os
import threading

from emulator.dataplane.system.signals import signals_as_exceptions
from emulator.errors import ConfigError
from emulator.experiments.ui.live import report_doc
from emulator.experiments.ui.server import UiServer
from emulator.report import page


def add_arguments(p):
    p.add_argument("results_dir", metavar="RESULTS_DIR",
                   help="a run's results directory (it has topology.json)")
    p.add_argument("--ui-bind", default="127.0.0.1", metavar="ADDRESS",
                   help="the address to listen on (default 127.0.0.1)")


def main(args, out=print, stop=None):
    """Serve until interrupted (or ``stop``, a threading.Event, is set)."""
    d = args.results_dir
    if not os.path.isfile(os.path.join(d, "topology.json")):
        raise ConfigError("RESULTS_DIR", f"{d}: no topology.json here: name a run's results "
                                         "directory (results/<time>-<tag>, or a drill's "
                                         "drill-<time>/<time>-<tag>)")
    server = UiServer(page.render, args.ui_bind)
    server.hub.doc = report_doc(d)
    # Ctrl-C stops it even where the shell started it with SIGINT ignored (a
    # background job), as it stops run and drill
    with signals_as_exceptions():
        server.start()
        try:
            out(f"ui: {server.url}")
            out("serving the recorded run; Ctrl-C stops")
            stop = stop or threading.Event()
            # woken each second: a SIGINT the kernel hands to the server's thread
            # runs its handler here only once this thread runs Python again
            while not stop.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
    return 0
