"""SimAI / AICB training workload files (pure): the plain text into a ``Workload``.

The format, as SimAI reads it (``Workload::initialize_workload`` in
aliyun/SimAI ``astra-sim-alibabacloud/astra-sim/workload/Workload.cc``) and
aicb writes it (``workload_generator/SimAI_training_workload_generator.py``):

  line 1   POLICY key: value key: value ...
  line 2   R, the number of rows
  R rows   12 whitespace-separated columns (tabs, spaces or both):
           name  dependency  fwd_ns  fwd_coll  fwd_bytes
                 ig_ns  ig_coll  ig_bytes  wg_ns  wg_coll  wg_bytes  update_ns

Header.  The first token is the parallelism policy; SimAI knows the names
in ``POLICIES`` and exits on any other.  Keys (any order; SimAI reads them
only under the two HYBRID_TRANSFORMER policies, this parser under all):
``model_parallel_NPU_group:`` (TP size, ``tp`` here), ``ep:``, ``pp:``,
``vpp:``, ``ga:``, ``all_gpus:``, ``pp_comm`` (with or without the colon:
bytes sent between pipeline stages per micro-batch), and
``checkpoints: N l1 .. lN`` / ``checkpoint_initiates: N l1 .. lN`` (the
layers where recomputation restarts / is triggered).  Older files carry only
``model_parallel_NPU_group:``.  A missing key takes 1 (``pp_comm`` 0,
``all_gpus`` None: the fabric's ranks decide).  Values are whole numbers
(``4096.0`` counts: aicb writes ``pp_comm`` as a float under sequence
parallelism); zero or negative is an error, except ``pp_comm: 0``.  Unknown
keys (e.g. ``expert_parallel_npu_group:``, which aicb's micro-test writer
emits and SimAI ignores) are kept in ``extra`` and reported in ``unknown``.

Units.  Compute and update columns are SimAI ``Tick``s, and a tick is one
nanosecond (``CLOCK_PERIOD 1``, ``FREQ 1000.0 / CLOCK_PERIOD`` in
``system/Common.hh``: SimAI divides ticks by 1000 to print microseconds).
Sizes are bytes; ``NONE`` means no collective (its size is ignored: aicb
writes the TP size beside some ``NONE``).

Collectives.  ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL, BROADCAST,
bare or with ``_EP`` / ``_DP_EP``.  Groups as SimAI assigns them: a bare
name is the TP group in the fwd and ig columns and the DP group in the wg
column; ``_EP`` the EP group, ``_DP_EP`` the DP_EP group.  SimAI matches by
prefix and silently turns anything else into no collective (``BROADCAST``
included, which aicb writes for its ``norm`` row: SimAI never sends it;
``ALLREDUCEALLTOALL`` parses there as an all-reduce with no group).  Here
BROADCAST is a collective, and every token not listed is kept as an
``Unknown`` naming its line, column and token; that phase is None.

Bad files raise ``ConfigError`` naming the file and the line and how to fix
it: an empty file, a row that has not exactly 12 columns (SimAI reads the
rows as one stream of tokens, so a missing or extra column shifts every later
row there), a number column that is not a whole number, fewer or more rows
than line 2 declares.  Blank lines are skipped.  HYBRID_CUSTOMIZED rows carry
a 13th column, the row's own policy.
"""

from dataclasses import dataclass, field
from typing import NamedTuple

from emulator.errors import ConfigError

POLICIES = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_TRANSFORMER", "DATA", "MICRO",
            "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM",
            "HYBRID_DLRM_ENHANCED", "HYBRID_CUSTOMIZED", "DISTRIBUTED_INFERENCE")
# header key -> name in Workload.parallel
KEYS = {"model_parallel_NPU_group": "tp", "ep": "ep", "pp": "pp", "vpp": "vpp", "ga": "ga",
        "all_gpus": "all_gpus", "pp_comm": "pp_comm"}
LIST_KEYS = ("checkpoints", "checkpoint_initiates")
DEFAULTS = {"tp": 1, "ep": 1, "pp": 1, "vpp": 1, "ga": 1, "all_gpus": None, "pp_comm": 0}
KINDS = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather",
         "REDUCESCATTER": "reducescatter", "ALLTOALL": "alltoall", "BROADCAST": "broadcast"}
PHASES = ("fwd", "ig", "wg")
BARE_GROUP = {"fwd": "TP", "ig": "TP", "wg": "DP"}
SUFFIXES = (("_DP_EP", "DP_EP"), ("_EP", "EP"))
COLUMNS = ("name", "dependency", "fwd_ns", "fwd_collective", "fwd_bytes", "ig_ns",
           "ig_collective", "ig_bytes", "wg_ns", "wg_collective", "wg_bytes", "update_ns")
ROW_HELP = "a row has 12 columns: " + " ".join(COLUMNS)


class Collective(NamedTuple):
    """One phase's collective: kind (allreduce...), group kind (TP, DP, EP, DP_EP), bytes."""

    kind: str
    group: str
    bytes: int


@dataclass(frozen=True)
class Unknown:
    """Something the parser kept but does not run: a header key or a collective token."""

    line: int
    field: str          # "header", "fwd", "ig" or "wg"
    token: str

    def __str__(self):
        if self.field == "header":
            return f"line {self.line}: header key {self.token!r} is not one SimAI reads; kept, unused"
        return (f"line {self.line}: {self.field} collective {self.token!r} is not one SimAI "
                f"runs; that phase of the row has no collective")


@dataclass(frozen=True)
class Layer:
    """One row: compute times (ns), the collective of each phase (None: none), update (ns)."""

    name: str
    line: int
    dependency: int
    fwd_ns: int
    fwd: Collective | None
    ig_ns: int
    ig: Collective | None
    wg_ns: int
    wg: Collective | None
    update_ns: int
    policy: str | None = None       # HYBRID_CUSTOMIZED: the row's own policy (13th column)

    def phase(self, name):
        """(compute ns, collective or None) of phase ``name`` (fwd, ig or wg)."""
        return getattr(self, f"{name}_ns"), getattr(self, name)


@dataclass(frozen=True)
class Workload:
    """A parsed workload file; ``parallel`` holds tp, ep, pp, vpp, ga, all_gpus, pp_comm."""

    parallel: dict
    policy: str
    layers: tuple
    unknown: tuple
    path: str
    checkpoints: tuple = ()
    checkpoint_initiates: tuple = ()
    extra: dict = field(default_factory=dict)

    @property
    def unknown_rows(self):
        """Line numbers of the rows that carry an unknown collective token."""
        return tuple(sorted({u.line for u in self.unknown if u.field in PHASES}))

    def report(self):
        """One line per unknown thing, for the user."""
        return [str(u) for u in self.unknown]


def parse(path):
    """Read and parse the workload file at ``path``."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError("workload", f"cannot read the file: {e.strerror}", source=str(path))
    return parse_text(text, str(path))


def parse_text(text, path="<workload>"):
    """Parse the text of a workload file; ``path`` names it in errors."""
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise ConfigError("line 1", "the file is empty or its first line is blank; a SimAI "
                          "workload starts with a policy line such as 'HYBRID_TRANSFORMER_"
                          "FWD_IN_BCKWD model_parallel_NPU_group: 8 ...'", path)
    policy, parallel, lists, extra, unknown = _header(lines[0], path)
    if len(lines) < 2 or not lines[1].strip():
        raise ConfigError("line 2", "no row count: line 2 must be the number of rows", path)
    count = _whole(lines[1].strip(), "line 2", "the row count", path, minimum=1)
    width = 13 if policy == "HYBRID_CUSTOMIZED" else 12
    layers, last = [], 2
    for number, line in enumerate(lines[2:], start=3):
        cols = line.split()
        if not cols:
            continue
        if len(layers) == count:
            raise ConfigError(f"line {number}", f"line 2 declares {count} rows but the file "
                              f"has more from here; set line 2 to the number of rows "
                              f"(SimAI would ignore them)", path)
        layers.append(_row(cols, number, width, unknown, path))
        last = number
    if len(layers) < count:
        raise ConfigError(f"line {last}", f"the file ends after {len(layers)} rows but line 2 "
                          f"declares {count}; set line 2 to {len(layers)} or restore the "
                          f"missing rows", path)
    for key, layers_named in lists.items():
        bad = [i for i in layers_named if not 0 <= i < count]
        if bad:
            raise ConfigError("line 1", f"{key}: layer {bad[0]} is not a row index "
                              f"0..{count - 1}", path)
    return Workload(parallel, policy, tuple(layers), tuple(unknown), path,
                    tuple(lists.get("checkpoints", ())),
                    tuple(lists.get("checkpoint_initiates", ())), extra)


def _whole(text, where, what, path, minimum=0):
    """``text`` as a whole number >= minimum ('4096.0' counts), else ConfigError."""
    try:
        value = int(text)
    except ValueError:
        try:
            f = float(text)
        except ValueError:
            f = None
        if f is None or not f.is_integer():
            raise ConfigError(where, f"{what}: {text!r} is not a whole number", path)
        value = int(f)
    if value < minimum:
        raise ConfigError(where, f"{what}: {value} must be at least {minimum}", path)
    return value


def _header(line, path):
    tokens = line.split()
    policy = tokens[0]
    if policy not in POLICIES:
        raise ConfigError("line 1", f"{policy!r} is not a parallelism policy SimAI knows; "
                          f"start the line with one of {', '.join(POLICIES)}", path)
    parallel, lists, extra, unknown, seen = dict(DEFAULTS), {}, {}, [], set()
    i = 1
    while i < len(tokens):
        tok = tokens[i]
        key = tok[:-1] if tok.endswith(":") else tok
        if not tok.endswith(":") and key != "pp_comm":
            unknown.append(Unknown(1, "header", tok))       # a stray word
            i += 1
            continue
        if key in seen:
            raise ConfigError("line 1", f"{key!r} is given twice; keep one", path)
        if i + 1 >= len(tokens):
            raise ConfigError("line 1", f"{tok!r} has no value after it", path)
        seen.add(key)
        if key in LIST_KEYS:
            n = _whole(tokens[i + 1], "line 1", key, path)
            items = tokens[i + 2:i + 2 + n]
            if len(items) < n:
                raise ConfigError("line 1", f"{key}: {n} layers announced, "
                                  f"{len(items)} given", path)
            lists[key] = [_whole(t, "line 1", key, path) for t in items]
            i += 2 + n
            continue
        if key in KEYS:
            name = KEYS[key]
            parallel[name] = _whole(tokens[i + 1], "line 1", key, path,
                                    minimum=0 if name == "pp_comm" else 1)
        else:
            extra[key] = tokens[i + 1]
            unknown.append(Unknown(1, "header", key))
        i += 2
    return policy, parallel, lists, extra, unknown


def _collective(token, phase):
    """(kind, group) of a collective token, None for NONE; KeyError if unknown."""
    if token == "NONE":
        return None
    for suffix, group in SUFFIXES:
        if token.endswith(suffix) and token[:-len(suffix)] in KINDS:
            return KINDS[token[:-len(suffix)]], group
    return KINDS[token], BARE_GROUP[phase]


def _row(cols, number, width, unknown, path):
    where = f"line {number}"
    if len(cols) != width:
        raise ConfigError(where, f"{len(cols)} columns; {ROW_HELP}"
                          f"{' and the row policy' if width == 13 else ''}", path)
    nums = {}
    for i in (1, 2, 4, 5, 7, 8, 10, 11):
        nums[COLUMNS[i]] = _whole(cols[i], where, COLUMNS[i], path,
                                  minimum=-(1 << 62) if i == 1 else 0)
    phases = {}
    for phase, tok_i in zip(PHASES, (3, 6, 9)):
        token = cols[tok_i]
        try:
            kg = _collective(token, phase)
        except KeyError:
            unknown.append(Unknown(number, phase, token))
            kg = None
        phases[phase] = Collective(*kg, nums[f"{phase}_bytes"]) if kg else None
    row_policy = None
    if width == 13:
        row_policy = cols[12]
        if row_policy not in POLICIES:
            raise ConfigError(where, f"row policy {row_policy!r} is not one of "
                              f"{', '.join(POLICIES)}", path)
    return Layer(cols[0], number, nums["dependency"], nums["fwd_ns"], phases["fwd"],
                 nums["ig_ns"], phases["ig"], nums["wg_ns"], phases["wg"], nums["update_ns"],
                 row_policy)


@dataclass(frozen=True)
class Layout:
    """Where a file's rows run in an iteration (``layout``): row indices."""

    prefix: tuple        # once per iteration, before the micro-batches
    blocks: tuple        # one tuple of rows per micro-batch (ga of them)
    suffix: tuple        # once per iteration, after them
    found: bool          # the ga blocks were found as repeats in the file

    def describe(self):
        """One line for the user."""
        if len(self.blocks) == 1:
            return (f"{len(self.blocks[0])} rows as one micro-batch"
                    + ("" if self.found else " (ga > 1, but the rows do not repeat ga times)"))
        return (f"prefix {len(self.prefix)} rows, {len(self.blocks)} micro-batches of "
                f"{len(self.blocks[0])} rows, suffix {len(self.suffix)} rows")


def layout(workload):
    """AICB's layout of an iteration (``SIMAI_workload.workload_generate`` in aliyun/aicb
    ``workload_generator/SimAI_training_workload_generator.py``): rows written once
    before its gradient-accumulation loop (``grad_norm``, ``layernorm``, the MoE norms),
    then ``ga`` copies of the micro-batch's layers (with per-micro-batch rows such as
    ``embedding_norm``), then rows written once after it (``cross_entropy*``,
    ``optimizer*``).  SimAI's own example files have the same shape.

    Found as the longest block of rows whose names repeat ``ga`` times back to back
    (the first such block from the top); the rows before it are the prefix, the rows
    after the last copy the suffix.  With ``ga`` 1, or no repeat, every row is one
    micro-batch (``found`` False when ``ga`` > 1): each row runs once, as SimAI runs it."""
    names = [layer.name for layer in workload.layers]
    n, ga = len(names), workload.parallel["ga"]
    if ga > 1:
        for b in range(n // ga, 0, -1):
            span = (ga - 1) * b              # names[i] == names[i + b] over this many rows
            run = 0
            for i in range(n - b):
                run = run + 1 if names[i] == names[i + b] else 0
                if run == span:
                    p = i - span + 1
                    blocks = tuple(tuple(range(p + m * b, p + (m + 1) * b)) for m in range(ga))
                    return Layout(tuple(range(p)), blocks, tuple(range(p + ga * b, n)), True)
    return Layout((), (tuple(range(n)),), (), ga == 1)
