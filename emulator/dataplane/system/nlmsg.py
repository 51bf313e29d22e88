"""Walking raw netlink replies: the messages of one recv(), their attributes.

The dumps read on a plain netlink socket (``shaping.QdiscReader``'s qdiscs,
``reach``'s neighbour entries) decode only what they need; this is the
framing they share (linux/netlink.h: 4-byte aligned headers and attributes).
"""

import os
import struct

NLMSG = struct.Struct("=IHHII")         # len, type, flags, seq, pid
RTA = struct.Struct("=HH")              # rta_len, rta_type
NLMSG_ERROR, NLMSG_DONE = 2, 3


def messages(buf):
    """(type, body offset, end offset) of every whole message in ``buf``."""
    off = 0
    while off + NLMSG.size <= len(buf):
        length, mtype, _, _, _ = NLMSG.unpack_from(buf, off)
        if length < NLMSG.size:
            return
        yield mtype, off + NLMSG.size, off + length
        off += (length + 3) & ~3


def error_of(buf, body, what):
    """The errno of an NLMSG_ERROR body (0: an ack) and an OSError naming ``what``."""
    err = -struct.unpack_from("=i", buf, body)[0]
    return err, OSError(err, f"{what}: {os.strerror(err)}") if err else None


def attrs(buf, off, end):
    """(type, start, stop) of the netlink attributes in buf[off:end]."""
    while off + RTA.size <= end:
        length, kind = RTA.unpack_from(buf, off)
        if length < RTA.size:
            break
        yield kind & 0x3FFF, off + RTA.size, off + length
        off += (length + 3) & ~3
