"""A run's specification: everything a run was asked to do, typed, frozen, in one value.

``RunSpec`` holds the fabric (the model) and every setting of a run: its
control plane (controller, load balancing, failover, routing, hash seed,
switch agents), its data plane (datapath, queues, MTU, ECN), the
collectives' transport and congestion control, the workload, what is
observed (captures, telemetry, the page) and where results go.  It is built
and checked once (``experiments.spec`` from a command line or a ``run.yaml``);
``Session`` takes it whole, and a command that runs several modes makes one
variant per mode (``spec.replace(lb=LB.DLB)``).

Seeds that are drawn at random (a collective's job seed) are drawn when the
spec is built, so the spec, written as ``run.yaml`` into every results
directory, reruns the same run (``emulator run --spec run.yaml``).

``to_doc``/``from_doc`` give the document form: sections of plain values,
the fabric as its whole fabric-file mapping (``fabric.spec``).  Pure: no I/O but
the caller's.
"""

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Optional

from emulator.errors import FabricError
from emulator.fabric import spec as fabric_spec
from emulator.fabric.model import Fabric
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
    Routing,
    Transport,
)

DEFAULT_QUEUE_MS = 30.0       # egress queue of every link, ms at the link rate
DEFAULT_MTU = 4096            # RoCE path MTU, as AI fabrics run
DEFAULT_RC_RETRY = 7          # NCCL_IB_RETRY_CNT

# The document's sections, and which field goes where (the order users read).
SECTIONS = {
    "control": ("control", "controller", "lb", "failover", "routing", "hash_seed",
                "flowlet_frames", "bfd_holddown", "switch_agent", "bfd", "peering"),
    "dataplane": ("datapath", "queue_ms", "mtu", "shape", "ecn", "ecn_at", "trim", "trim_at"),
    "transport": ("transport", "cc", "cc_params", "rc_timeout", "rc_retry", "job_seed", "pds",
                  "ev_policy", "ev_set"),
    "workload": ("workload", "duration", "sizes", "qps", "ring", "hosts", "seed",
                 "background", "gpus_per_host", "iterations", "real_rate", "nvlink_rate",
                 "size_scale", "real_hop_latency", "jobs", "job_placement", "baseline"),
    "observe": ("capture", "telemetry", "ui", "ui_bind", "cli", "strict"),
    "run": ("results", "reach_timeout"),
}
ENUMS = {"lb": LB, "failover": Failover, "routing": Routing, "transport": Transport,
         "cc": CC, "ecn_at": EcnAt, "control": Control, "peering": Peering,
         "pds": Delivery, "ev_policy": EvPolicy}
TUPLES = ("cc_params", "hosts", "background")


@dataclass(frozen=True)
class RunSpec:
    """One run's fabric and settings (see the module docstring)."""

    fabric: Fabric
    # where the fabric came from: {"preset": NAME, "params": [K=V, ...]} or {"file": PATH}
    fabric_source: dict = field(default_factory=dict, compare=False)
    # control plane
    control: Optional[Control] = None      # openflow | bgp; None: the fabric's (fabric.control)
    controller: str = "builtin"            # builtin | app:PATH.py | remote:HOST:PORT
    lb: LB = LB.default()
    failover: Failover = Failover.default()
    routing: Routing = Routing.default()
    hash_seed: Optional[int] = None        # one ECMP seed for every switch; None: per switch
    flowlet_frames: Optional[int] = None   # --lb dlb's flowlet timer, frame times
    bfd_holddown: Optional[str] = None     # BASE:MAX s, the controller's BFD hold-down
    switch_agent: Optional[str] = None     # ideal | hardware | FILE; None: the fabric's
    bfd: Optional[str] = None              # BGP's BFD, INTERVALxMULT; None: FRR's 300x3
    peering: Peering = Peering.default()   # BGP sessions over numbered /31s or unnumbered
    # data plane
    datapath: str = "auto"                 # auto | kernel | user
    queue_ms: float = DEFAULT_QUEUE_MS
    mtu: int = DEFAULT_MTU
    shape: bool = True
    ecn: Optional[str] = None              # K or KMIN:KMAX:PMAX; None: no marking
    ecn_at: EcnAt = EcnAt.default()
    trim: Optional[int] = None             # trim UET frames to this many bytes; None: drop
    trim_at: Optional[int] = None          # ... past this many bytes queued; None: one BDP
    # the collectives' transport
    transport: Transport = Transport.default()
    cc: CC = CC.default()
    cc_params: tuple = ()                  # NAME=VALUE
    rc_timeout: Optional[int] = None       # 4.096 us x 2^EXP; None: from the queues
    rc_retry: int = DEFAULT_RC_RETRY
    job_seed: Optional[int] = None         # the job's QP numbers; drawn when built
    pds: Delivery = Delivery.default()     # UET: RUD or ROD
    ev_policy: EvPolicy = EvPolicy.default()   # UET: oblivious spraying or REPS
    ev_set: int = 256                      # UET: entropy values a PDC sprays over
    # workload
    workload: str = "mix"
    duration: float = 5.0
    sizes: str = "1M:4M"
    qps: Optional[int] = None
    ring: str = "naive"
    hosts: Optional[tuple] = None
    seed: int = 1
    background: tuple = ()
    gpus_per_host: Optional[int] = None
    iterations: int = 1
    real_rate: str = "400Gbps"
    nvlink_rate: Optional[str] = None
    size_scale: Optional[float] = None
    real_hop_latency: str = "14us"         # a real ring step (NCCL's per-hop figure)
    # a shared cluster (workload jobs:FILE): the jobs file's document, paths resolved
    # (so run.yaml reruns it without the file); every job's placement instead of the
    # file's (compare jobs); each job also run alone for its slowdown
    jobs: Optional[dict] = field(default=None, hash=False)
    job_placement: Optional[Placement] = None
    baseline: bool = False
    # observe and interact
    capture: Optional[str] = None
    telemetry: Optional[int] = None
    ui: bool = False
    ui_bind: str = "127.0.0.1"
    cli: bool = False
    strict: bool = False
    # where
    results: str = "results"
    reach_timeout: float = 90.0

    def __post_init__(self):
        if not isinstance(self.fabric, Fabric):
            raise TypeError(f"RunSpec.fabric must be a Fabric, not {type(self.fabric).__name__}")
        # the run's control plane is the fabric's unless the run names one; the fabric
        # then carries it, so every plan made of it (addressing.plan) is the run's
        control = self.fabric.control if self.control is None else self.control
        object.__setattr__(self, "control", control)
        if self.fabric.control != control:
            try:
                object.__setattr__(self, "fabric", dataclasses.replace(
                    self.fabric, control=Control.parse(control, "control")))
            except ValueError as e:
                raise FabricError(str(e)) from None
        for name, enum in ENUMS.items():
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, enum.parse(value, name))
            except ValueError as e:
                raise FabricError(str(e)) from None
        if self.job_placement is not None:
            try:
                object.__setattr__(self, "job_placement",
                                   Placement.parse(self.job_placement, "job_placement"))
            except ValueError as e:
                raise FabricError(str(e)) from None
        if self.jobs is not None and not isinstance(self.jobs, dict):
            raise FabricError("jobs: the jobs file's mapping")
        for name in TUPLES:
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        for name, low in (("queue_ms", 0.0), ("duration", 0.0), ("reach_timeout", 0.0)):
            if float(getattr(self, name)) < low:
                raise FabricError(f"{name}: {getattr(self, name)} is negative")
        if self.rc_timeout is not None and not 0 <= self.rc_timeout <= 31:
            raise FabricError(f"rc_timeout: {self.rc_timeout}: an exponent 0..31")
        if not 0 <= self.rc_retry <= 7:
            raise FabricError(f"rc_retry: {self.rc_retry}: 0..7")
        if not 1 <= self.ev_set <= 16384:
            raise FabricError(f"ev_set: {self.ev_set}: 1..16384 entropy values")
        for name in ("trim", "trim_at"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise FabricError(f"{name}: {v}: bytes, at least 1")
        for name in ("hash_seed", "job_seed"):
            v = getattr(self, name)
            if v is not None and not 0 <= v < 2 ** 32:
                raise FabricError(f"{name}: {v}: a seed in 0..2^32-1")

    def replace(self, **changes):
        """A variant of this run (another mode, another seed), checked as the original."""
        return dataclasses.replace(self, **changes)

    @property
    def adaptive(self):
        """The switches' data plane decides (adaptive routing or UGAL)."""
        return self.lb.adaptive or self.routing.adaptive

    def to_doc(self):
        """The document form (plain values by section; the fabric as its file's mapping)."""
        doc = {"fabric": {"source": dict(self.fabric_source),
                          "params": {k: v for k, v in self.fabric.params},
                          "document": self.fabric.to_spec()}}
        for section, names in SECTIONS.items():
            doc[section] = {n: _plain(getattr(self, n)) for n in names}
        return doc

    @classmethod
    def from_doc(cls, doc, where="run.yaml"):
        """A RunSpec from ``to_doc``'s form; FabricError naming the key if it is not one."""
        if not isinstance(doc, dict) or "fabric" not in doc:
            raise FabricError(f"{where}: not a run specification (no fabric:)")
        unknown = sorted(set(doc) - set(SECTIONS) - {"fabric", "versions", "id", "command"})
        if unknown:
            raise FabricError(f"{where}: unknown section(s) {', '.join(unknown)}")
        fab = doc["fabric"] or {}
        if "document" not in fab:
            raise FabricError(f"{where}: fabric.document is missing")
        fabric = fabric_spec.parse(fab["document"], f"{where}: fabric.document")
        params = fab.get("params") or {}
        if not isinstance(params, dict):
            raise FabricError(f"{where}: fabric.params: expected a mapping")
        fabric = dataclasses.replace(fabric, params=tuple(params.items()))
        values = {}
        for section, names in SECTIONS.items():
            given = doc.get(section) or {}
            bad = sorted(set(given) - set(names))
            if bad:
                raise FabricError(f"{where}: {section}: unknown key(s) {', '.join(bad)} "
                                  f"(known: {', '.join(names)})")
            values.update(given)
        return cls(fabric=fabric, fabric_source=fab.get("source") or {}, **values)

    @classmethod
    def field_names(cls):
        return tuple(f.name for f in fields(cls) if f.name not in ("fabric", "fabric_source"))


def _plain(value):
    """A value as YAML writes it: enums as their names, tuples as lists."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "value") and isinstance(value, str):
        return str(value)
    return value
