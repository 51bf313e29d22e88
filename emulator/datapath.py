"""Which Open vSwitch datapath this machine can use, detected, not assumed.

The kernel datapath needs the ``openvswitch`` kernel module; many VMs have it,
this project's CI machines do not (PLATFORM.md).  Without it, bridges use the
userspace datapath (``datapath_type=netdev``): every port is served by one
ovs-vswitchd thread, and hosts must turn TX checksum offload off.
"""

import os

from emulator import proc
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
