"""Build a run's ``RunSpec`` once: from a command line, or from a ``run.yaml`` plus flags.

Every option of a run lands in one field of the spec (``fabric.runspec``);
what a workload implies is resolved here, so the spec says what ran:

* ``--cc`` left out: ``dcqcn`` for a training job and a dragonfly pattern
  over RC (RoCE NICs ship with it), ``none`` otherwise;
* ``--cc`` left out with ``--transport uet``: ``nscc``;
* ``--ecn`` left out under DCQCN: the default thresholds scaled to the
  fabric's queues (``dataplane.lossless.ecn.default_ecn``); under NSCC 0.2 to 0.8
  BDP (``spec.uet``);
* ``--trim-at`` left out with ``--trim``: one BDP (``spec.uet``);
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
from emulator.experiments.spec import uet as uet_spec
from emulator.fabric import addressing, switch_agent
from emulator.fabric.runspec import RunSpec
from lab.modes import CC, EcnAt, Entropy, FlowControl, Transport

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
    if transport == Transport.UET:
        return CC.NSCC
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


def variant_label(transport, mode):
    """A compared variant's name: ``uet/ecmp`` (the mode alone for RC, as before)."""
    return str(mode) if Transport(transport) == Transport.RC else f"{transport}/{mode}"


def parse_variant(label):
    """(transport, load-balancing mode) of ``variant_label``'s name."""
    transport, sep, mode = str(label).rpartition("/")
    return (Transport(transport) if sep else Transport.RC), mode


def transport_changes(spec, transport):
    """What ``spec`` becomes with ``transport`` (a comparison's variant): its
    congestion control and ECN marking as ``--transport`` would have implied them
    (NSCC and its marking for UET unless given), trimming only for UET."""
    t = Transport(transport)
    if t == spec.transport:
        return {}
    changes = {"transport": t}
    if spec.cc.transport not in (None, t) or (t == Transport.UET and spec.cc == CC.NONE):
        changes["cc"] = CC.NSCC if t == Transport.UET else CC.NONE
    cc = changes.get("cc", spec.cc)
    if cc == CC.NSCC and (spec.ecn is None or spec.cc == CC.DCQCN):
        changes["ecn"] = uet_spec.default_ecn(spec.fabric, spec.mtu, spec.ecn_at).spec()
    if t != Transport.UET:
        changes["trim"] = changes["trim_at"] = None
    return changes


def complete(spec):
    """``spec`` with its implied ECN thresholds, trimming threshold and a drawn job
    seed, checked."""
    changes = {}
    if spec.cc == CC.DCQCN and spec.ecn is None:
        changes["ecn"] = default_ecn(spec.fabric, spec.queue_ms, spec.ecn_at).spec()
    if spec.cc == CC.NSCC and spec.ecn is None:
        changes["ecn"] = uet_spec.default_ecn(spec.fabric, spec.mtu, spec.ecn_at).spec()
    if spec.trim is not None and spec.trim_at is None:
        changes["trim_at"] = uet_spec.default_trim_at(spec.fabric, spec.mtu)
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
    if spec.cc.transport not in (None, spec.transport):
        raise ConfigError("--cc", f"{spec.cc} needs --transport {spec.cc.transport} (it reacts "
                                  f"to that transport's frames)")
    if spec.transport == Transport.UET and spec.lb.entropy != Entropy.QP:
        raise ConfigError("--lb", f"{spec.lb} sets RoCE NICs' entropy; --transport uet picks "
                                  "every packet's entropy itself (--ev-policy, --ev-set): "
                                  "use --lb ecmp (or dlb, packet) with it")
    if spec.trim is not None:
        if spec.trim < uet_spec.MIN_TRIM:
            raise ConfigError("--trim", f"{spec.trim}: at least {uet_spec.MIN_TRIM} bytes")
        if spec.fabric.flow_control != FlowControl.NONE:
            raise ConfigError("--trim", f"the fabric is lossless ({spec.fabric.flow_control}): "
                                        "its lossless class pauses instead of trimming; "
                                        "trimming needs lossy links (flow_control: none)")
        if spec.ecn is not None and spec.ecn_at == EcnAt.ENQUEUE:
            raise ConfigError("--trim", "trimming counts the queues at dequeue (eBPF): "
                                        "use it with --ecn-at dequeue")
        if spec.control.routed:
            raise ConfigError("--trim", f"the routers of --control {spec.control} keep one "
                                        "queue per port (no class ahead of data): trimming "
                                        "needs --control openflow")
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
