"""The configuration of a training job (``python -m traffic job --config FILE``).

``load_job`` validates a job document and returns a frozen ``Job``; every
error is one ``JobConfigError`` naming where it is (``programs[3][12]``).

Document (JSON)::

    {"endpoints": [{"netns": "/proc/PID/ns/net", "intf": "h1-eth0", "ip": "10.0.0.1",
                    "mac": "..." (default: the interface's), "next_hop_mac": "..." (to
                    reach this endpoint; default: the kernel's neighbour table),
                    "name": "h1", "rate_bps": 40e6}, ...],
     "ranks": [0, 0, 1, 1, ...],            # rank -> its endpoint (its NIC)
     "programs": [[op, ...], ...],          # per rank, executed in order
     ... the NIC keys of a rank config (``JOB_DEFAULTS``)}

Ops::

    {"op": "compute", "ns": 2000000, "label": "it0.L3.fwd"}   (label: optional,
                                           kept in the op's record for the reports)
    {"op": "coll", "id": "it0.dp.ar", "kind": "allreduce", "group": "DP",
     "members": [0, 2, 4, 6], "bytes": 8388608, "blocking": true,
     "local_ns": 0, "fabric": true}
    {"op": "wait", "ids": ["it0.dp.ar"]}
    {"op": "send", "id": "it0.pp.0", "peer": 2, "bytes": 1048576}
    {"op": "recv", "id": "it0.pp.0", "peer": 0, "bytes": 1048576}
    {"op": "until", "ns": 5000000000}      (idle until the job's clock reads ns)

A collective ``id`` appears once in the program of each of its ``members``
(with the same kind, group, members, bytes, local_ns and fabric; ``blocking``
is each rank's own) and nowhere else.  ``fabric: true`` runs it over the
DISTINCT endpoints of its members in member order (members sharing an
endpoint are adjacent, cyclically, and their hop costs ``local_ns`` on top);
``fabric: false``, or a single endpoint, takes ``local_ns`` and no network.
A ``wait`` names earlier non-blocking collectives of its rank.  A ``send``
and a ``recv`` of one id pair two ranks that name each other, same bytes (the
send is eager: ``job_program``).

Several jobs in one process (the emulator's shared clusters): an id may begin
with its *owner* and a slash (``a/it0.L3.fwd.TP0``, ``bg.store/w.h3.12``);
the NICs count the bytes of each flow (QP) per owner (``owner_of``).
``owner_dscp`` ({owner: DSCP}) puts an owner's instances in a traffic class of
their own: QPs of their own per connection (``qps`` more per class) whose
frames carry that DSCP (the others carry ``dscp``).
``daemons``: ranks whose programs are cut off once every other rank has
finished (background traffic scheduled for longer than the jobs run): they
start nothing new, and what they have on the wire gets ``job.DRAIN_NS`` to
finish (what is still running then is reported as it stood, ``cut_off``).
"""

import json
from dataclasses import dataclass

from lab.modes import CC, Delivery, Entropy, EvPolicy, Transport
from traffic.ranks.config import ConfigError, load_config

KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")
GROUPS = ("TP", "DP", "EP", "DP_EP", "PP", "CAL")   # CAL: a measurement before the job
# the NIC's keys, as a rank config has them (validated by ``rank_config.load_config``)
SHARED = ("mtu", "qps", "dscp", "burst", "transport", "timeout_exp", "retry_cnt", "cc",
          "cc_params", "qpn_seed", "entropy", "flowlet_gap_ms", "step_timeout_s",
          "gap_threshold_ms", "ooo", "pds", "ev_policy", "ev_set", "uet_rtt_ms",
          "uet_rto_min_ms", "uet_rto_max_ms", "trim", "close_idle_ms")
JOB_DEFAULTS = {"mtu": 4096, "qps": 1, "dscp": 26, "burst": 8, "transport": Transport.RC,
                "timeout_exp": 15, "retry_cnt": 7, "cc": CC.NONE, "cc_params": {},
                "qpn_seed": None, "entropy": Entropy.QP, "flowlet_gap_ms": 1.0, "ooo": None,
                "pds": Delivery.RUD, "ev_policy": EvPolicy.REPS, "ev_set": 256,
                "uet_rtt_ms": None, "uet_rto_min_ms": None, "uet_rto_max_ms": None,
                "trim": False,
                "close_idle_ms": 2000.0,
                "step_timeout_s": None, "gap_threshold_ms": 10.0,
                # the emulator's time scale (compute ns in the programs are scaled already)
                "time_scale": 1.0,
                # the engine wakes at most once per tick (ms), as the mix engine does;
                # arrivals keep their kernel stamps, but a ring step, a compute op's
                # end or an ACK may wait up to a tick (1 ms: finer, ~1.5x the CPU)
                "tick_ms": 2.0,
                # next-hop MACs from the neighbour tables, ARP given this long (s)
                "resolve_timeout_s": 10.0,
                # the whole job ends (aborted) after this many seconds (null: no limit)
                "deadline_s": None,
                # per instance, the bytes its receiver accepted over time and when its
                # sender sent its last new packet; every DCQCN cut and go-back traced
                # (a throughput pattern's window, experiments.workloads.goodput)
                "timelines": False}
JOB_KEYS = ("endpoints", "ranks", "programs", "daemons", "owner_dscp")
MAX_QPS = 16                          # QPs per connection, every class's (qpn: 4 bits)
ENDPOINT_KEYS = {"netns", "intf", "ip", "mac", "next_hop_mac", "name", "rate_bps"}
OP_KEYS = {"compute": ({"ns"}, {"label"}),
           "coll": ({"id", "kind", "members", "bytes"}, {"group", "blocking", "local_ns",
                                                         "fabric"}),
           "wait": ({"ids"}, set()),
           "send": ({"id", "peer", "bytes"}, set()),
           "recv": ({"id", "peer", "bytes"}, set()),
           "until": ({"ns"}, set())}


class JobConfigError(ConfigError):
    """The job config is invalid; the message says where."""


@dataclass(frozen=True)
class Op:
    kind: str                 # compute | coll | wait | send | recv | until
    id: str = None
    ns: int = 0               # compute: how long; until: the job clock it waits for
    ids: tuple = ()
    blocking: bool = True
    label: str = None         # a compute op's name for the reports (``it0.L3.fwd``)


@dataclass(frozen=True)
class Instance:
    """One collective or one send/recv pair: what all its ranks share."""

    id: str
    tag: int                  # the frames' tag (traffic.roce.frames PROBE)
    kind: str                 # a collective kind, or "p2p"
    group: str
    members: tuple            # ranks (p2p: sender, receiver)
    nbytes: int
    endpoints: tuple          # the distinct endpoints in ring order (p2p: src, dst)
    local_ns: int             # time on top of the network part (or instead of it)

    @property
    def network(self):
        return len(self.endpoints) > 1


@dataclass(frozen=True)
class Job:
    endpoints: tuple          # dicts, as given (name filled in)
    ranks: tuple              # rank -> endpoint
    programs: tuple           # rank -> tuple of Op
    instances: dict           # id -> Instance
    nic: dict                 # the validated NIC keys (``rank_config``'s, rc_params)
    time_scale: float
    tick_ns: int
    resolve_timeout_s: float
    deadline_s: float
    timelines: bool = False
    daemons: frozenset = frozenset()   # ranks cut off when the others have finished
    classes: tuple = ()                # DSCPs of the classes: the NIC's own, then others
    owner_class: dict = None           # owner -> its class (index into ``classes``)


def load_job(doc):
    """Validate a job document (a dict or a path); returns a ``Job``."""
    if isinstance(doc, str):
        with open(doc) as f:
            doc = json.load(f)
    if not isinstance(doc, dict):
        raise JobConfigError("the job config is a JSON object")
    unknown = set(doc) - set(JOB_DEFAULTS) - set(JOB_KEYS)
    if unknown:
        raise JobConfigError(f"unknown keys {sorted(unknown)}")
    cfg = dict(JOB_DEFAULTS, **doc)
    eps = _endpoints(cfg.get("endpoints"))
    ranks = cfg.get("ranks")
    if not isinstance(ranks, list) or not ranks or any(
            not _int(e) or not 0 <= e < len(eps) for e in ranks):
        raise JobConfigError(f"ranks: a non-empty list of endpoint indices 0..{len(eps) - 1}")
    progs = cfg.get("programs")
    if not isinstance(progs, list) or len(progs) != len(ranks):
        raise JobConfigError(f"programs: one list of ops per rank ({len(ranks)})")
    try:
        nic = load_config(dict({k: cfg[k] for k in SHARED}, rank=0,
                               ranks=[{"ip": e["ip"], "intf": e["intf"]} for e in eps],
                               rate_bps=min(e["rate_bps"] for e in eps)))
    except ConfigError as e:
        raise JobConfigError(str(e))
    if not 0 < cfg["tick_ms"] <= 50 or not cfg["time_scale"] > 0 \
            or not cfg["resolve_timeout_s"] > 0:
        raise JobConfigError("0 < tick_ms <= 50, time_scale > 0, resolve_timeout_s > 0")
    if cfg["deadline_s"] is not None and not cfg["deadline_s"] > 0:
        raise JobConfigError("deadline_s: null or > 0")
    if not isinstance(cfg["timelines"], bool):
        raise JobConfigError("timelines: true or false")
    programs, seen = [], {}
    for r, prog in enumerate(progs):
        if not isinstance(prog, list):
            raise JobConfigError(f"programs[{r}]: a list of ops")
        programs.append(tuple(_op(r, i, op, len(ranks), seen) for i, op in enumerate(prog)))
    instances = _instances(seen, ranks)
    daemons = cfg.get("daemons") or []
    if not isinstance(daemons, list) or any(not _int(r) or not 0 <= r < len(ranks)
                                            for r in daemons):
        raise JobConfigError(f"daemons: a list of rank indices 0..{len(ranks) - 1}")
    if len(set(daemons)) == len(ranks):
        raise JobConfigError("daemons: at least one rank must not be a daemon")
    owner_dscp = cfg.get("owner_dscp") or {}
    if not isinstance(owner_dscp, dict) or any(
            not isinstance(k, str) or not _int(v) or not 0 <= v < 64
            for k, v in owner_dscp.items()):
        raise JobConfigError("owner_dscp: {owner: DSCP 0..63}")
    classes = [nic["dscp"]] + sorted(set(owner_dscp.values()) - {nic["dscp"]})
    if nic["qps"] * len(classes) > MAX_QPS:
        raise JobConfigError(f"qps {nic['qps']} x {len(classes)} classes: at most "
                             f"{MAX_QPS} QPs per connection")
    owner_class = {o: classes.index(d) for o, d in owner_dscp.items()}
    return Job(tuple(eps), tuple(ranks), tuple(programs), instances, nic,
               float(cfg["time_scale"]), int(cfg["tick_ms"] * 1e6),
               float(cfg["resolve_timeout_s"]), cfg["deadline_s"], cfg["timelines"],
               frozenset(daemons), tuple(classes), owner_class)


def owner_of(cid):
    """The owner an instance id names before its first slash ('' for none)."""
    head, sep, _ = cid.partition("/")
    return head if sep else ""


def _int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _endpoints(eps):
    if not isinstance(eps, list) or not eps:
        raise JobConfigError("endpoints: a non-empty list")
    out, ips = [], set()
    for i, e in enumerate(eps):
        if not isinstance(e, dict) or {"intf", "ip", "rate_bps"} - set(e) \
                or set(e) - ENDPOINT_KEYS:
            raise JobConfigError(f"endpoints[{i}]: needs intf, ip, rate_bps; keys "
                                 f"{sorted(ENDPOINT_KEYS)}")
        if not isinstance(e["rate_bps"], (int, float)) or not e["rate_bps"] > 0:
            raise JobConfigError(f"endpoints[{i}]: rate_bps > 0")
        if e["ip"] in ips:
            raise JobConfigError(f"endpoints[{i}]: ip {e['ip']} twice")
        ips.add(e["ip"])
        out.append(dict(e, name=e.get("name") or e["intf"]))
    return out


def _op(r, i, op, nranks, seen):
    """One op of rank ``r``, checked alone; collectives and pairs gathered in ``seen``."""
    where = f"programs[{r}][{i}]"
    if not isinstance(op, dict) or op.get("op") not in OP_KEYS:
        raise JobConfigError(f"{where}: an object with op one of {sorted(OP_KEYS)}")
    kind = op["op"]
    need, opt = OP_KEYS[kind]
    if need - set(op) or set(op) - need - opt - {"op"}:
        raise JobConfigError(f"{where}: {kind} needs {sorted(need)}, may have {sorted(opt)}")
    if kind in ("compute", "until"):
        if not _int(op["ns"]) or op["ns"] < 0:
            raise JobConfigError(f"{where}: ns, an integer >= 0")
        if not isinstance(op.get("label", ""), str):
            raise JobConfigError(f"{where}: label, a string")
        return Op(kind, ns=op["ns"], label=op.get("label"))
    if kind == "wait":
        ids = op["ids"]
        if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
            raise JobConfigError(f"{where}: ids, a list of collective ids")
        for x in ids:
            mine = seen.get(x, {}).get(r)
            if mine is None or mine[1].blocking or mine[0] >= i:
                raise JobConfigError(f"{where}: waits for {x!r}, not an earlier "
                                     "non-blocking collective of this rank")
        return Op("wait", ids=tuple(ids))
    cid = op["id"]
    if not isinstance(cid, str) or not cid:
        raise JobConfigError(f"{where}: id, a non-empty string")
    if not _int(op["bytes"]) or op["bytes"] < 0:
        raise JobConfigError(f"{where} ({cid!r}): bytes, an integer >= 0")
    if kind == "coll":
        members = op["members"]
        if not isinstance(members, list) or not members or len(set(members)) != len(members) \
                or any(not _int(m) or not 0 <= m < nranks for m in members):
            raise JobConfigError(f"{where} ({cid!r}): members, distinct rank indices")
        if op["kind"] not in KINDS or op.get("group", "DP") not in GROUPS:
            raise JobConfigError(f"{where} ({cid!r}): kind one of {KINDS}, group one of "
                                 f"{GROUPS}")
        local = op.get("local_ns", 0)
        if not _int(local) or local < 0 or not isinstance(op.get("blocking", True), bool) \
                or not isinstance(op.get("fabric", True), bool):
            raise JobConfigError(f"{where} ({cid!r}): local_ns an integer >= 0; blocking and "
                                 "fabric booleans")
        shape = ("coll", op["kind"], op.get("group"), tuple(members), op["bytes"], local,
                 op.get("fabric", True))
        parsed = Op("coll", id=cid, blocking=op.get("blocking", True))
    else:
        peer = op["peer"]
        if not _int(peer) or not 0 <= peer < nranks or peer == r:
            raise JobConfigError(f"{where} ({cid!r}): peer, another rank")
        src, dst = (r, peer) if kind == "send" else (peer, r)
        shape = ("p2p", src, dst, op["bytes"])
        parsed = Op(kind, id=cid)
    entry = seen.setdefault(cid, {})
    if r in entry:
        raise JobConfigError(f"{where}: {cid!r} twice in rank {r}'s program")
    if entry and next(iter(entry.values()))[2] != shape:
        raise JobConfigError(f"{where}: {cid!r} differs from the other ranks' op of that id")
    entry[r] = (i, parsed, shape)
    return parsed


def _instances(seen, ranks):
    """The ``Instance`` of every id; tags in order of first appearance, from 1."""
    out = {}
    for tag, (cid, entry) in enumerate(seen.items(), start=1):
        shape = next(iter(entry.values()))[2]
        if shape[0] == "p2p":
            _, src, dst, nbytes = shape
            kinds = sorted(p.kind for _, p, _ in entry.values())
            if sorted(entry) != sorted((src, dst)) or kinds != ["recv", "send"]:
                raise JobConfigError(f"{cid!r}: one send in rank {src}'s program and one "
                                     f"recv in rank {dst}'s, naming each other")
            eps = (ranks[src], ranks[dst])
            out[cid] = Instance(cid, tag, "p2p", "PP", (src, dst), nbytes,
                                eps if eps[0] != eps[1] else eps[:1], 0)
            continue
        _, kind, group, members, nbytes, local, fabric = shape
        if sorted(entry) != sorted(members):
            raise JobConfigError(f"{cid!r}: in the programs of ranks {sorted(entry)}, "
                                 f"not of its members {sorted(members)}")
        hosts = [ranks[m] for m in members]
        eps = tuple(dict.fromkeys(hosts))
        # an endpoint's members sit together in the ring (cyclically): one hop each
        changes = sum(hosts[k] != hosts[k - 1] for k in range(len(hosts)))
        if len(eps) > 1 and changes != len(eps):
            raise JobConfigError(f"{cid!r}: members sharing an endpoint must be adjacent "
                                 "in the member order")
        if not fabric:
            eps = eps[:1]
        # the NVLink hop of members that share an endpoint, on top of the network
        extra = local if (not fabric or len(eps) == 1 or len(hosts) > len(eps)) else 0
        out[cid] = Instance(cid, tag, kind, group, members, nbytes, eps, extra)
    return out
