"""The Mininet nodes of a fabric: hosts and switches whose processes carry the
run's tag, a switch whose shell runs where its ports are, links made elsewhere."""

from mininet.link import Link
from mininet.node import Host, OVSSwitch

from emulator.dataplane.ovs import instances as ovs_instances


class _Tagged:
    """A Mininet node whose processes (its shell, ``popen``) carry the run's tag.

    Mininet starts them with ``Popen`` and our environment; ``env`` given to
    the node is passed to each instead (the tag lets ``emulator clean`` find them).
    """

    def __init__(self, name, env=None, **params):
        self._env = env
        super().__init__(name, **params)

    def _popen(self, cmd, **params):
        if self._env is not None:
            params.setdefault("env", self._env)
        return super()._popen(cmd, **params)


class FabricHost(_Tagged, Host):
    """A Mininet host whose processes carry the run's tag."""


class FabricSwitch(_Tagged, OVSSwitch):
    """An OVS bridge configured by ``FabricNet`` in one checked transaction.

    Mininet's own start/stop run unchecked ovs-vsctl commands per switch; here
    they are no-ops and the node keeps its fabric name (``leaf1``) for the CLI
    while the bridge has the run's name (``self.bridge``).
    """

    def __init__(self, name, bridge=None, ovs=ovs_instances.SYSTEM, **params):
        self.ovs = ovs          # before Node.__init__: it starts the shell
        super().__init__(name, **params)
        self.bridge = bridge

    def startShell(self, mnopts=None):
        """The shell runs where the switch's ports are: its instance's namespace."""
        pid = self.ovs.holder_pid
        super().startShell(mnopts if pid is None else f"-cda{pid}")

    def start(self, controllers):
        pass

    def stop(self, deleteIntfs=True):
        pass

    def dpctl(self, *args):
        return self.cmd("ovs-ofctl", "-O", "OpenFlow15", args[0],
                        self.ovs.target(self.bridge), *args[1:])


class FabricLink(Link):
    """A Mininet link whose veth pair was already made over netlink."""

    @staticmethod
    def makeIntfPair(*args, **kwargs):
        pass
