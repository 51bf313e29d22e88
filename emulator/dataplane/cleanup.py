"""``python -m emulator clean``: remove what dead runs of this project left.

Only this project's leftovers, found by name and by environment (see
``runstate``): bridges, interfaces and nftables tables named ``fl<tag>...``, processes whose
environment has ``FABRIC_LAB_RUN=<tag>`` (a BGP run's FRR daemons among them: their
namespaces go with them, their sockets with the run's state directory, and the
crash-log directories libfrr keeps per process, /var/tmp/frr/<daemon>.<pid>, are
removed once they are killed), and the runs' state directories.
Runs that are still alive (their lock is held) are left alone unless
``force``.  Other bridges, interfaces and processes are never touched, so
there is no ``mn -c`` here.
"""

import json
import os
import re
import shutil
import signal
import time

from emulator.dataplane import runstate
from emulator.dataplane.links.ifaces import delete_interfaces
from emulator.dataplane.ovs.instances import pidfile_daemons
from emulator.dataplane.routed import frr
from emulator.dataplane.system import netlink, nft, ovs
from emulator.errors import RunFailed


def our_bridges():
    """{bridge: tag} for OVS bridges named like this project's."""
    text = ovs.vsctl("list-br", timeout=20)
    out = {}
    for br in text.split():
        tag = runstate.tag_of_name(br)
        if tag:
            out[br] = tag
    return out


def our_interfaces():
    with netlink.Netlink() as nl:
        names = [name for name, _, _ in nl.interfaces()]
    return {n: runstate.tag_of_name(n) for n in names if runstate.tag_of_name(n)}


NFT_TABLE_RE = re.compile(r"^table netdev (fl([0-9a-f]{4})(?:loss|impair|ecn))$")


def our_nft_tables():
    """{table: tag} for nftables netdev tables named like this project's (random loss)."""
    if not nft.available():
        return {}
    out = {}
    for line in nft.tables("netdev", timeout=20):
        m = NFT_TABLE_RE.match(line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


def journaled_devices(tag, errors):
    """Remove the interfaces without the run's name that dead run ``tag`` journaled as
    its own (a server's ``ovs-netdev``, which its instance's daemon made in that
    namespace: ``dataplane.cluster.worker``); returns those removed."""
    names = set()
    for directory in runstate.state_dirs(tag):
        try:
            with open(os.path.join(directory, "journal")) as f:
                for line in f:
                    entry = json.loads(line)
                    if entry.get("kind") == "interface" and \
                            runstate.tag_of_name(entry.get("what", "")) is None:
                        names.add(entry["what"])
        except (OSError, ValueError):
            continue
    gone = []
    for name in sorted(names):
        try:
            if netlink.delete_link(name):
                gone.append(name)
        except netlink.NetlinkError as e:
            errors.append(f"removing {name}: {e}")
    return gone


def kill_processes(pids, grace=3.0):
    """SIGTERM, wait up to ``grace`` s for them to go, then SIGKILL."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if os.path.exists(f"/proc/{p}")
                 and not _is_zombie(p)}
        if alive:
            time.sleep(0.05)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return sorted(pids)


def _is_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def clean(force=False, log=print):
    """Remove leftovers of dead runs; return a summary dict."""
    bridges = our_bridges()
    procs = runstate.processes_of()
    intfs = our_interfaces()
    tables = our_nft_tables()
    tags = set(bridges.values()) | set(procs.values()) | set(intfs.values()) \
        | set(tables.values()) | set(runstate.known_tags())
    live = {t for t in tags if runstate.is_live(t)} if not force else set()
    summary = {"runs": [], "skipped_live": sorted(live), "bridges": [], "processes": [],
               "instance_daemons": [], "interfaces": [], "errors": []}
    for tag in sorted(tags - live):
        summary["runs"].append(tag)
        dead_bridges = sorted(b for b, t in bridges.items() if t == tag)
        if dead_bridges:
            args = []
            for br in dead_bridges:
                args += ["--", "--if-exists", "del-br", br]
            try:
                ovs.vsctl(*args[1:], timeout=120)
                summary["bridges"] += dead_bridges
            except RunFailed as e:
                summary["errors"].append(str(e))
        # its datapath instances first, by their pid files (never a foreign OVS:
        # only pids that carry the run's tag); their namespaces go with them
        daemons = [pid for d in runstate.state_dirs(tag) for pid in pidfile_daemons(d, tag)]
        summary["instance_daemons"] += kill_processes(daemons)
        pids = [p for p, t in procs.items() if t == tag and p not in daemons]
        routed = {p: frr.daemon_name(p) for p in pids}     # a BGP run's FRR daemons
        summary["processes"] += kill_processes(pids)
        frr.remove_tmpdirs({p: name for p, name in routed.items() if name})
        before = {n for n, t in intfs.items() if t == tag}
        summary["errors"] += delete_interfaces(tag)
        summary["interfaces"] += sorted(before)
        summary["interfaces"] += journaled_devices(tag, summary["errors"])
        for table in sorted(t for t, owner in tables.items() if owner == tag):
            try:
                nft.delete_table(None, table, timeout=20)
            except RunFailed as e:
                summary["errors"].append(str(e))
        for directory in runstate.state_dirs(tag):
            shutil.rmtree(directory, ignore_errors=True)
    runstate.remove_empty_shares()
    for key in ("bridges", "instance_daemons", "processes", "interfaces"):
        log(f"removed {len(summary[key])} {key.replace('_', ' ')}")
    if live:
        log(f"left alone live runs: {', '.join(sorted(live))} (use --force to remove them too)")
    return summary


def leftovers(tag):
    """What of run ``tag`` is still on the machine: {kind: [names]} (empty when clean)."""
    pids = sorted(runstate.processes_of(tag))
    out = {"bridges": [b for b, t in our_bridges().items() if t == tag],
           "interfaces": [i for i, t in our_interfaces().items() if t == tag],
           "nft_tables": [n for n, t in our_nft_tables().items() if t == tag],
           "processes": pids,
           "frr": [p for p in pids if frr.daemon_name(p)],
           "state_dirs": [d for d in runstate.state_dirs(tag) if os.path.exists(d)]}
    return {k: v for k, v in out.items() if v}
