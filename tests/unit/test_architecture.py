"""The shape of the code: layers, no import cycles, no upward imports, small modules,
no configuration through os.environ outside process start-up (reads the source)."""

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

ROOT = Path(REPO)
PACKAGES = ("emulator", "controller", "traffic")
# Lowest first; a module may import its own layer and the layers before it.
LAYERS = ["traffic", "controller", "emulator.errors", "emulator.fabric",
          "emulator.dataplane", "emulator.report", "emulator.experiments", "emulator.__main__"]
# What each layer may import besides itself (the order alone is not the rule:
# controller and traffic are separate programs that never import each other's
# parents).
ALLOWED = {
    "traffic": set(),
    "controller": set(),
    "emulator.errors": set(),
    "emulator.fabric": {"emulator.errors"},
    "emulator.dataplane": {"emulator.errors", "emulator.fabric", "traffic"},
    "emulator.report": {"emulator.errors", "emulator.fabric"},
    "emulator.experiments": {"emulator.errors", "emulator.fabric", "emulator.dataplane",
                             "emulator.report", "traffic"},
    "emulator.__main__": set(LAYERS),
}
MAX_LINES = 450
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
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)}: {n} lines; split it along a seam"


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
    for room in ROOMS:
        for init in sorted((ROOT / room).glob("*/__init__.py")):
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
