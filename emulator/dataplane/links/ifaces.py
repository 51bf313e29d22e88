"""Linux plumbing of a fabric's interfaces and nodes: offloads, sysctls, the
run's interface group, and the teardown of Mininet nodes and veths."""

import ctypes
import fcntl
import os
import signal
import socket
import struct

from emulator.dataplane.runstate import tag_of_name
from emulator.dataplane.system.netlink import ENODEV, Netlink, NetlinkError

SIOCETHTOOL, ETHTOOL_STXCSUM = 0x8946, 0x17


def tx_checksum_off(ifname):
    """``ethtool -K IFNAME tx off`` (its ioctl: every TX checksum feature off) in the
    calling thread's network namespace; OSError if the kernel refuses."""
    value = ctypes.create_string_buffer(struct.pack("II", ETHTOOL_STXCSUM, 0))
    ifreq = struct.pack("16sP", ifname.encode(), ctypes.addressof(value)).ljust(40, b"\0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)


def write_sysctl(key, value):
    """Set ``/proc/sys/KEY`` as the calling thread's namespace sees it (net/... keys
    are per namespace); a key compiled out of the kernel (IPv6) is skipped."""
    try:
        with open(f"/proc/sys/{key}", "w") as f:
            f.write(value)
    except FileNotFoundError:
        pass


def quiet_ipv6(ifname):
    """No IPv6 on a switch port: its router solicitations would only hit table-miss."""
    try:
        with open(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6", "w") as f:
            f.write("1")
    except FileNotFoundError:     # IPv6 compiled out: nothing to quiet
        pass


def link_group(tag):
    """The interface group (IFLA_GROUP) of run ``tag``'s root-namespace veths: "FL"
    and the tag, so one RTM_DELLINK removes them all (``delete_interfaces``)."""
    return 0x464C0000 | int(tag, 16)


def terminate_nodes(nodes):
    """End the Mininet nodes' shells: SIGHUP to all first, then reap each (one at a
    time, each shell's exit was waited for before the next was signalled)."""
    errors = []
    for node in nodes:
        try:
            node.unmountPrivateDirs()
            if node.shell is not None and node.shell.poll() is None:
                os.killpg(node.shell.pid, signal.SIGHUP)
        except ProcessLookupError:
            pass
        except Exception as e:    # a half-started node: keep going
            errors.append(f"{node.name}: {e}")
    for node in nodes:
        try:
            node.cleanup()        # closes its pty and waits for its shell
        except Exception as e:
            errors.append(f"{node.name}: {e}")
    return errors


def delete_interfaces(tag):
    """Delete every root-namespace interface named for run ``tag``.

    Its veths carry the run's group (``link_group``): when every interface of that
    group is named for the run, one request deletes them all, in one batch of the
    kernel's (one by one, each paid its own RCU grace period: 768 links took
    ~12 s on 2 cores).  Whatever is left (a group shared with a foreign
    interface, names made by other modules) goes one at a time."""
    errors = []
    group = link_group(tag)
    with Netlink() as nl:
        links = nl.interfaces()
        grouped = [name for name, g, _ in links if g == group]
        if grouped and all(tag_of_name(name) == tag for name in grouped):
            try:
                nl.link("del", group=group)
            except NetlinkError as e:
                errors.append(f"delete interface group {group:#x}: {e}")
            links = nl.interfaces()
        for name, _, index in links:
            if tag_of_name(name) == tag:
                try:
                    nl.link("del", index=index)
                except NetlinkError as e:
                    if e.code != ENODEV:   # its veth peer went first
                        errors.append(f"delete {name}: {e}")
    return errors
