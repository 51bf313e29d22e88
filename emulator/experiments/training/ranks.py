"""Where a training job's ranks run and which groups they form (pure).

Ranks (as SimAI places them).  ``gpus_per_host`` K; rank r is GPU r mod K
of host r div K, hosts in fabric order; ``all_gpus`` takes the first ranks,
more than hosts x K is an error, none means every GPU.  GPU g uses the
host's NIC g mod (NICs of the host): its own NIC on a rail / multi-plane
fabric with K == NICs, the one NIC (or bond) otherwise; its share of the NIC
is the NIC's rate over the GPUs that use it.

Groups (Megatron order, tensor fastest, pipeline slowest, as SimAI's
MockNcclGroup forms them; ``form_groups``).  S = all_gpus / pp ranks per
stage, D = S / tp.  Rank r: stage r div S, q = r mod S, tp index q mod tp,
dp index q div tp.  TP: tp consecutive ranks.  DP: the D ranks of a stage
with the same tp index (stride tp).  EP: ep consecutive dp indices (TP
groups), same tp index (stride tp).  DP_EP: the dp indices congruent mod ep
(stride ep x tp).  PP: the ranks with the same q, one per stage.  SimAI
builds its groups with PP_size 1, so its DP group spans all stages when
pp > 1 (its report divides by tp x pp); here DP stays inside a stage.
"""

from dataclasses import dataclass

from emulator.errors import ConfigError

GROUP_KINDS = ("TP", "DP", "EP", "DP_EP", "PP")


@dataclass(frozen=True)
class Nic:
    """A host's NIC (its port in the topology document) and its link rate."""

    host: str
    port: str
    rate_bps: float


@dataclass(frozen=True)
class Placement:
    """Where rank ``rank`` runs: GPU ``gpu`` of ``host``, on ``nic``, shared by ``sharing``."""

    rank: int
    host: str
    gpu: int
    nic: Nic
    nic_index: int
    sharing: int

    @property
    def share_bps(self):
        return self.nic.rate_bps / self.sharing


def fabric_hosts(topo):
    """[(host name, (Nic, ...))] in fabric order, from a topology document."""
    return [(h["name"], tuple(Nic(h["name"], p["port"], float(p["rate_bps"]))
                              for p in h["ports"])) for h in topo["hosts"]]


def place(hosts, gpus_per_host, all_gpus=None):
    """The ranks on the hosts (see the module docstring); a tuple of Placement."""
    k = gpus_per_host
    if not isinstance(k, int) or k < 1:
        raise ConfigError("--gpus-per-host", f"{k!r}: a whole number >= 1 is needed")
    if not hosts:
        raise ConfigError("fabric", "the fabric has no hosts to place ranks on")
    capacity = len(hosts) * k
    n = capacity if all_gpus is None else all_gpus
    if n > capacity:
        raise ConfigError("workload all_gpus", f"the workload needs {n} GPUs but the fabric "
                          f"has {len(hosts)} hosts x {k} GPUs per host = {capacity}; give "
                          f"it more hosts (e.g. -P hosts_per_leaf=...) or "
                          f"--gpus-per-host {-(-n // len(hosts))}")
    out = []
    for r in range(n):
        h, g = divmod(r, k)
        name, nics = hosts[h]
        if not nics:
            raise ConfigError(f"hosts[{h}]", f"host {name} has no NIC")
        i = g % len(nics)
        out.append(Placement(r, name, g, nics[i], i, len(range(i, k, len(nics)))))
    return tuple(out)


def form_groups(n, tp=1, pp=1, ep=1):
    """{kind: tuple of member tuples} for TP, DP, EP, DP_EP, PP (module docstring)."""
    if n % (tp * pp):
        raise ConfigError("workload", f"{n} ranks do not split into tp {tp} x pp {pp}; make "
                          f"all_gpus (or hosts x --gpus-per-host) a multiple of {tp * pp}")
    stage = n // pp
    dp = stage // tp
    if dp % ep:
        raise ConfigError("workload", f"ep {ep} does not divide the data-parallel size {dp} "
                          f"(= {n} ranks / (tp {tp} x pp {pp}))")
    base = [s * stage for s in range(pp)]
    return {
        "TP": tuple(tuple(b + d * tp + j for j in range(tp)) for b in base for d in range(dp)),
        "DP": tuple(tuple(b + j * tp + t for j in range(dp)) for b in base for t in range(tp)),
        "EP": tuple(tuple(b + (blk * ep + j) * tp + t for j in range(ep))
                    for b in base for blk in range(dp // ep) for t in range(tp)),
        "DP_EP": tuple(tuple(b + (i + j * ep) * tp + t for j in range(dp // ep))
                       for b in base for i in range(ep) for t in range(tp)),
        "PP": tuple(tuple(s * stage + q for s in range(pp)) for q in range(stage)),
    }
