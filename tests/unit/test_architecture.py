"""The shape of the code: layers, no import cycles, no upward imports, small modules,
no configuration through os.environ outside process start-up (reads the source)."""

import ast
import warnings
from pathlib import Path

import pytest

from tests.conftest import REPO

ROOT = Path(REPO)
PACKAGES = ("lab", "emulator", "controller", "traffic")
# Lowest first; a module may import its own layer and the layers before it.
LAYERS = ["lab", "traffic", "controller", "emulator.errors", "emulator.fabric",
          "emulator.dataplane", "emulator.report", "emulator.experiments", "emulator.__main__"]
# What each layer may import besides itself (the order alone is not the rule:
# controller and traffic are separate programs that never import each other's
# parents).
ALLOWED = {
    "lab": set(),
    "traffic": {"lab"},
    "controller": {"lab"},
    "emulator.errors": set(),
    "emulator.fabric": {"lab", "emulator.errors"},
    "emulator.dataplane": {"lab", "emulator.errors", "emulator.fabric", "traffic"},
    "emulator.report": {"lab", "emulator.errors", "emulator.fabric"},
    "emulator.experiments": {"lab", "emulator.errors", "emulator.fabric", "emulator.dataplane",
                             "emulator.report", "traffic"},
    "emulator.__main__": set(LAYERS),
}
WARN_LINES = 450      # a module this long is worth a look: split where the concept splits
MAX_LINES = 600       # ... and one this long must be split
# process start-up: the only places that may set environment variables
ENV_WRITERS_ALLOWED = {("controller/__main__.py", "main")}


def modules():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT)
            name = ".".join(rel.with_suffix("").parts)
            if name.endswith(".__init__"):
                name = name[:-len(".__init__")]
            yield name, path


def imports_of(path, name):
    """Project modules ``name`` imports (function-local imports included)."""
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if m.split(".")[0] in PACKAGES}


def layer_of(module):
    best = None
    for layer in LAYERS:
        if module == layer or module.startswith(layer + "."):
            if best is None or len(layer) > len(best):
                best = layer
    return best


def graph():
    names = dict(modules())
    g = {}
    for name, path in names.items():
        deps = set()
        for m in imports_of(path, name):
            while m and m not in names:          # "pkg.mod.func" -> the module
                m = m.rpartition(".")[0]
            if m and m != name:
                deps.add(m)
        g[name] = deps
    return g


def upward(g):
    bad = []
    for mod, deps in g.items():
        me = layer_of(mod)
        for d in deps:
            other = layer_of(d)
            if other not in (me, None) and other not in ALLOWED[me] \
                    and not (mod == me == "emulator" or d == "emulator"):
                bad.append(f"{mod} -> {d}")
    return sorted(bad)


def cycles(g):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_checkers_catch_what_they_look_for():
    fake = {"emulator.fabric.a": {"emulator.experiments.b"},
            "emulator.experiments.b": {"emulator.fabric.a"}}
    assert upward(fake) == ["emulator.fabric.a -> emulator.experiments.b"]
    assert cycles(fake) == [["emulator.experiments.b", "emulator.fabric.a"]]
    assert cycles({"x": {"y"}, "y": set()}) == []


# The one way into processes and netlink (emulator/dataplane/system/): no other
# module of the emulator imports these (the controller and traffic programs keep
# their own few calls).
SYSTEM_ONLY = ("subprocess", "pyroute2")
SYSTEM_LAYER = "emulator.dataplane.system"


def system_imports(tree):
    """(line, module) of every import of ``SYSTEM_ONLY`` in ``tree`` (function-local
    ones included)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        found += [(node.lineno, n) for n in names if n.split(".")[0] in SYSTEM_ONLY]
    return sorted(found)


def outside_the_system_layer(sources):
    """``sources``: {module name: source text}; ["module:line imports X"] for each
    import of ``SYSTEM_ONLY`` outside the system layer."""
    bad = []
    for name, text in sorted(sources.items()):
        if name == SYSTEM_LAYER or name.startswith(SYSTEM_LAYER + "."):
            continue
        bad += [f"{name}:{line} imports {mod}" for line, mod in system_imports(ast.parse(text))]
    return bad


def test_the_system_layer_checker_catches_a_planted_import():
    planted = {
        "emulator.dataplane.faults": "import json\nfrom pyroute2 import IPRoute\n",
        "emulator.experiments.check": "def f():\n    import subprocess\n    return 1\n",
        "emulator.report.files": "from subprocess import run as r\n",
        "emulator.dataplane.links.ifaces": "import os, pyroute2.netlink\n",
        "emulator.dataplane.system.proc": "import subprocess\n",     # its own: allowed
        "emulator.dataplane.systemic": "import subprocess\n",       # not the layer
        "emulator.fabric.model": "from . import subprocess\nimport subprocesses\n",
    }
    assert outside_the_system_layer(planted) == [
        "emulator.dataplane.faults:2 imports pyroute2",
        "emulator.dataplane.links.ifaces:1 imports pyroute2.netlink",
        "emulator.dataplane.systemic:1 imports subprocess",
        "emulator.experiments.check:2 imports subprocess",
        "emulator.report.files:1 imports subprocess"]


def test_only_the_system_layer_starts_processes_and_speaks_netlink():
    sources = {name: path.read_text() for name, path in modules()
               if name.split(".")[0] == "emulator"}
    assert SYSTEM_LAYER in sources
    assert outside_the_system_layer(sources) == []


def test_the_system_layer_stands_on_nothing_else_of_the_emulator():
    allowed = {"emulator.errors", "traffic.nic.netns"}
    bad = [f"{mod} -> {dep}" for mod, deps in graph().items()
           if mod == SYSTEM_LAYER or mod.startswith(SYSTEM_LAYER + ".")
           for dep in deps if dep not in allowed and not dep.startswith(SYSTEM_LAYER)]
    assert bad == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_no_upward_imports():
    assert upward(graph()) == []


def test_every_module_has_a_layer():
    assert [m for m in graph() if layer_of(m) is None and m != "emulator"] == []


@pytest.mark.parametrize("name,path", list(modules()))
def test_modules_stay_readable(name, path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)}: {n} lines; split it where its concept splits"
    if n > WARN_LINES:
        warnings.warn(f"{path.relative_to(ROOT)}: {n} lines (over {WARN_LINES}): does it hold "
                      "one concept?")


def env_writes(tree):
    """(function, line) of every write to the process environment."""
    found = []

    def walk(node, func):
        for child in ast.iter_child_nodes(node):
            f = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                else func
            target = None
            if isinstance(child, (ast.Assign, ast.AugAssign)):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                target = next((t for t in targets if isinstance(t, ast.Subscript)
                               and ast.unparse(t.value) == "os.environ"), None)
            elif isinstance(child, ast.Delete):
                target = next((t for t in child.targets if isinstance(t, ast.Subscript)
                               and ast.unparse(t.value) == "os.environ"), None)
            elif isinstance(child, ast.Call):
                fn = ast.unparse(child.func)
                if fn in ("os.putenv", "os.unsetenv") or fn.startswith("os.environ.") and \
                        fn.rsplit(".", 1)[1] in ("update", "pop", "setdefault", "clear",
                                                 "popitem"):
                    target = child
            if target is not None:
                found.append((f, child.lineno))
            walk(child, f)
    walk(tree, None)
    return found


def test_env_checker_finds_writes():
    tree = ast.parse("import os\ndef f():\n    os.environ['X'] = '1'\n    os.environ.pop('Y')\n"
                     "os.putenv('Z', '2')\nv = os.environ.get('W')\n")
    assert env_writes(tree) == [("f", 3), ("f", 4), (None, 5)]


def test_no_configuration_through_the_environment():
    bad = []
    for name, path in modules():
        rel = str(path.relative_to(ROOT))
        for func, line in env_writes(ast.parse(path.read_text())):
            if (rel, func) not in ENV_WRITERS_ALLOWED:
                bad.append(f"{rel}:{line} in {func}()")
    assert bad == [], "os.environ written outside process start-up: " + ", ".join(bad)


# Rooms: a folder of the emulator holds a few modules and sub-packages by concern.
ROOMS = ("emulator/dataplane", "emulator/experiments")
MAX_MODULES_PER_ROOM = 10


@pytest.mark.parametrize("room", ROOMS)
def test_a_room_holds_few_modules_and_the_rest_in_sub_packages(room):
    top = sorted(p.name for p in (ROOT / room).glob("*.py"))
    assert len(top) <= MAX_MODULES_PER_ROOM, f"{room}: {len(top)} modules: {top}"


def sub_packages():
    for top in ("emulator", "traffic", "lab"):
        for init in sorted((ROOT / top).rglob("*/__init__.py")):
            yield str(init.parent.relative_to(ROOT)), init


@pytest.mark.parametrize("name,init", list(sub_packages()))
def test_every_sub_package_says_what_lives_there_and_what_it_may_import(name, init):
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    assert len(doc.splitlines()) >= 3, f"{name}: no docstring"
    assert "May import" in doc, f"{name}: its docstring does not say what it may import"


def test_no_sub_package_is_left_without_its_init():
    for room in ROOMS:
        for d in (ROOT / room).iterdir():
            if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py")):
                assert (d / "__init__.py").is_file(), f"{d.relative_to(ROOT)}"


# ---- one run specification, mode names once, rooms by stage ---------------------

MODE_KEYWORDS = {"lb", "failover", "routing", "transport", "cc", "flow_control", "mode", "at",
                 "control", "peering",
                 "ecn_at", "entropy", "default", "choices"}


def mode_names():
    from lab.modes import ENUMS
    return {m.value for e in ENUMS for m in e}


def mode_literals(tree, names):
    """(line, name) of mode names written as string literals where code decides on a
    mode: compared, a parameter's default, a mode keyword's value (``lb="dlb"``,
    ``choices=(...)``), a mode key's value in a dict (``{"cc": "none"}``), returned
    or chosen by a conditional, an annotated default, or one of two or more mode
    names in a collection.  A name used as something else (the ``controller``
    package, a BPF object, a YAML key) is not a mode there."""
    def lit(n):
        return isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names
    found = []
    for node in ast.walk(tree):
        cands = []
        if isinstance(node, ast.Compare):
            member = all(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
            cands = [] if member else [node.left, *node.comparators]
            for c in node.comparators:
                if isinstance(c, (ast.Tuple, ast.List, ast.Set)):
                    cands += c.elts
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            cands = list(node.args.defaults) + [d for d in node.args.kw_defaults if d]
        elif isinstance(node, ast.keyword) and node.arg in MODE_KEYWORDS:
            v = node.value
            cands = [v] + (list(v.elts) if isinstance(v, (ast.Tuple, ast.List, ast.Set)) else [])
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            if sum(map(lit, node.elts)) >= 2:
                cands = node.elts
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            cands = [node.value]
        elif isinstance(node, ast.IfExp):
            cands = [node.body, node.orelse]
        elif isinstance(node, ast.Return) and node.value is not None:
            cands = [node.value]
        elif isinstance(node, ast.Dict):
            cands = [v for k, v in zip(node.keys, node.values)
                     if isinstance(k, ast.Constant) and k.value in MODE_KEYWORDS]
        found += [(c.lineno, c.value) for c in cands if lit(c)]
    return sorted(set(found))


def test_the_mode_scan_finds_what_it_looks_for():
    names = {"ecmp", "dlb", "none"}
    tree = ast.parse("def f(lb='ecmp'):\n    if lb == 'dlb': pass\n    g(cc='none')\n"
                     "    x = {'transport': 'none'}\n    return 'dlb'\n"
                     "import controller\nbpf.load('ecmp')\nif 'dlb' in doc: pass\n")
    assert mode_literals(tree, names) == [(1, "ecmp"), (2, "dlb"), (3, "none"), (4, "none"),
                                          (5, "dlb")]


def test_mode_names_are_written_once_in_lab_modes():
    names = mode_names()
    bad = [f"{path.relative_to(ROOT)}:{line}: {value!r}"
           for name, path in modules() if not name.startswith("lab")
           for line, value in mode_literals(ast.parse(path.read_text()), names)]
    assert bad == [], "mode names outside lab.modes (use its enums): " + ", ".join(bad)


def session_calls(tree):
    """Lines of ``Session(...)`` calls that pass anything but one spec (and ``progress``)."""
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "Session":
            kws = {k.arg for k in node.keywords}
            if len(node.args) != 1 or kws - {"progress"}:
                bad.append(node.lineno)
    return bad


def test_the_session_checker_finds_the_keyword_form():
    tree = ast.parse("Session(spec, progress=p)\nSession(fabric, lb='dlb')\nx.Session(f, seed=1)")
    assert session_calls(tree) == [2, 3]


def test_sessions_are_built_from_a_run_spec_only():
    bad = [f"{path.relative_to(ROOT)}:{line}" for name, path in modules()
           if name.startswith("emulator") for line in session_calls(ast.parse(path.read_text()))]
    assert bad == [], "Session built from keywords, not a RunSpec: " + ", ".join(bad)


def test_drills_and_the_prober_do_not_import_each_other():
    g = graph()
    pairs = [(a, b) for a, deps in g.items() for b in deps
             for x, y in (("drill", "probe"), ("probe", "drill"))
             if a.startswith(f"emulator.experiments.{x}") and b.startswith(
                 f"emulator.experiments.{y}")]
    assert pairs == []


MAX_MODULES_PER_FOLDER = 10


def crowded_folders(root_dirs):
    """Folders (under ``root_dirs``) holding more than MAX_MODULES_PER_FOLDER modules."""
    out = []
    for top in root_dirs:
        for d in [top, *sorted(p for p in top.rglob("*") if p.is_dir())]:
            n = len(list(d.glob("*.py")))
            if n > MAX_MODULES_PER_FOLDER:
                out.append(f"{d.relative_to(ROOT)}: {n}")
    return out


def test_the_folder_checker_counts_modules(tmp_path):
    for i in range(MAX_MODULES_PER_FOLDER + 1):
        (tmp_path / f"m{i}.py").write_text("")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert crowded_folders([tmp_path]) == [f".: {MAX_MODULES_PER_FOLDER + 1}"]
    finally:
        ROOT = saved


def test_no_folder_of_the_emulator_or_the_traffic_engine_holds_more_than_ten_modules():
    assert crowded_folders([ROOT / "emulator", ROOT / "traffic"]) == []


MAX_LATE_IMPORTS = 60


def late_imports(tree):
    """Lines of project imports (and importlib/__import__ calls) made inside functions."""
    out = []

    def walk(node, in_func):
        for ch in ast.iter_child_nodes(node):
            inner = in_func or isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef,
                                               ast.Lambda))
            if in_func and isinstance(ch, ast.ImportFrom) and (
                    ch.level or (ch.module or "").split(".")[0] in PACKAGES):
                out.append(ch.lineno)
            elif in_func and isinstance(ch, ast.Import) and any(
                    a.name.split(".")[0] in PACKAGES for a in ch.names):
                out.append(ch.lineno)
            elif in_func and isinstance(ch, ast.Call) and ast.unparse(ch.func) in (
                    "importlib.import_module", "import_module", "__import__"):
                out.append(ch.lineno)
            walk(ch, inner)
    walk(tree, False)
    return out


def test_the_late_import_counter_counts_what_it_should():
    tree = ast.parse("import emulator\ndef f():\n    from emulator import x\n    import json\n"
                     "    from . import y\n    importlib.import_module('m')\n")
    assert late_imports(tree) == [3, 5, 6]


def test_imports_are_made_at_the_top_of_a_module():
    late = {str(path.relative_to(ROOT)): lines for _, path in modules()
            if (lines := late_imports(ast.parse(path.read_text())))}
    n = sum(len(v) for v in late.values())
    assert n <= MAX_LATE_IMPORTS, f"{n} imports inside functions: {late}"
    text = {str(p.relative_to(ROOT)): p.read_text().splitlines() for _, p in modules()}
    uncommented = [f"{f}:{i}" for f, lines in late.items() for i in lines
                   if "#" not in text[f][i - 1]]
    assert uncommented == [], "each late import says why on its line"
