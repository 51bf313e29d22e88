"""A read-only, token-guarded web server for the page, with server-sent events.

Model.  ``UiServer(bind)`` listens on ``bind`` (127.0.0.1 unless the user
asks, ``--ui-bind``), on a free port the kernel picks, and makes a random
token (``secrets.token_urlsafe``); ``url`` carries it.  Every request must
carry ``?token=...``, else 403.  It answers GET only (anything else: 405),
and nothing it serves changes the fabric:

* ``/``: the page (``emulator.report.page``) with the data so far inlined;
* ``/events``: a ``text/event-stream``: ``doc`` (everything, when a fabric
  is attached or replaced) then one ``sample`` per recorder sample;
* ``/state``: the same data as one JSON document.

It is Python's own ``ThreadingHTTPServer``: the page has one or a few
viewers on this machine, server-sent events need no library (a response that
stays open), and the emulator gains no dependency and no event loop.
``stop()`` ends every stream and closes the socket.
"""

import hmac
import json
import queue
import secrets
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from emulator.errors import ConfigError

KEEPALIVE_S = 5.0


class Hub:
    """The data the page shows, and a queue per open event stream."""

    def __init__(self, render):
        self.render = render              # doc -> the page's HTML
        self.lock = threading.Lock()
        self.doc = {"model": None, "samples": [], "events": []}
        self.version = 0
        self.streams = []
        self.closed = False

    def set_doc(self, doc):
        with self.lock:
            self.doc = doc
            self.version += 1
            self._push(("doc", doc))

    def add(self, sample, events):
        """A recorder sample (or None) and new fault markers."""
        with self.lock:
            if sample is not None:
                self.doc["samples"].append(sample)
            self.doc["events"].extend(events)
            if sample is not None or events:
                self._push(("sample", {"sample": sample, "events": events}))

    def _push(self, item):
        for q in self.streams:
            q.put(item)

    def subscribe(self):
        q = queue.Queue()
        with self.lock:
            q.put(("doc", self.doc))
            self.streams.append(q)
        return q

    def unsubscribe(self, q):
        with self.lock:
            if q in self.streams:
                self.streams.remove(q)

    def close(self):
        with self.lock:
            self.closed = True
            self._push(None)


class Handler(BaseHTTPRequestHandler):
    server_version = "fabric-lab-ui"

    def log_message(self, *args):          # the run's output is not a web log
        pass

    def _authorised(self):
        given = parse_qs(urlsplit(self.path).query).get("token", [""])[0]
        return hmac.compare_digest(given.encode(), self.server.token.encode())

    def _send(self, status, body, ctype="text/plain; charset=utf-8"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if not self._authorised():
            return self._send(403, "403: this page needs the token of the URL the run "
                                   "printed (ui: http://...?token=...)\n")
        hub = self.server.hub
        path = urlsplit(self.path).path
        if path in ("/", "/index.html"):
            with hub.lock:
                html = hub.render(hub.doc, f"events?token={self.server.token}")
            return self._send(200, html, "text/html; charset=utf-8")
        if path == "/state":
            with hub.lock:
                body = json.dumps(hub.doc)
            return self._send(200, body, "application/json")
        if path == "/events":
            return self._stream(hub)
        return self._send(404, "404\n")

    def _refuse(self):
        self._send(405, "405: this server is read-only\n")

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    def _stream(self, hub):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        q = hub.subscribe()
        try:
            while True:
                try:
                    item = q.get(timeout=KEEPALIVE_S)
                except queue.Empty:
                    self.wfile.write(b": keepalive\n\n")
                    self.wfile.flush()
                    continue
                if item is None:
                    return
                kind, data = item
                self.wfile.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return
        finally:
            hub.unsubscribe(q)


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class UiServer:
    """``start()`` listens and serves in a thread; ``stop()`` closes everything."""

    def __init__(self, render, bind="127.0.0.1", port=0):
        self.hub = Hub(render)
        self.bind, self.port = bind, port
        self.token = secrets.token_urlsafe(18)
        self.httpd = self._thread = None

    def start(self):
        try:
            cls = _Server6 if ":" in self.bind else ThreadingHTTPServer
            self.httpd = cls((self.bind, self.port), Handler)
        except (OSError, OverflowError) as e:
            raise ConfigError("--ui-bind", f"cannot listen on {self.bind}: {e}")
        self.httpd.daemon_threads = True
        self.httpd.token, self.httpd.hub = self.token, self.hub
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True,
                                        name="ui-server")
        self._thread.start()
        return self

    @property
    def url(self):
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        return f"http://{host}:{self.port}/?token={self.token}"

    def stop(self):
        self.hub.close()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
