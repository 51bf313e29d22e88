"""How the controller's os-ken handlers fail and log: loudly, never swallowed."""

import functools
import logging
import os

LOG = logging.getLogger(__package__)


class _OfctlStrayReplies(logging.Filter):
    """Drop os-ken ofctl's "unknown error xid" for replies it never asked for.

    Once ofctl has sent a port-desc request it takes every PortDescStatsReply,
    including the one os-ken's own handshake requests from a switch that
    connects later, and logs that reply's xid as an "unknown error xid" (seen
    on every fabric with more than a handful of switches). Real OpenFlow
    errors are logged by ``FabricController.error`` as OFP-ERROR.
    """

    def filter(self, record):
        return not str(record.msg).startswith("unknown error xid")


logging.getLogger("OfctlService").addFilter(_OfctlStrayReplies())


def _die(what):
    """Log loudly and end the process: a broken controller must not look alive."""
    LOG.critical("CONTROLLER-EXCEPTION in %s", what, exc_info=True)
    logging.shutdown()
    os._exit(1)


def fatal(handler):
    """Make an exception in an os-ken handler fatal instead of swallowed."""
    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except Exception:          # noqa: BLE001 - re-raised as process exit
            _die(handler.__name__)
    return wrapper
