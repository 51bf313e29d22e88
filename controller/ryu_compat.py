"""Run apps written for Ryu on os-ken, unchanged: ``ryu`` and ``ryu.*`` ARE ``os_ken.*``.

Model.  os-ken is Ryu with the package renamed (``ryu`` -> ``os_ken``) and
three classes renamed (``RyuApp`` -> ``OSKenApp``, ``RyuException`` ->
``OSKenException``, ``RyuBGPSpeaker`` -> ``OSKenBGPSpeaker``).  ``install()``
puts an import finder first on ``sys.meta_path`` that answers every
``ryu[.X]`` import with the already-imported (or freshly imported) module
object ``os_ken[.X]`` -- the *same* object, not a copy -- so event classes,
``set_ev_cls`` registrations and the OpenFlow parsers a Ryu app sees are the
ones os-ken dispatches on.  The old class names are added as aliases on the
os-ken modules that define the new ones.

What is NOT there (os-ken dropped the sample apps and the WSGI/REST layer
since 2.0): ``preflight(path)`` reads the app's source (no execution) and
names every ``ryu`` import with no os-ken counterpart, with the line, so the
launcher can refuse it with one message instead of a traceback.
"""

import ast
import importlib
import importlib.abc
import importlib.util
import sys

# old name -> (os-ken module, new name)
RENAMES = {
    "RyuApp": ("os_ken.base.app_manager", "OSKenApp"),
    "RyuException": ("os_ken.exception", "OSKenException"),
    "RyuBGPSpeaker": ("os_ken.services.protocols.bgp.application", "OSKenBGPSpeaker"),
}
EAGER = ("os_ken.base.app_manager", "os_ken.exception")
# Known removals, for a more useful message than "no such module".
DROPPED = {
    "ryu.app.wsgi": "os-ken dropped the WSGI/REST layer (since 2.0)",
    "ryu.app.ofctl_rest": "os-ken dropped the WSGI/REST layer (since 2.0)",
    "ryu.app.rest_router": "os-ken dropped the WSGI/REST layer (since 2.0)",
    "ryu.app.simple_switch": "os-ken dropped the sample apps (since 2.0): copy the app",
    "ryu.app.simple_switch_13": "os-ken dropped the sample apps (since 2.0): copy the app",
}


def target(name):
    """``ryu.x.y`` -> ``os_ken.x.y`` (None for names outside ``ryu``)."""
    if name == "ryu":
        return "os_ken"
    if name.startswith("ryu."):
        return "os_ken." + name[4:]
    return None


def _add_aliases(module):
    """Give an os-ken module the Ryu names of the classes it defines."""
    for old, (modname, new) in RENAMES.items():
        if module.__name__ == modname and not hasattr(module, old):
            setattr(module, old, getattr(module, new))


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, real_name):
        self.real_name = real_name

    def create_module(self, spec):
        return importlib.import_module(self.real_name)  # dynamic: an app's name

    def exec_module(self, module):
        # The import system stamped the ryu spec on the shared module object;
        # give os-ken its own back (it has run already: nothing to execute).
        module.__spec__ = self.real_spec
        _add_aliases(module)

    @property
    def real_spec(self):
        return sys.modules[self.real_name].__spec__


class RyuAliasFinder(importlib.abc.MetaPathFinder):
    """Answers ``ryu[.X]`` imports with the module ``os_ken[.X]``."""

    def find_spec(self, fullname, path=None, target_=None):
        real = target(fullname)
        if real is None:
            return None
        if importlib.util.find_spec(real) is None:
            return None               # a plain ModuleNotFoundError for ryu.X follows
        is_pkg = hasattr(importlib.import_module(real), "__path__")  # dynamic: an app's name
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real), is_package=is_pkg)


def install():
    """Make ``import ryu...`` resolve to os-ken in this process (idempotent)."""
    if not any(isinstance(f, RyuAliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, RyuAliasFinder())
    # Alias now, not on import: "from ryu.base import app_manager" takes an
    # already-imported submodule from its package's attributes and never asks
    # the finder.  The BGP speaker is heavy: aliased only if already imported
    # (else on its first import through the finder).
    for modname in EAGER:
        importlib.import_module(modname)  # dynamic: an app's name
    for modname, _ in RENAMES.values():
        if modname in sys.modules:
            _add_aliases(sys.modules[modname])


def _exists(modname):
    try:
        return importlib.util.find_spec(modname) is not None
    except ModuleNotFoundError:         # a parent package is missing
        return False


def preflight(path):
    """Problems with a Ryu app's imports, as 'FILE:LINE: ...' strings (none: [])."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # "from ryu.app import wsgi" may name a submodule: check both forms.
            names = [(node.module, a.name) for a in node.names]
        else:
            continue
        for mod, attr in names:
            real = target(mod)
            if real is None:
                continue
            if attr is not None and target(f"{mod}.{attr}") and f"{mod}.{attr}" in DROPPED:
                mod, attr = f"{mod}.{attr}", None
            if mod in DROPPED or not _exists(real):
                why = DROPPED.get(mod, f"os-ken has no module {real}")
                problems.append(f"{path}:{node.lineno}: imports {mod}: {why}")
    return problems
