"""Command-line options that mean the same on every command that measures traffic."""

import argparse

from emulator.errors import ConfigError
from emulator.experiments.spec import ccparams
from emulator.experiments.spec import uet as uet_spec
from lab.modes import (
    CC,
    LB,
    Control,
    Delivery,
    EcnAt,
    EvPolicy,
    Failover,
    Peering,
    Placement,
    Transport,
)
from traffic.roce.frames import ROCE_MTUS
from traffic.uet.layout import TRIM_BYTES

LB_MODES = LB.names()               # --lb, compare --modes (lab.modes.LB)
FAILOVER_MODES = Failover.names()   # --failover


def nic_lb(mode):
    """The NICs' side of load-balancing ``mode``: their path entropy, and whether
    responders place packets out of order (switches that move a flow mid-burst
    reorder, as spraying does: RoCE NICs with adaptive-routing support accept it)."""
    mode = LB(mode)
    return {"entropy": str(mode.entropy), "ooo": mode.reorders}


def add_control_args(p, several=False, bfd=True):
    """``--control`` (openflow|bgp; ``several``: a comma list shown side by side),
    ``--peering`` and, unless the command has its own, ``--bfd`` (docs/bgp.md)."""
    if several:
        p.add_argument("--control", default=None, metavar="openflow|bgp[,...]",
                       help="the switches' control plane: openflow (OVS bridges and the "
                            "controller; default, or the fabric file's control:), bgp "
                            "(Linux routers running FRR: eBGP, BFD, kernel ECMP), or a "
                            "comma list to compare side by side")
    else:
        p.add_argument("--control", choices=Control.names(), default=None,
                       help="the switches' control plane: openflow (OVS bridges and the "
                            "controller; default, or the fabric file's control:) or bgp "
                            "(Linux routers running FRR: eBGP on every link, BFD, kernel "
                            "ECMP; docs/bgp.md)")
    p.add_argument("--peering", choices=Peering.names(), default=Peering.default(),
                   help="--control bgp: a session per link over its /31 (numbered, "
                        "default) or over IPv6 link-local addresses (unnumbered, RFC 8950)")
    if bfd:
        p.add_argument("--bfd", default=None, metavar="INTERVALxMULT",
                       help="--control bgp: BFD on every session at INTERVAL ms, down after "
                            "MULT missed packets (default 300x3, FRR's defaults)")


def parse_controls(text, where="--control"):
    """``--control openflow,bgp`` -> [Control]; None -> [the default]."""
    if text is None:
        return [None]
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(Control.parse(part, "control"))
        except ValueError as e:
            raise ConfigError(where, str(e)) from None
    if not out:
        raise ConfigError(where, f"{text!r}: openflow, bgp or a comma list of them")
    return list(dict.fromkeys(out))


def add_adaptive_args(p):
    """``--flowlet-frames``: the data-plane DLB's flowlet inactivity timer."""
    p.add_argument("--flowlet-frames", type=int, default=None, metavar="N",
                   help="--lb dlb: a flow idle this many frame times at its uplinks' rate "
                        "starts a new flowlet (default 16; docs/load-balancing.md)")


def add_fidelity_args(p):
    """``--mtu`` (RoCE path MTU of the traffic) and ``--strict`` (exit 3 if emulator-bound)."""
    p.add_argument("--mtu", type=int, choices=ROCE_MTUS, default=4096,
                   help="RoCE path MTU: payload bytes per packet (default 4096, as AI "
                        "fabrics run); every interface gets an MTU that carries it")
    p.add_argument("--strict", action="store_true",
                   help="exit 3 when the measurement is emulator-bound (the machine, "
                        "not the emulated links, limited the traffic)")


def add_capture_arg(p):
    """``--capture NODE[:PORT][,...]``: one pcap per interface in the results directory."""
    p.add_argument("--capture", default=None, metavar="NODE[:PORT][,...]",
                   help="write a pcap per interface of these nodes (h1, leaf1:eth3, ...; a "
                        "node alone: all its ports) into the results directory, at most "
                        "20 MB each; RoCEv2 decodes in tshark/Wireshark")


def add_transport_args(p):
    """``--transport``, ``--rc-timeout``, ``--rc-retry``, ``--cc`` and ``--ecn``: how the
    collectives' RoCE behaves (traffic.roce.transport, traffic.roce.dcqcn, dataplane.lossless.ecn)."""
    p.add_argument("--transport", choices=Transport.names(), default=Transport.default(),
                   help="collectives and jobs: rc (default) = RoCE reliable connection "
                        "(ACK/NAK, go-back-N, retransmission timer); uet = Ultra Ethernet "
                        "Transport (UDP 4793: per-packet entropy, RUD with SACK, NSCC; "
                        "docs/uet.md); none = every packet once, a loss is a wrong chunk")
    p.add_argument("--rc-timeout", type=int, default=None, metavar="EXP",
                   help="local ACK timeout 4.096 us x 2^EXP, as NCCL_IB_TIMEOUT (default: "
                        "the first above 4 full queues, --queue-ms 30 -> 15: 134 ms)")
    p.add_argument("--rc-retry", type=int, default=7, choices=range(8), metavar="N",
                   help="retries before a QP fails, as NCCL_IB_RETRY_CNT (default 7)")
    p.add_argument("--cc", choices=CC.names(), default=None,
                   help="congestion control at the sending NICs (collectives; default none, "
                        "dcqcn for a training job, as RoCE NICs ship, and nscc with --transport "
                        "uet): DCQCN reacts to CNPs for ECN-marked packets (marking at --ecn, by "
                        "default 100KB:400KB:1 scaled to the queues); TIMELY "
                        "to the round-trip times of its ACKs (no switch support); NSCC (uet) to "
                        "delay and ECN marks (default marking 0.2:0.8 BDP); RCCC (uet) waits "
                        "for the receiver's credits")
    p.add_argument("--ecn", default=None, metavar="K|KMIN:KMAX:PMAX",
                   help="ECN marking at every switch port's egress: a step at K bytes "
                        "(30KB) or DCQCN/RED-like Kmin:Kmax:Pmax (100KB:400KB:1)")
    add_ecn_at_arg(p)
    add_cc_param_arg(p)
    add_job_seed_arg(p)
    add_uet_args(p)


def add_uet_args(p):
    """The Ultra Ethernet transport's options (traffic.uet; docs/uet.md)."""
    p.add_argument("--pds", choices=Delivery.names(), default=None,
                   help="--transport uet: reliable unordered delivery with SACK (rud, default) "
                        "or reliable ordered delivery, one entropy value per PDC, go-back-N "
                        "(rod)")
    p.add_argument("--ev-set", type=int, default=None, metavar="N",
                   help="--transport uet: entropy values (UDP source ports) a PDC sprays over "
                        "(default 256; 1: one path)")
    p.add_argument("--ev-policy", choices=EvPolicy.names(), default=None,
                   help="--transport uet: each packet's entropy value: reps (default; reuse "
                        "values that came back unmarked, retire lost ones) or oblivious (the "
                        "next of the set)")
    add_trim_args(p)


def add_trim_args(p):
    """``--trim [BYTES]`` and ``--trim-at BYTES``: the switches' packet trimming."""
    p.add_argument("--trim", type=parse_trim, nargs="?", const=TRIM_BYTES, default=None,
                   metavar="BYTES",
                   help="the switches trim a UET data frame that finds more than --trim-at "
                        f"bytes queued to BYTES (default {TRIM_BYTES}: its headers) and send "
                        "it ahead of data; lossy links get two classes (docs/uet.md)")
    p.add_argument("--trim-at", type=int, default=None, metavar="BYTES",
                   help="--trim: the queue (bytes) past which a port trims (default one BDP "
                        "of the network's RTT)")


def parse_trim(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: bytes to trim a frame to")
    if value < TRIM_BYTES:
        raise argparse.ArgumentTypeError(f"{value}: at least {TRIM_BYTES} bytes (a UET frame's "
                                         "headers and the probe its receiver reads)")
    return value


def add_cc_param_arg(p):
    """``--cc-param NAME=VALUE`` (repeatable): experiments.workloads.ccparams."""
    p.add_argument("--cc-param", action="append", default=[], metavar="NAME=VALUE",
                   help="a DCQCN/TIMELY parameter of the senders, e.g. cnp_interval=20ms, "
                        "rai=500Kbps, g=0.0625, byte_counter=1M (names: traffic/roce/dcqcn.py, "
                        "traffic/roce/timely.py without _ns/_bps)")


def add_job_seed_arg(p):
    """``--job-seed N``: the collective's QP numbers (traffic.ranks.config.qpn)."""
    p.add_argument("--job-seed", type=parse_seed, default=None, metavar="N",
                   help="collectives: draw the job's QP numbers (hence UDP source ports, "
                        "hence ECMP paths) from N, to replay a draw; default: new ones every "
                        "job, as a NIC gives them (printed and in results.json)")


def add_ecn_at_arg(p):
    """``--ecn-at dequeue|enqueue``: where a switch port judges its queue
    (dataplane.lossless.ecnq)."""
    p.add_argument("--ecn-at", choices=EcnAt.names(), default=EcnAt.default(),
                   help="mark the packet that leaves while the queue is over the threshold "
                        "(dequeue, default: the signal is not delayed by the queue, as in "
                        "HPCC's simulator) or the one that arrives (enqueue, RED's way)")


def rank_transport(spec):
    """The rank config keys of a RunSpec's transport and congestion control."""
    return {"transport": str(spec.transport), "timeout_exp": spec.rc_timeout,
            "retry_cnt": spec.rc_retry, "cc": str(spec.cc),
            "cc_params": ccparams.parse(list(spec.cc_params), spec.cc),
            **uet_spec.rank_keys(spec)}


def parse_seed(text):
    if text in (None, "per-switch"):
        return None
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not 'per-switch' or an integer")
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError("seed must be in 0..2^32-1")
    return value


def parse_holddown(text):
    """``--bfd-holddown``: ``BASE:MAX`` seconds with 0 <= BASE <= MAX, or ``0`` (off);
    the text, passed on to the controller (controller/damping.py)."""
    parts = str(text).strip().split(":")
    try:
        vals = [float(x) for x in parts]
    except ValueError:
        vals = []
    if vals == [0.0] or (len(vals) == 2 and 0 <= vals[0] <= vals[1]):
        return str(text).strip()
    raise ConfigError("--bfd-holddown", f"{text!r}: BASE:MAX in seconds with BASE <= MAX "
                                        "(e.g. 3:30), or 0 for off")


def add_training_args(p, iterations=True):
    """How a SimAI workload runs on the fabric (experiments.workloads.training);
    ``iterations``: add ``--iterations`` (a drill has its own)."""
    p.add_argument("--gpus-per-host", type=int, default=None, metavar="K",
                   help="GPUs (ranks) per host (default: the host's NICs); ranks fill hosts "
                        "in order, K per host")
    if iterations:
        p.add_argument("--iterations", type=int, default=1, metavar="N",
                       help="training iterations (default 1)")
    p.add_argument("--real-rate", default="400Gbps", metavar="RATE",
                   help="a real GPU's NIC rate the job is scaled from (default 400Gbps): "
                        "compute and NVLink are stretched by it over the emulated rate")
    p.add_argument("--nvlink-rate", default=None, metavar="RATE",
                   help="a real GPU's NVLink rate (default 8x --real-rate), scaled as the NICs")
    p.add_argument("--size-scale", type=float, default=None, metavar="S",
                   help="divide every size by S (default: chosen so an iteration takes about "
                        "30 s, and every ring chunk stays at least 8 frames)")
    p.add_argument("--real-hop-latency", default="14us", metavar="TIME",
                   help="a real ring step's latency, for the real-equivalent iteration "
                        "(default 14us: NCCL 2.20's per-hop figure for a ring over the "
                        "network, hwLat[NET][Ring][Simple] in src/graph/tuning.cc)")


WORKLOADS = ("mix", "allreduce", "allgather", "reducescatter", "alltoall", "incast", "none",
             "adversarial", "permutation")        # run --workload, besides simai:FILE


def parse_workload(text):
    """``run --workload``: a name of WORKLOADS, ``simai:FILE``, several jobs
    (``simai:A,simai:B``) or a jobs file (``jobs:FILE``)."""
    if text in WORKLOADS or text.startswith(("simai:", "jobs:")):
        return text
    raise argparse.ArgumentTypeError(
        f"invalid choice: {text!r} (choose from {', '.join(WORKLOADS)}, simai:FILE, "
        "simai:A,simai:B, jobs:FILE)")


def add_shared_args(p, baseline=True):
    """A shared cluster's options (``--workload jobs:FILE``): every job's placement over
    the file's, and (``baseline``) each job run alone too, for its slowdown."""
    p.add_argument("--job-placement", default=None, choices=Placement.names(),
                   help="every job's placement instead of the jobs file's (packed: a leaf "
                        "filled first; spread: round-robin over leaves; random: from each "
                        "job's seed; explicit: the listed hosts); docs/shared-clusters.md")
    if baseline:
        p.add_argument("--baseline", action="store_true", default=None,
                       help="after the jobs together, run each job alone (same placement, "
                            "seeds and fabric): each job's slowdown = together / alone")


def workload_choice(text):
    """``compare --workload``: a collective or a training job's file."""
    if text in ("allreduce", "allgather", "reducescatter", "alltoall", "incast",
                "adversarial", "permutation") or text.startswith(("simai:", "jobs:")):
        return text       # adversarial, permutation: with --routing (a dragonfly's patterns)
    raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from allreduce, "
                                     "allgather, reducescatter, alltoall, incast, "
                                     "adversarial, permutation, simai:FILE, jobs:FILE)")


def add_switch_agent_arg(p):
    """``--switch-agent ideal|NAME|FILE|list``: the switches' control-plane timing."""
    p.add_argument("--switch-agent", default=None, metavar="ideal|NAME|FILE|list",
                   help="the switches' OpenFlow agents: ideal (a change applies at once, as "
                        "in Open vSwitch), a profile NAME (hardware, and switches measured "
                        "by He et al. and Kuźniar et al.: '--switch-agent list' shows them), "
                        "or a YAML file of parameters; for every switch, over the fabric "
                        "file's switch_agent: (per switch kind; default: ideal) "
                        "(docs/switch-agents.md)")


def compare_defaults(args, queue_ms=None, workload=None):
    """What ``compare`` implies before its spec is built: deep queues (2000 ms, a
    stand-in for PFC: collisions slow flows, not drop them; 30 ms against the lossless
    fabric, or ``queue_ms``), and the first repetition's hash seed (1; 101 for the
    planes, above the hosts' bond seeds); the planes' workload, sizes and QPs; the
    comparison's ``workload`` unless one is named."""
    planes = getattr(args, "planes", False)
    if args.queue_ms is None:
        args.queue_ms = queue_ms or (30.0 if getattr(args, "lossless", None) else 2000.0)
    if planes:
        args.workload = args.workload or "alltoall"
        args.sizes = args.sizes or "2M"
        args.qps = args.qps or 8
    if args.hash_seed is None:
        args.hash_seed = 101 if planes else 1
    if workload is not None:
        args.workload = args.workload or workload
