"""The commands of ``python -m emulator`` and their sub-commands, in one registry.

A fabric command (run, drill, probe, check, compare) is a module with
``add_arguments(parser)`` and ``main(spec, args, out)``: ``spec`` is the run's
``RunSpec`` (built once, experiments.spec.build), ``args`` the command's own
options (a drill's faults, a comparison's modes) and ``args.ui_view`` the live
page of ``--ui`` (or None).  A module may also have ``prepare(args)``, which
fills in what the command implies before the spec is built (a comparison's
deep queues).

Sub-commands name what a flag used to choose, and the flags still work:

    drill chaos          = drill --chaos            random faults for --duration s
    drill workload       = drill --workload W       a drill under a collective or job
    drill jobs           = drill --workload jobs:F  a drill under several jobs
    compare routing      = compare --routing M,...  a dragonfly's routing modes
    compare fabrics      = compare --fabrics F,...  the rail fabrics
    compare planes       = compare --planes         dual-plane vs single-plane
    compare cc           = compare --cc C,...       congestion control
    compare lossless     = compare --lossless on,off
    compare jobs         = compare --placements P,...  placements x modes under several jobs
"""

import importlib
from dataclasses import dataclass, field

from emulator.dataplane import session as session_mod
from emulator.dataplane.observe import run_yaml
from emulator.errors import FabricError
from emulator.experiments.shared import jobsfile
from emulator.experiments.spec import build
from emulator.experiments.spec.fabric import load_fabric
from emulator.experiments.spec.options import parse_controls
from emulator.experiments.ui import live
from emulator.fabric import switch_agent


@dataclass(frozen=True)
class Command:
    """One command or sub-command."""
    name: str                 # "drill", "drill chaos"
    module: str               # its add_arguments/main
    flag: str = None          # the option that chose it before it had a name (its dest)
    flag_value: object = None  # that option's value when the sub-command is named alone
    when: object = None        # chosen by its flag only when when(the flag's value) holds
    varying: tuple = ()       # RunSpec fields the command sets per variant (its modes)
    servers: bool = True      # may run on several servers
    shared: tuple = field(default=())   # extra modules adding options to its parser
    controls: bool = False    # runs several control planes side by side (--control a,b)


COMMANDS = (
    Command("run", "emulator.experiments.run"),
    Command("drill", "emulator.experiments.drill.drill",
            varying=("failover", "control", "lb"),
            shared=("emulator.experiments.drill.chaos",), controls=True),
    Command("drill chaos", "emulator.experiments.drill.chaos", "chaos", True,
            varying=("failover", "control")),
    Command("drill jobs", "emulator.experiments.shared.drill", "workload", None,
            varying=("failover",), servers=False, when=jobsfile.is_shared),
    Command("drill workload", "emulator.experiments.drill.workload", "workload", None,
            varying=("failover", "control"), servers=False),
    Command("probe", "emulator.experiments.probe.probe", servers=False),
    Command("check", "emulator.experiments.check", servers=False),
    Command("compare", "emulator.experiments.compare.compare", varying=("lb", "control"),
            servers=False, controls=True,
            shared=("emulator.experiments.compare.routing", "emulator.experiments.compare.rails",
                    "emulator.experiments.shared.compare")),
    Command("compare routing", "emulator.experiments.compare.routing", "routing",
            "minimal,valiant,ugal", varying=("routing", "control"), servers=False),
    Command("compare fabrics", "emulator.experiments.compare.rails", "fabrics",
            "rail-optimized,rail-only", varying=("control",), servers=False),
    Command("compare planes", "emulator.experiments.compare.planes", "planes", True,
            varying=("control",), servers=False),
    Command("compare cc", "emulator.experiments.compare.congestion", "cc", "none,dcqcn",
            varying=("cc", "control"), servers=False),
    Command("compare lossless", "emulator.experiments.compare.lossless", "lossless", "on,off",
            varying=("cc", "control"), servers=False),
    Command("compare jobs", "emulator.experiments.shared.compare", "placements",
            "packed,spread", varying=("lb", "job_placement"), servers=False),
)
BY_NAME = {c.name: c for c in COMMANDS}
HELP = {
    "run": "build the fabric, check it, run traffic, tear down",
    "drill": "failover drill: inject faults under probe traffic, measure loss windows and "
             "recovery (drill chaos: random faults; drill workload: under a job)",
    "probe": "black-box prober: probe every path, find a link that drops or corrupts "
             "silently, isolate it; time to detect and isolate, false suspects",
    "check": "hold a controller (app) to checks: reachability, a flow's path, loss under a "
             "link cut; PASS/FAIL",
    "compare": "load-balancing modes (ecmp, flowlet, dlb, spray) on the same collective: "
               "busbw, uplink spread (compare routing|fabrics|planes|cc|lossless|jobs: other "
               "comparisons)",
}


def variants(top):
    """The sub-commands of command ``top`` (``drill`` -> chaos, workload)."""
    return [c for c in COMMANDS if c.name.startswith(top + " ")]


def add_parsers(sub):
    """One parser per top command; a command with sub-commands takes their name as an
    optional first word (``compare routing ...``)."""
    for top in ("run", "drill", "probe", "check", "compare"):
        cmd = BY_NAME[top]
        p = sub.add_parser(top, help=HELP[top])
        subs = variants(top)
        if subs:
            p.add_argument("variant", nargs="?", choices=[c.name.split()[1] for c in subs],
                           help="what to " + top + " (default: " + top + " itself; "
                                "the flags below also choose it)")
        module(cmd).add_arguments(p)
        for extra in cmd.shared:
            importlib.import_module(extra).add_arguments(p)  # lazy: one per command
        if top in ("drill", "compare"):
            live.add_arguments(p)


def module(cmd):
    return importlib.import_module(cmd.module)   # the command chosen: its own imports


def resolve(args):
    """The Command ``args`` ask for: the sub-command named, else the one its flag chose."""
    top = args.command
    named = getattr(args, "variant", None)
    if named:
        cmd = BY_NAME[f"{top} {named}"]
        if cmd.when is not None and getattr(args, cmd.flag, None) \
                and not cmd.when(getattr(args, cmd.flag)):
            raise FabricError(f"{cmd.name}: --{cmd.flag.replace('_', '-')} "
                              f"{getattr(args, cmd.flag)} is not for it")
        if cmd.flag_value is not None and not getattr(args, cmd.flag, None):
            setattr(args, cmd.flag, cmd.flag_value)
        elif cmd.flag_value is None and not getattr(args, cmd.flag, None):
            raise FabricError(f"{cmd.name} needs --{cmd.flag.replace('_', '-')}")
        return cmd
    for cmd in variants(top):
        value = getattr(args, cmd.flag, None)
        if value and (cmd.when is None or cmd.when(value)):
            return cmd
    return BY_NAME[top]


def execute(args, out=print):
    """Run the fabric command ``args`` ask for; its exit status."""
    if getattr(args, "switch_agent", None) == switch_agent.LIST:
        out(switch_agent.listing())          # --switch-agent list: the profiles, nothing built
        return 0
    cmd = resolve(args)
    if getattr(args, "ui", False):
        live.check_command(cmd.name)          # before anything is read further
    mod = module(cmd)
    if hasattr(mod, "prepare"):
        mod.prepare(args)
    if getattr(args, "spec", None):
        spec = from_file(args, out)
    else:
        fabric, source = load_fabric(args)
        spec = build.from_args(args, fabric, source, varying=cmd.varying, out=out)
    if spec.fabric.cluster is not None and not cmd.servers:
        raise FabricError(f"{cmd.name} runs on one machine only: not with --servers "
                          "(run and drill under probes run on servers)")
    controls = [spec.control]
    if "control" in cmd.varying and getattr(args, "control", None):
        controls = parse_controls(args.control)
        if len(controls) == 1:              # one control plane: the run's own
            spec = build.check(spec.replace(control=controls[0]))
        elif not cmd.controls:
            raise FabricError(f"{cmd.name}: one --control at a time (drill and compare "
                              "take several)")
    session_mod.require_root()
    session_mod.check_dependencies(controls)
    return live.around(mod.main, cmd.name, spec, args, out)


def from_file(args, out):
    """``run --spec FILE``: its RunSpec, with the options given beside it over its fields."""
    try:
        doc = run_yaml.read(args.spec)
    except (OSError, ValueError) as e:
        raise FabricError(f"--spec {args.spec}: {e}") from None
    fabric = source = None
    if args.given & {"fabric", "preset", "param", "layout", "servers", "placement",
                     "ssh_config"}:
        fabric, source = load_fabric(args)
    return build.from_file(doc, args, args.given, f"--spec {args.spec}", fabric, source, out)
