"""Which Open vSwitch datapath this machine can use, detected, not assumed.

The kernel datapath needs the ``openvswitch`` kernel module; many VMs have it,
this project's CI machines do not (PLATFORM.md).  Without it, bridges use the
userspace datapath (``datapath_type=netdev``): every port is served by one
ovs-vswitchd thread, and hosts must turn TX checksum offload off.
"""

import functools
import os
import re

from emulator.dataplane.system import proc
from emulator.errors import EnvironmentProblem, RunFailed


def kernel_module_loaded():
    return os.path.isdir("/sys/module/openvswitch")


def try_load_kernel_module():
    """modprobe openvswitch; False where modules cannot be loaded."""
    if kernel_module_loaded():
        return True
    try:
        proc.run(["modprobe", "openvswitch"], timeout=20)
    except RunFailed:
        return False
    return kernel_module_loaded()


def detect(requested="auto"):
    """Return (datapath_type, reason): 'system' (kernel) or 'netdev' (userspace)."""
    if requested == "user":
        return "netdev", "userspace datapath requested"
    if try_load_kernel_module():
        return "system", "openvswitch kernel module loaded"
    if requested == "kernel":
        raise EnvironmentProblem(
            "--datapath kernel: the openvswitch kernel module is not available "
            "(modprobe openvswitch failed); use --datapath auto or user")
    return "netdev", "openvswitch kernel module not available"


# ovs-vswitchd (userspace datapath) sends the frames of every port through ONE
# AF_PACKET socket.  A frame waiting in a switch port's shaper counts against
# that socket's send buffer until the shaper releases it, and a full buffer
# makes OVS drop frames with no counter anywhere.  The buffer is
# net.core.wmem_default when the daemon opens the socket (lazily, at its first
# send) and never changes after: 208 kB, ~90 queued frames for the whole fabric.
MIN_SEND_BUFFER = 8 << 20


def ovs_send_buffer():
    """(bytes, where) of the buffer ovs-vswitchd sends with, or of the one it will get."""
    try:
        out = proc.run(["ss", "-0", "-m", "-p"], timeout=10)
    except RunFailed:
        out = ""
    for line in out.splitlines():
        if "ovs-vswitchd" in line:
            m = re.search(r"tb(\d+)", line)
            if m:
                return int(m.group(1)), "ovs-vswitchd's packet socket"
    with open("/proc/sys/net/core/wmem_default") as f:
        return int(f.read()), "net.core.wmem_default (ovs-vswitchd has not opened its socket yet)"


def check_send_buffer():
    """The send buffer's size; EnvironmentProblem if switch-port shaping would lose
    frames silently."""
    size, where = ovs_send_buffer()
    if size < MIN_SEND_BUFFER:
        raise EnvironmentProblem(
            f"{where} is {size // 1024} kB: on the userspace datapath, frames queued in "
            f"switch-port shapers would be dropped silently; run sudo ./setup.sh, which sets "
            f"net.core.wmem_default to 64 MB and restarts Open vSwitch if no other bridges exist")
    return size


def queue_capacity_note(topo, queue_ms, send_buffer):
    """A note when the switch ports' queues together can hold more than the frames
    ovs-vswitchd's send buffer carries (a queued 4 KiB frame holds about twice
    its size of it); None when they cannot."""
    held = sum(p["rate_bps"] / 8 * queue_ms / 1000 for sw in topo["switches"]
               for p in sw["ports"])
    carried = send_buffer / 2
    if held <= carried:
        return None
    return (f"note: the switch ports' queues ({queue_ms:g} ms each) can hold "
            f"{held / 1e6:.0f} MB, Open vSwitch's send buffer carries about "
            f"{carried / 1e6:.0f} MB of queued frames across the fabric: frames beyond "
            "that are lost uncounted (the fidelity verdict counts them)")


# netdev-linux (the userspace datapath's veth ports) allocates a whole burst of 32
# MTU-sized buffers for every receive on every port and frees the ones it did not
# fill: about 124,000 mallocs and frees a second in this project's default run.
# With glibc's malloc that was a third of the machine's CPU; with tcmalloc's
# per-thread caches ovs-vswitchd used 34-40 % of a core instead of 63-65 %
# (PLATFORM.md).  ``setup.sh`` installs it and starts the machine's Open vSwitch
# with it; the run's own instances get it here.
ALLOCATOR = "libtcmalloc_minimal.so.4"


@functools.lru_cache(maxsize=1)
def allocator_path():
    """tcmalloc's path from the dynamic linker's cache, or None if not installed."""
    try:
        out = proc.run(["ldconfig", "-p"], timeout=10)
    except RunFailed:
        return None
    for line in out.splitlines():
        name, _, path = line.strip().partition(" => ")
        if name.split(" ")[0] == ALLOCATOR and os.path.exists(path):
            return path
    return None


def allocator_env():
    """The environment that runs an ovs-vswitchd on tcmalloc ({} without it)."""
    path = allocator_path()
    return {"LD_PRELOAD": path} if path else {}


def vswitchd_allocator(pid):
    """'tcmalloc' if ovs-vswitchd ``pid`` has it mapped, 'malloc' (glibc's) if not,
    None if the process is gone."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "tcmalloc" if "libtcmalloc" in f.read() else "malloc"
    except OSError:
        return None


def allocator_note(allocator):
    """A note when the machine's ovs-vswitchd allocates (``vswitchd_allocator``) with
    glibc's malloc."""
    if allocator != "malloc":
        return None
    return ("note: the machine's ovs-vswitchd allocates with glibc's malloc, which costs "
            "it about 1.7 times the CPU: run sudo ./setup.sh, which starts Open vSwitch "
            "with tcmalloc (restarting it if no other bridges exist)")
