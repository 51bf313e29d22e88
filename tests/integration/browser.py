"""A headless Chromium for the tests: Debian's ``chromium`` driven through
``chromedriver`` (package ``chromium-driver``) over the W3C WebDriver protocol.

The tests need five verbs (open a session, go to a URL, run a script, take a
screenshot, quit); the protocol is JSON over HTTP, so ``urllib`` speaks it and
no client library is needed.  ``Browser()`` starts chromedriver on a free
127.0.0.1 port and one headless browser; ``close()`` ends both.
"""

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    def __init__(self, timeout=30):
        self.port = _free_port()
        # the profile and Chromium's scratch directories in one place, removed at close
        self.tmp = tempfile.mkdtemp(prefix="fabric-lab-browser-")
        self.proc = subprocess.Popen([DRIVER, f"--port={self.port}"],
                                     env={**os.environ, "TMPDIR": self.tmp},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        self.session = None
        try:
            deadline = time.monotonic() + timeout
            while not self._ready():
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"chromedriver did not start on port {self.port}")
                time.sleep(0.1)
            caps = {"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": CHROMIUM, "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--window-size=1400,1000",
                    f"--user-data-dir={self.tmp}/profile"]}}}}
            self.session = self._call("POST", "/session", caps, timeout=60)["sessionId"]
        except BaseException:
            self.close()
            raise

    def _ready(self):
        try:
            return self._call("GET", "/status", timeout=2)["ready"]
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def _call(self, method, path, body=None, timeout=30):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read())["value"]
        except urllib.error.HTTPError as e:        # the driver says why (a script error...)
            raise RuntimeError(f"webdriver {method} {path}: {e.code}: "
                               f"{e.read()[:2000].decode(errors='replace')}") from None

    def get(self, url):
        self._call("POST", f"/session/{self.session}/url", {"url": url}, timeout=60)

    def js(self, script, *args):
        """The value of ``script`` (a function body: ``return ...``) in the page."""
        return self._call("POST", f"/session/{self.session}/execute/sync",
                          {"script": script, "args": list(args)})

    def wait(self, script, timeout, *args, every=0.05):
        """Poll ``script`` until it returns something true; that value, or None."""
        deadline = time.monotonic() + timeout
        while True:
            v = self.js(script, *args)
            if v or time.monotonic() > deadline:
                return v
            time.sleep(every)

    def screenshot(self, path):
        png = self._call("GET", f"/session/{self.session}/screenshot")
        with open(path, "wb") as f:
            f.write(base64.b64decode(png))
        return path

    def close(self):
        try:
            if self.session is not None:
                self._call("DELETE", f"/session/{self.session}", timeout=30)
        except (OSError, urllib.error.URLError):
            pass
        finally:
            self.session = None
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            shutil.rmtree(self.tmp, ignore_errors=True)
