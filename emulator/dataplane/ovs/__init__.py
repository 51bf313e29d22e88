"""Open vSwitch: the daemons a fabric's switches run in, and the controller process.

``instances`` starts and stops the run's own ``ovsdb-server`` +
``ovs-vswitchd`` pairs (or reaches the machine's) and gives each an ``Ovs``
handle; ``datapath`` detects which datapath this machine can use and how
Open vSwitch allocates; ``controller_proc`` runs ``python -m controller``
as a child process and waits on its conditions.

May import: ``dataplane.system``, ``dataplane.runstate``, ``dataplane.links``,
``emulator.errors``, ``emulator.fabric``, ``traffic.nic.netns``.
"""
