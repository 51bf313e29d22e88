"""Build a run's ``RunSpec`` once: from a command line, or from a ``run.yaml`` plus flags.

Every option of a run lands in one field of the spec (``fabric.runspec``);
what a workload implies is resolved here, so the spec says what ran:

* ``--cc`` left out: ``dcqcn`` for a training job and a dragonfly pattern
  over RC (RoCE NICs ship with it), ``none`` otherwise;
* ``--ecn`` left out under DCQCN: the default thresholds scaled to the
  fabric's queues (``dataplane.lossless.ecn.default_ecn``);
* ``--job-seed`` left out: drawn now, so ``run.yaml`` replays the same QPs;
* ``--workload jobs:FILE``: the file's document, read now (``jobs``), so
  ``run.yaml`` reruns it without the file.

Then the spec is checked against the fabric (transport, congestion-control
parameters, captures, telemetry port, switch agents, the page): one
``ConfigError`` (exit 2) before anything is built.
"""

import argparse
import copy
import secrets
import socket

from emulator.dataplane.lossless import ecn
from emulator.dataplane.lossless.ecn import default_ecn
from emulator.dataplane.observe import capture
from emulator.dataplane.routed.setup import check as check_routed
from emulator.errors import ConfigError, FabricError
from emulator.experiments.shared import jobsfile
from emulator.experiments.spec import ccparams
from emulator.fabric import addressing, switch_agent
from emulator.fabric.runspec import RunSpec
from lab.modes import CC, Transport

# command-line destinations whose field has another name, or another form
RENAMED = {"cc_param": "cc_params"}
TRAINING_CC_NOTE = ("... congestion control: dcqcn, with ECN marking at the switch ports "
                    "(RoCE NICs' default; --cc none turns it off)")


def values_of(args, varying=()):
    """{field: value} of the options ``args`` holds (None left out: the spec's default);
    ``varying``: fields the command sets per variant (drill's failover modes ...)."""
    out = {}
    for name in RunSpec.field_names():
        dest = next((d for d, f in RENAMED.items() if f == name), name)
        if name in varying or not hasattr(args, dest):
            continue
        value = getattr(args, dest)
        if value is None:
            continue
        if name == "hosts" and isinstance(value, str):
            value = tuple(h for h in value.split(",") if h)
        out[name] = value
    return out


def implied_cc(workload, transport, cc):
    """``--cc`` as the workload implies it (see the module docstring)."""
    if cc is not None:
        return cc
    trains = str(workload).startswith(("simai:", "jobs:")) or \
        workload in ("adversarial", "permutation")
    return CC.DCQCN if trains and transport == Transport.RC else CC.NONE


def from_args(args, fabric, source=None, varying=(), out=None, **resolved):
    """The RunSpec of ``args`` on ``fabric``; ``resolved``: fields the command worked out
    itself (a drill's hold-down); ``out``: where to say what was implied."""
    values = values_of(args, varying)
    values.update(resolved)
    return complete(RunSpec(fabric=fabric, fabric_source=source or {},
                            **_with_cc(values, out)))


def _with_cc(values, out):
    given = values.get("cc")
    values["cc"] = implied_cc(values.get("workload", "mix"),
                              values.get("transport", Transport.RC), given)
    if given is None and values["cc"] == CC.DCQCN and out is not None:
        out(TRAINING_CC_NOTE)
    return values


def complete(spec):
    """``spec`` with its implied ECN thresholds and a drawn job seed, checked."""
    changes = {}
    if spec.cc == CC.DCQCN and spec.ecn is None:
        changes["ecn"] = default_ecn(spec.fabric, spec.queue_ms, spec.ecn_at).spec()
    if spec.job_seed is None:
        changes["job_seed"] = secrets.randbelow(1 << 32)
    if spec.jobs is None and str(spec.workload).startswith(jobsfile.PREFIX):
        changes["jobs"] = jobsfile.load_file(spec.workload[len(jobsfile.PREFIX):]).document
    if changes:
        spec = spec.replace(**changes)
    check(spec)
    return spec


def check(spec):
    """Everything about ``spec`` that can be known before a fabric is built (exit 2)."""
    if spec.cc != CC.NONE and spec.transport != Transport.RC:
        raise ConfigError("--cc", f"{spec.cc} needs --transport rc (it reacts to the RC "
                                  "transport's CNPs or ACKs)")
    ccparams.parse(list(spec.cc_params), spec.cc)
    ecn.parse(spec.ecn, at=spec.ecn_at)
    if spec.capture:
        capture.parse(spec.capture, addressing.plan(spec.fabric))
    check_telemetry(spec.telemetry)
    switch_agent.for_run(spec.switch_agent, spec.fabric, spec.controller)
    if spec.ui_bind != "127.0.0.1" and not spec.ui:
        raise ConfigError("--ui-bind", "needs --ui")
    if spec.ui and spec.fabric.cluster is not None:
        raise ConfigError("--ui", "runs on one machine only: not with --servers")
    if spec.control.routed:
        check_routed(spec)
    return spec


def check_telemetry(port):
    """``--telemetry PORT``: a port number this machine can listen on."""
    if port is None:
        return
    if not 0 < port < 65536:
        raise ConfigError("--telemetry", f"{port}: a TCP port, 1-65535")
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise ConfigError("--telemetry", f"127.0.0.1:{port} is not free ({e.strerror}): "
                                             "choose another port")


def given_options(parser, argv):
    """The destinations ``argv`` sets explicitly (not by default): ``parser`` parsed
    again with every default suppressed."""
    quiet = copy.deepcopy(parser)
    for p in _parsers(quiet):
        for action in p._actions:
            if action.option_strings and action.dest != "help":
                action.default = argparse.SUPPRESS
    ns, _ = quiet.parse_known_args(argv)
    return set(vars(ns)) - {"command"}


def _parsers(parser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def from_file(doc, args, given, where, fabric=None, source=None, out=None):
    """The RunSpec of a ``run.yaml`` document with the explicitly ``given`` options of
    ``args`` over its fields (and ``fabric``, when -f/-p/-P chose another)."""
    try:
        base = RunSpec.from_doc(doc, where)
    except (TypeError, ValueError) as e:
        raise FabricError(f"{where}: {e}") from None
    changes = {f: v for f, v in values_of(args).items()
               if next((d for d, g in RENAMED.items() if g == f), f) in given}
    if fabric is not None:
        changes.update(fabric=fabric, fabric_source=source or {})
    if "workload" in changes:
        changes["jobs"] = None           # another jobs file: read it anew
    if "cc" in changes and "ecn" not in changes:
        changes["ecn"] = None            # the new congestion control's implied marking
    return complete(base.replace(**changes))


def command_doc(name, args):
    """run.yaml's ``command`` block: the command and its own options (those that are not
    RunSpec fields), as plain values."""
    fields = set(RunSpec.field_names()) | set(RENAMED)
    skip = fields | {"command", "variant", "given", "ui_view", "fabric", "preset", "param",
                     "servers", "placement", "ssh_config", "spec"}
    options = {k: v for k, v in sorted(vars(args).items())
               if k not in skip and (v is None or isinstance(v, (bool, int, float, str)) or
                                     isinstance(v, list) and all(isinstance(x, (int, float, str))
                                                                 for x in v))}
    return {"name": name, "options": options}
