"""The controller process: os-ken with our app (``controller.osken_app``) or a user's.

``run`` loads the apps into os-ken's app manager, listens on 127.0.0.1 only
(and, with ``unix``, on a unix socket: switches in other network namespaces
reach it through the file), logs ``controller listening on HOST:PORT`` once
the listener is up (the launcher's ready signal), exits 0 on SIGTERM, and makes a user app's handler
exception fatal and loud, like ours (os-ken would lose it).  With
``osken_app`` and ``ofcodec`` the only modules that import os_ken.
"""

import logging
import os
import signal
import socket
import sys

from os_ken import cfg
from os_ken.base import app_manager
from os_ken.lib import hub

from . import topology as topology_mod
from .handlers import fatal

LOG = logging.getLogger(__package__)
APP = "controller.osken_app"


def _listening(host, port):
    """True when a TCP socket listens on host:port (from /proc/net/tcp)."""
    a, b, c, d = (int(x) for x in host.split("."))
    want = "%02X%02X%02X%02X:%04X" % (d, c, b, a, port)
    with open("/proc/net/tcp", encoding="ascii") as f:
        return any(line.split()[1] == want and line.split()[3] == "0A" for line in f.readlines()[1:])


def _announce_ready(host, port):
    while not _listening(host, port):
        hub.sleep(0.05)
    LOG.info("controller listening on %s:%d", host, port)


class _UnixStream:
    """An accepted unix-socket connection as os-ken's ``Datapath`` expects a TCP one:
    it sets TCP_NODELAY, which a unix socket has no use for (and refuses)."""

    def __init__(self, sock):
        self._sock = sock

    def setsockopt(self, level, option, value):
        if level == socket.IPPROTO_TCP:
            return None
        return self._sock.setsockopt(level, option, value)

    def __getattr__(self, name):
        return getattr(self._sock, name)


def _serve_unix(path):
    """Accept OpenFlow connections on the unix socket ``path`` (os-ken's own server
    loop listens on TCP only)."""
    from os_ken.controller.controller import datapath_connection_factory
    if os.path.exists(path):
        os.unlink(path)

    def handle(sock, addr):
        datapath_connection_factory(_UnixStream(sock), ("unix", path))
    server = hub.StreamServer((path, 0), handle)
    os.chmod(path, 0o600)
    LOG.info("controller listening on unix:%s", path)
    server.serve_forever()


def _fatal_handlers(cls):
    """Wrap a loaded app class's own @set_ev_cls handlers with ``fatal`` (keeps ``callers``)."""
    if cls.__module__.startswith("os_ken."):
        return
    for name, fn in list(vars(cls).items()):
        if callable(fn) and hasattr(fn, "callers"):
            setattr(cls, name, fatal(fn))


def run(topology_path, host="127.0.0.1", port=6653, apps=None, unix=None, tls=None):
    """Run os-ken with our app (or ``apps``, module names or .py paths), also on the
    unix socket ``unix`` if given; blocks.  ``tls``: (key, certificate, CA
    certificate) paths: OpenFlow over TLS only, from switches the CA signed."""
    topology_mod.load(topology_path)          # fail before listening if it is bad
    hub.patch(thread=False)
    if tls:
        key, cert, ca = tls
        args = ["--ofp-listen-host", host, "--ofp-ssl-listen-port", str(port),
                "--ctl-privkey", key, "--ctl-cert", cert, "--ca-certs", ca]
    else:
        args = ["--ofp-listen-host", host, "--ofp-tcp-listen-port", str(port)]
    cfg.CONF(args=args, project="os_ken")

    def on_term(signum, frame):
        LOG.info("SIGTERM: exiting")
        logging.shutdown()
        os._exit(0)
    signal.signal(signal.SIGTERM, on_term)

    mgr = app_manager.AppManager.get_instance()
    mgr.load_apps(list(apps) if apps else [APP])
    if apps:
        # os-ken loses a user app's handler exception (nothing logged, the app's
        # event loop stalls): make it fatal and loud, like ours.
        for cls in mgr.applications_cls.values():
            _fatal_handlers(cls)
    services = mgr.instantiate_apps(**mgr.create_contexts())
    if unix:
        services.append(hub.spawn(_serve_unix, unix))
    ready = hub.spawn(_announce_ready, host, port)
    try:
        hub.joinall(services)
    finally:
        ready.kill()
        mgr.close()
    sys.exit(0)
