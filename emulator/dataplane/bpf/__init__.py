"""The emulator's eBPF programs: C sources, their build, and their loading.

The programs are restricted C (``*.bpf.c``, with ``<linux/bpf.h>`` and
libbpf's ``<bpf/bpf_helpers.h>``), one source per family:

- ``ecnq.bpf.c``: ECN marking at dequeue (``ecnq_in`` tc egress,
  ``ecnq_out`` XDP; model in dataplane.lossless.ecnq);
- ``pfc.bpf.c``: PFC's traffic classes and per-ingress buffer accounting
  (``pfc_egress`` tc egress, ``pfc_ingress`` XDP; model in
  dataplane.lossless.pfc);
- ``ecn_mark.h``: the RED-profile CE marking both share;
- ``ar.bpf.c``: adaptive routing in the switch's data plane (``ar_ingress``
  XDP, ``ar_egress`` tc egress; model in dataplane.adaptive);
- ``ugal.bpf.c``: a dragonfly's UGAL at the source router (``ugal_ingress``
  XDP, ``ugal_egress`` tc egress; model in dataplane.adaptive.ugal);
- ``flows.bpf.c``: a link's RoCEv2 bytes per source and destination, counted
  where they arrive (``flows_in`` tc ingress; dataplane.observe.flows);
- ``ar_common.h``: what those two share: the port, control and flowlet maps
  and the steps of a decision (queue, route, flowlet slot, accounting);
- ``parse.h``: the one parse of Ethernet / IPv4 / UDP / RoCEv2 BTH, each
  header bounds-checked before it is read;
- ``csum.h``: the IPv4 header checksum kept valid when the TOS byte changes
  (incremental, RFC 1624; in line for XDP, the kernel's helper on tc);
- ``chain.h``: one XDP program per interface: where PFC or dequeue marking
  holds the hook, its program hands each frame it passes on to the next
  stage's (adaptive routing) by a tail call through the run's program array.

Every header compiles on its own.  ``build.build()`` compiles the programs
with clang (``-O2 -g -target bpf``, every warning an error: ``-Wall -Wextra
-Werror``) into ``build/`` when an object is missing or stale (its source, a
header or the flags changed; ``python -m emulator.dataplane.bpf build``; the
loader builds on demand).  ``loader.load`` opens an object with
libbpf for each port: the port's constants go into ``.rodata`` (a ``const
volatile`` struct, so the verifier prunes what they rule out), the map the
object declares is replaced by the run's own, and the program fds come back
to be attached.  ``maps`` keeps the ``bpf(2)`` calls made directly: the run's
array map (``Map``, F_MMAPABLE for the pause agent) and ``BPF_PROG_TEST_RUN``
(``test_run``), which is how the programs are tested.  Nothing is pinned.

Needs the Debian packages ``clang`` and ``libbpf-dev`` (``./setup.sh``
installs them); without them a load raises ``EnvironmentProblem`` saying so.

May import: ``emulator.errors`` and ``dataplane.system`` (clang runs through it).
"""

from emulator.dataplane.bpf import build
from emulator.dataplane.bpf.loader import CHAIN_MAP, Layout, Programs, load
from emulator.dataplane.bpf.maps import F_MMAPABLE, Map, prog_array, test_run, test_run_skb

__all__ = ["CHAIN_MAP", "F_MMAPABLE", "Layout", "Map", "Programs", "build", "load",
           "prog_array", "test_run", "test_run_skb"]
