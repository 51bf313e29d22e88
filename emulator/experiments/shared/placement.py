"""Where every job of a shared cluster runs: hosts, GPUs, NICs (pure).

Model.  Every host has ``host_gpus`` GPUs (the jobs file's, else the most
GPUs any job puts on one host); GPU g of a host uses its NIC g mod (NICs),
as one job's ranks do (``training.ranks``).  A job of n ranks with K GPUs per
host needs ceil(n / K) hosts.  Jobs with an explicit host list are placed
first, in file order, then the others in file order, each on the hosts
still free for it: with ``share_hosts: false`` a host that holds a job holds
no other; with ``true`` it takes another job while it has the GPUs free (the
job gets the host's lowest free GPUs).  The policies:

- ``packed``: the free hosts leaf by leaf, in fabric order (a leaf filled
  before the next; as a topology-aware scheduler packs a job under few ToRs);
- ``spread``: round-robin over the leaves (the first free host of every
  leaf, then the second ...: every ring hop crosses the spines);
- ``random``: a draw of the free hosts from the job's ``seed``, in the
  order drawn (a scheduler that does not look at the topology);
- ``explicit``: the hosts listed, in that order.

Ranks fill the job's hosts in order, K per host (rank r on the r div K-th
host).  ``rails: rotated`` shifts a host's GPUs by its position in the job
(the k-th host's local rank i uses GPU slot (i + k) mod K): on a rail fabric
a data-parallel group then changes rails at every hop; ``aligned`` keeps
rank i on GPU i.  A NIC's share is its rate over every GPU using it, the
other jobs' included (``Placement.sharing``).

Every problem is a ``ConfigError`` naming the job's line in the file: an
unknown host, a host two jobs claim without sharing, more GPUs than the
fabric has free for a job.
"""

import math
import random
from dataclasses import dataclass

from emulator.errors import ConfigError
from emulator.experiments.training.ranks import Placement as RankPlacement
from emulator.experiments.training.ranks import fabric_hosts
from emulator.fabric.addressing import home_leaf
from lab.modes import Placement


@dataclass(frozen=True)
class Placed:
    """One job on the fabric: its ranks (``training.ranks.Placement``), its hosts in
    rank order and their leaves."""

    name: str
    ranks: tuple
    hosts: tuple
    leaves: tuple


def ranks_of(spec, workload, where_ranks, source):
    """A job's rank count: the file's ``all_gpus`` or the jobs file's ``ranks``."""
    file_n = workload.parallel.get("all_gpus")
    if spec.ranks is not None and file_n is not None and spec.ranks != file_n:
        raise ConfigError(where_ranks, f"ranks {spec.ranks}, but the workload file says "
                          f"all_gpus {file_n}: leave ranks out or make them agree", source)
    n = spec.ranks or file_n
    if n is None:
        raise ConfigError(where_ranks, "the workload file has no all_gpus: give the job's "
                          "ranks", source)
    return n


def place_jobs(plan, topo, counts, default_k=None, policy=None):
    """{job name: Placed} of every job of ``plan`` (``jobsfile.JobsPlan``) on ``topo``;
    ``counts``: {job: ranks}; ``default_k``: GPUs per host of a job that names none
    (``--gpus-per-host``; else the hosts' NICs); ``policy``: every job's placement
    instead of the file's (``compare jobs``; explicit lists are kept)."""
    hosts = fabric_hosts(topo)
    nics = dict(hosts)
    leaf = {h["name"]: home_leaf(h) for h in topo["hosts"]}
    order = list(dict.fromkeys(leaf[name] for name, _ in hosts))
    src = plan.source
    per_host = {j.name: j.gpus_per_host or default_k or max(len(n) for n in nics.values())
                for j in plan.jobs}
    capacity = plan.host_gpus or max(per_host.values())
    for j in plan.jobs:
        if per_host[j.name] > capacity:
            raise ConfigError(j.where("gpus_per_host"), f"{per_host[j.name]} GPUs per host, "
                              f"but hosts have {capacity} (host_gpus)", src)
    free = {name: list(range(capacity)) for name, _ in hosts}
    owner = {}                           # host -> the jobs on it
    jobs = sorted(plan.jobs, key=lambda j: (j.placement != Placement.EXPLICIT, j.index))
    taken = {}
    for j in jobs:
        k, n = per_host[j.name], counts[j.name]
        need = math.ceil(n / k)
        gpus_on = [min(k, n - i * k) for i in range(need)]
        how = j.placement if j.placement == Placement.EXPLICIT or policy is None else policy
        if how == Placement.EXPLICIT:
            chosen = _explicit(j, need, gpus_on, free, owner, nics, plan, src)
        else:
            eligible = [name for name, _ in hosts
                        if len(free[name]) >= k and (plan.share_hosts or name not in owner)]
            if len(eligible) < need:
                raise ConfigError(j.where("ranks" if "ranks" in j.lines else None),
                                  f"job {j.name} needs {need} hosts with {k} free GPUs "
                                  f"({n} ranks, {k} per host); the fabric has "
                                  f"{len(hosts)} hosts x {capacity} GPUs and "
                                  f"{len(eligible)} such hosts are left"
                                  + (f" after jobs {', '.join(taken)}" if taken else ""), src)
            chosen = _choose(how, eligible, need, leaf, order, j.seed)
        gpus = []
        for pos, (name, g) in enumerate(zip(chosen, gpus_on)):
            mine = free[name][:g]
            free[name] = free[name][g:]
            owner.setdefault(name, []).append(j.name)
            if j.rails == "rotated":
                mine = mine[pos % g:] + mine[:pos % g]
            gpus.append((name, mine))
        taken[j.name] = gpus
    use = {}
    for gpus in taken.values():
        for name, mine in gpus:
            for g in mine:
                key = (name, g % len(nics[name]))
                use[key] = use.get(key, 0) + 1
    out = {}
    for j in plan.jobs:
        ranks, r = [], 0
        for name, mine in taken[j.name]:
            for g in mine:
                i = g % len(nics[name])
                ranks.append(RankPlacement(r, name, g, nics[name][i], i, use[(name, i)]))
                r += 1
        names = tuple(name for name, _ in taken[j.name])
        out[j.name] = Placed(j.name, tuple(ranks), names, tuple(leaf[h] for h in names))
    return out


def _choose(how, eligible, need, leaf, order, seed):
    if how == Placement.PACKED:
        return sorted(eligible, key=lambda h: order.index(leaf[h]))[:need]
    if how == Placement.SPREAD:
        columns = [[h for h in eligible if leaf[h] == lf] for lf in order]
        depth = max(len(c) for c in columns)
        return [c[i] for i in range(depth) for c in columns if i < len(c)][:need]
    return random.Random(seed).sample(eligible, need)


def _explicit(j, need, gpus_on, free, owner, nics, plan, src):
    where = j.where("hosts")
    for h in j.hosts:
        if h not in nics:
            raise ConfigError(where, f"unknown host {h!r} (the fabric's hosts: "
                              f"{_names(list(nics))})", src)
    if len(j.hosts) != need:
        raise ConfigError(where, f"{len(j.hosts)} hosts listed; job {j.name} needs {need} "
                          f"({sum(gpus_on)} ranks, {gpus_on[0]} per host)", src)
    for h, g in zip(j.hosts, gpus_on):
        if h in owner and not plan.share_hosts:
            other = plan.job(owner[h][0])
            raise ConfigError(where, f"host {h} is job {other.name}'s already "
                              f"({other.where()}); set share_hosts: true to share hosts "
                              "(different GPUs), or list other hosts", src)
        if len(free[h]) < g:
            raise ConfigError(where, f"host {h} has {len(free[h])} GPUs left; job "
                              f"{j.name} needs {g} there (host_gpus)", src)
    return list(j.hosts)


def _names(names):
    return ", ".join(names) if len(names) <= 6 else f"{names[0]} .. {names[-1]}"
