"""The jobs file of a shared cluster: several training jobs and background traffic.

A YAML file (``run --workload jobs:FILE``), read before anything is built::

    share_hosts: false        # may two jobs use one host (different GPUs)?
    host_gpus: 8              # GPUs of every host (default: the most a job puts on one)
    jobs:
      - name: a
        workload: ../data/llama7b_tp2.txt   # SimAI/AICB file, relative to this file
        ranks: 16             # needed when the file has no all_gpus
        gpus_per_host: 2      # this job's ranks per host (default --gpus-per-host)
        placement: packed     # packed | spread | random | explicit, or a list of hosts
        seed: 1               # random's draw
        hosts: [h1, h2]       # explicit's hosts, in rank order
        start: 0s             # start offset after the engine's start
        iterations: 3         # default --iterations
        class: lossless       # lossless | best-effort (the link class asked for)
        rails: aligned        # aligned (GPU i on NIC i) | rotated (shifted per host)
    background:
      - {kind: storage, name: store, op: write, storage: [h16], clients: [h1, h5],
         rate: 8Mbps, duty: 0.5, period: 2s, chunk: 256K, start: 0s, class: best-effort}
      - {kind: checkpoint, name: ckpt, job: a, storage: [h16], bytes: 4M, every: 6s,
         start: 3s}
      - {kind: stream, name: be, from: h3, to: h9, rate: 4Mbps, class: best-effort}

A storage flow runs from every client to a storage host (``write``: many to
one) or back (``read``: one to many), each client at ``rate`` for ``duty``
of every ``period``; a checkpoint writes ``bytes`` from every host of ``job``
to the storage hosts every ``every`` seconds; a stream sends at ``rate``
from one host to another.  Sizes, rates and times are the emulated fabric's
(a job's own sizes are scaled from its file; background values are not).

``load_file`` / ``parse_text`` / ``parse`` check the shape; every problem is
one ``ConfigError`` naming the line (``line 12, jobs[1].placement``) and
the reason.  What needs the fabric (unknown hosts, capacity, collisions) is
``placement``'s, which names the same lines.
"""

import os
import re
from dataclasses import dataclass, field

import yaml

from emulator.errors import ConfigError
from emulator.experiments.workloads.collective import parse_sizes
from emulator.fabric import spec as fabric_spec
from emulator.fabric.units import parse_duration, parse_rate
from lab.modes import Placement, TrafficClass

PREFIX = "jobs:"
SIMAI = "simai:"
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,23}$")
TOP_KEYS = ("share_hosts", "host_gpus", "jobs", "background")
JOB_KEYS = ("name", "workload", "ranks", "gpus_per_host", "placement", "seed", "hosts",
            "start", "iterations", "class", "rails")
RAILS = ("aligned", "rotated")
KINDS = {"storage": ("name", "kind", "op", "storage", "clients", "job", "rate", "duty",
                     "period", "chunk", "start", "class"),
         "checkpoint": ("name", "kind", "job", "storage", "bytes", "every", "start",
                        "class"),
         "stream": ("name", "kind", "from", "to", "rate", "chunk", "start", "class")}
OPS = ("write", "read")


@dataclass(frozen=True)
class JobSpec:
    """One job of the file, as written (defaults filled where the file alone decides)."""

    name: str
    workload: str
    ranks: int = None
    gpus_per_host: int = None
    placement: Placement = Placement.PACKED
    seed: int = 1
    hosts: tuple = ()
    start_s: float = 0.0
    iterations: int = None
    traffic_class: TrafficClass = TrafficClass.LOSSLESS
    rails: str = "aligned"
    index: int = 0
    lines: dict = field(default_factory=dict, compare=False, hash=False)

    def where(self, key=None):
        """``line N, jobs[i].key`` (the line when the file said it)."""
        return _where(f"jobs[{self.index}]", key, self.lines)


@dataclass(frozen=True)
class FlowSpec:
    """One background flow: storage, checkpoint or stream (module docstring)."""

    kind: str
    name: str
    traffic_class: TrafficClass = TrafficClass.LOSSLESS
    start_s: float = 0.0
    op: str = "write"
    storage: tuple = ()
    clients: tuple = ()
    job: str = None
    rate_bps: float = None
    duty: float = 1.0
    period_s: float = 1.0
    chunk: int = None
    nbytes: int = None
    every_s: float = None
    src: str = None
    dst: str = None
    index: int = 0
    lines: dict = field(default_factory=dict, compare=False, hash=False)

    def where(self, key=None):
        return _where(f"background[{self.index}]", key, self.lines)


@dataclass(frozen=True)
class JobsPlan:
    """A jobs file: its jobs, background flows, host sharing and host GPUs."""

    jobs: tuple
    background: tuple = ()
    share_hosts: bool = False
    host_gpus: int = None
    source: str = "<jobs>"
    document: dict = field(default_factory=dict, compare=False, hash=False)

    def job(self, name):
        return next(j for j in self.jobs if j.name == name)


def _where(base, key, lines):
    path = base if key is None else f"{base}.{key}"
    line = lines.get(key) if key is not None else lines.get(None)
    if line is None and key is not None:
        line = lines.get(None)
    return f"line {line}, {path}" if line else path


# -- YAML with the line of every key -------------------------------------------------------
class _Map(dict):
    """A mapping that remembers the line of itself (key None) and of each key."""

    lines = None


class _Seq(list):
    lines = None


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps lines and refuses duplicate keys."""


def _mapping(loader, node):
    out = _Map()
    out.lines = {None: node.start_mark.line + 1}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            dup = key in out
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, f"unhashable key {key!r}",
                                                    key_node.start_mark)
        if dup:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                    key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = key_node.start_mark.line + 1
    return out


def _sequence(loader, node):
    out = _Seq(loader.construct_object(n, deep=True) for n in node.value)
    out.lines = [n.start_mark.line + 1 for n in node.value]
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)


def plain(value):
    """The document without line marks (run.yaml's ``jobs`` block)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def load_file(path):
    """Read and check a jobs file; workload paths are taken from the file's folder."""
    return parse_text(fabric_spec.read_text(path, "the jobs file"), str(path),
                      os.path.dirname(path))


def parse_text(text, source="<jobs>", base_dir="."):
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else None
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(where, f"not valid YAML: {problem}", source=source)
    except (ValueError, TypeError, RecursionError) as e:
        raise ConfigError(None, f"not valid YAML: {e}", source=source)
    return parse(data, source, base_dir)


def from_workloads(text, gpus_per_host=None):
    """The plan of ``--workload simai:A,simai:B``: one packed job per file, named j1, j2..."""
    files = [w for w in text.split(",") if w]
    if not all(w.startswith(SIMAI) and len(w) > len(SIMAI) for w in files):
        raise ConfigError("--workload", f"{text!r}: several jobs are simai:FILE,simai:FILE "
                          "(or a jobs file: jobs:FILE)")
    doc = {"jobs": [{"name": f"j{i + 1}", "workload": w[len(SIMAI):]}
                    for i, w in enumerate(files)]}
    return parse(doc, "--workload", ".")


def is_shared(workload):
    """Whether ``--workload`` names several jobs (a jobs file or several simai: files)."""
    w = str(workload)
    return w.startswith(PREFIX) or (w.startswith(SIMAI) and f",{SIMAI}" in w)


def parse(data, source="<jobs>", base_dir="."):
    """A ``JobsPlan`` from the file's mapping (see the module docstring)."""
    def fail(where, message):
        raise ConfigError(where, message, source=source)

    lines = getattr(data, "lines", None) or {}
    if not isinstance(data, dict):
        fail(None, "the jobs file is a mapping with 'jobs' (and 'background', "
                   "'share_hosts', 'host_gpus')")
    _unknown(data, TOP_KEYS, "", lines, fail)
    share = data.get("share_hosts", False)
    if not isinstance(share, bool):
        fail(_where("share_hosts", None, {None: lines.get("share_hosts")}),
             f"{share!r}: true or false")
    host_gpus = data.get("host_gpus")
    if host_gpus is not None and not _count(host_gpus):
        fail(_where("host_gpus", None, {None: lines.get("host_gpus")}),
             f"{host_gpus!r}: a whole number >= 1")
    items = data.get("jobs")
    if not isinstance(items, list) or not items:
        fail(_where("jobs", None, {None: lines.get("jobs") or lines.get(None)}),
             "a list of at least one job")
    jobs = tuple(_job(i, item, _line(items, i), base_dir, fail) for i, item in enumerate(items))
    names = [j.name for j in jobs]
    for k, j in enumerate(jobs):
        if j.name in names[:k]:
            fail(j.where("name"), f"job name {j.name!r} twice: every job needs its own")
    bg = data.get("background") or []
    if not isinstance(bg, list):
        fail(_where("background", None, {None: lines.get("background")}), "a list of flows")
    flows = tuple(_flow(i, item, _line(bg, i), set(names), fail) for i, item in enumerate(bg))
    for k, f in enumerate(flows):
        if f.name in names or f.name in [g.name for g in flows[:k]]:
            fail(f.where("name"), f"name {f.name!r} is taken: jobs and flows need their own")
    doc = plain(data)
    for j, item in zip(jobs, doc["jobs"]):
        item["workload"] = j.workload          # resolved: run.yaml's copy runs anywhere
    return JobsPlan(jobs, flows, share, host_gpus, source, doc)


def _line(seq, i):
    marks = getattr(seq, "lines", None)
    return marks[i] if marks else None


def _count(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


def _unknown(doc, known, path, lines, fail):
    for key in doc:
        if key not in known:
            where = f"{path}.{key}" if path else str(key)
            line = lines.get(key)
            fail(f"line {line}, {where}" if line else where,
                 f"unknown key {key!r} (known: {', '.join(known)})")


def _marks(item, line):
    marks = dict(getattr(item, "lines", None) or {})
    if line is not None:
        marks.setdefault(None, line)
    return marks


def _job(i, item, line, base_dir, fail):
    marks = _marks(item, line)
    at = lambda key=None: _where(f"jobs[{i}]", key, marks)  # noqa: E731
    if not isinstance(item, dict):
        fail(at(), "a job is a mapping with name and workload")
    _unknown(item, JOB_KEYS, f"jobs[{i}]", marks, fail)
    for key in ("name", "workload"):
        if not isinstance(item.get(key), str) or not item.get(key):
            fail(at(key if key in item else None), f"every job needs a {key}")
    name = item["name"]
    if not NAME_RE.match(name):
        fail(at("name"), f"{name!r}: letters, digits, '-', '_' (at most 24), a letter first")
    path = item["workload"]
    if not os.path.isabs(path):
        path = os.path.normpath(os.path.join(base_dir, path))
    if not os.path.isfile(path):
        fail(at("workload"), f"{path}: no such file")
    values = {}
    for key in ("ranks", "gpus_per_host", "iterations"):
        if key in item and not _count(item[key]):
            fail(at(key), f"{item[key]!r}: a whole number >= 1")
        values[key] = item.get(key)
    seed = item.get("seed", 1)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2 ** 32:
        fail(at("seed"), f"{seed!r}: a seed in 0..2^32-1")
    placement, hosts = item.get("placement", str(Placement.default())), item.get("hosts")
    if isinstance(placement, list):
        if hosts is not None:
            fail(at("hosts"), "hosts twice: a list under placement, and hosts")
        placement, hosts = str(Placement.EXPLICIT), placement
        marks.setdefault("hosts", marks.get("placement"))
    try:
        placement = Placement.parse(placement, "placement")
    except ValueError as e:
        fail(at("placement"), f"{e} (or a list of hosts)")
    if (placement == Placement.EXPLICIT) != (hosts is not None):
        fail(at("hosts" if hosts is not None else "placement"),
             "hosts go with placement: explicit (or a list under placement), and it needs them")
    if hosts is not None and (not isinstance(hosts, list) or not hosts
                              or not all(isinstance(h, str) for h in hosts)):
        fail(at("hosts"), "a list of host names")
    if hosts is not None and len(set(hosts)) != len(hosts):
        fail(at("hosts"), "a host twice in one job's list")
    start = _duration(item.get("start", "0s"), at("start"), fail)
    cls = _class(item.get("class"), at("class"), fail)
    rails = item.get("rails", RAILS[0])
    if rails not in RAILS:
        fail(at("rails"), f"{rails!r}: one of {', '.join(RAILS)}")
    return JobSpec(name, path, values["ranks"], values["gpus_per_host"], placement, seed,
                   tuple(hosts or ()), start, values["iterations"], cls, rails, i, marks)


def _duration(value, where, fail, positive=False):
    try:
        s = parse_duration(value)
    except ValueError as e:
        fail(where, str(e))
    if s < 0 or (positive and s <= 0):
        fail(where, f"{value!r}: {'above' if positive else 'at least'} 0")
    return s


def _class(value, where, fail):
    if value is None:
        return TrafficClass.default()
    try:
        return TrafficClass.parse(value, "class")
    except ValueError as e:
        fail(where, str(e))


def _hosts(value, where, fail, one=False):
    if one:
        if not isinstance(value, str) or not value:
            fail(where, "a host name")
        return (value,)
    if not isinstance(value, list) or not value or not all(isinstance(h, str) for h in value):
        fail(where, "a list of host names")
    return tuple(value)


def _flow(i, item, line, jobs, fail):
    marks = _marks(item, line)
    at = lambda key=None: _where(f"background[{i}]", key, marks)  # noqa: E731
    if not isinstance(item, dict) or item.get("kind") not in KINDS:
        fail(at("kind" if isinstance(item, dict) and "kind" in item else None),
             f"a background flow is a mapping with kind: {' | '.join(KINDS)}")
    kind = item["kind"]
    _unknown(item, KINDS[kind], f"background[{i}]", marks, fail)
    name = item.get("name", f"{kind}{i + 1}")
    if not isinstance(name, str) or not NAME_RE.match(name):
        fail(at("name"), f"{name!r}: letters, digits, '-', '_' (at most 24), a letter first")
    v = {"kind": kind, "name": name, "index": i, "lines": marks,
         "traffic_class": _class(item.get("class"), at("class"), fail),
         "start_s": _duration(item.get("start", "0s"), at("start"), fail)}
    if "job" in item and item["job"] not in jobs:
        fail(at("job"), f"{item['job']!r}: no job of that name (jobs: {', '.join(sorted(jobs))})")
    if kind in ("storage", "checkpoint"):
        if "storage" not in item:
            fail(at(), f"a {kind} flow needs storage: [hosts]")
        v["storage"] = _hosts(item["storage"], at("storage"), fail)
    if kind == "storage":
        op = item.get("op", OPS[0])
        if op not in OPS:
            fail(at("op"), f"{op!r}: write (clients to storage) or read (storage to clients)")
        if ("clients" in item) == ("job" in item):
            fail(at(), "a storage flow needs clients: [hosts] or job: NAME (one of them)")
        v.update(op=op, job=item.get("job"),
                 clients=_hosts(item["clients"], at("clients"), fail) if "clients" in item
                 else ())
        duty = item.get("duty", 1.0)
        if not isinstance(duty, (int, float)) or isinstance(duty, bool) or not 0 < duty <= 1:
            fail(at("duty"), f"{duty!r}: the share of every period the flow sends, 0 < duty <= 1")
        v.update(duty=float(duty), period_s=_duration(item.get("period", "1s"), at("period"),
                                                      fail, positive=True))
    if kind == "checkpoint":
        if "job" not in item or "bytes" not in item or "every" not in item:
            fail(at(), "a checkpoint needs job, bytes (per host) and every (its period)")
        v.update(job=item["job"], nbytes=_size(item["bytes"], at("bytes"), fail),
                 every_s=_duration(item["every"], at("every"), fail, positive=True))
    if kind == "stream":
        if "from" not in item or "to" not in item:
            fail(at(), "a stream needs from: HOST and to: HOST")
        v.update(src=_hosts(item["from"], at("from"), fail, one=True)[0],
                 dst=_hosts(item["to"], at("to"), fail, one=True)[0])
        if v["src"] == v["dst"]:
            fail(at("to"), "a stream from a host to itself")
    if kind in ("storage", "stream"):
        if "rate" not in item:
            fail(at(), f"a {kind} flow needs a rate (e.g. 8Mbps)")
        try:
            v["rate_bps"] = parse_rate(item["rate"])
        except ValueError as e:
            fail(at("rate"), str(e))
        if "chunk" in item:
            v["chunk"] = _size(item["chunk"], at("chunk"), fail)
    return FlowSpec(**v)


def _size(value, where, fail):
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            fail(where, f"{value!r}: a size above 0")
        return value
    if not isinstance(value, str) or "," in value or ":" in value:
        fail(where, f"{value!r}: a size like 4M, 256K or 1048576")
    try:
        return parse_sizes(value, where)[0]
    except ConfigError as e:
        fail(where, e.message)
