"""The system layer: every call the emulator makes into Linux and Open vSwitch
through a process or a netlink socket, and the signals around them.

- ``proc``: one-shot commands (``run``: checked, with a timeout; ``attempt``:
  the exit status returned) and ``Child``, the one class of a child process
  (start with environment, directory, own session; wait until ready; stop:
  signal, wait, SIGKILL, reap, exit status);
- ``netlink``: pyroute2's verbs (links, addresses, routes, qdiscs, lookups)
  on a socket made inside a namespace (``/proc/<pid>/ns/net``), each call
  with Ctrl-C held until it is done, and ``ip route get``;
- ``nlmsg``: the framing of raw netlink replies (messages, attributes,
  errors) the dumps and ``fibmon`` decode;
- ``fibmon``: a router's FIB and links watched from rtnetlink events;
- ``tc`` (netem), ``ovs`` (ovs-vsctl, ovs-ofctl, ovs-appctl, ovsdb-tool)
  and ``nft`` (the run's nftables tables): the tools' checked calls;
- ``signals``: SIGINT/SIGTERM/SIGHUP as exceptions, and their holding while
  a teardown or a netlink change runs.

No other module of the emulator imports ``subprocess`` or pyroute2
(tests/unit/test_architecture.py checks it).

May import: ``emulator.errors``, ``traffic.nic.netns`` (entering a
namespace), the standard library and pyroute2.  Nothing else of ``dataplane``.
"""
