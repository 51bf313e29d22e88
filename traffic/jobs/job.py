"""A training job in one process: every rank's program, every NIC's traffic.

Model.  ``python -m traffic job --config FILE.json --out RESULT.json`` runs a
job (``job_config``: endpoints, ranks, per-rank programs of compute, collective,
wait and send/recv ops).  One process serves every endpoint of the job:

1. Every endpoint's sockets are opened inside its namespace (``job_nic``);
   the next-hop MAC of every peer it talks to is read from its namespace's
   neighbour table once a datagram made the kernel ARP (or taken from the
   config's ``next_hop_mac``, else the peer's ``mac``); every full-size
   frame and every responder's ACK/CNP frame is built (scapy) before the
   start.  Then the process says ``ready`` (and, with ``--wait-go``, waits
   for ``go`` on stdin).
2. One loop: the ranks' programs advance (``job_program``: compute timers,
   collectives starting when their last member arrives, blocking,
   non-blocking and wait semantics); a collective that needs the network
   gets a ``job_coll.NetRun`` that queues its steps on its endpoints' NICs;
   each NIC sends what its token bucket and its QPs allow; readable
   receive sockets are drained.  The loop wakes at most once per tick
   (``tick_ms``), then as soon as a timer is due (the next packet a bucket
   allows, a compute op's end, a transport timer, a step timeout) or a
   frame arrives, through one ``selectors`` poll over every socket.
3. The result (``result``): per instance its start (the last member's
   arrival), end, time, missing and corrupted chunks, retransmitted bytes;
   per rank each op's times; per endpoint its frame counters, socket drops,
   transport counters and DCQCN cuts; and the engine's own CPU time, CPU per
   packet (sent + received), wake-ups and lateness (how far behind its
   timers it ran) -- what tells the emulator's limits from the network's.

A QP out of retries aborts the job (NCCL aborts the communicator on that
error), as a deadlock of the programs does (``job_program.Deadlock``).
"""

import gc
import selectors
import signal
import socket
import sys
import time
from array import array

from lab.modes import Transport
from traffic.engine import _cpu, percentiles, write_doc
from traffic.jobs.coll import NetRun, steps_of
from traffic.jobs.config import JobConfigError, load_job, owner_of
from traffic.jobs.nic import JobNic
from traffic.jobs.program import Deadlock, JobProgram
from traffic.nic.netns import entered
from traffic.ranks.barrier import next_hop_macs
from traffic.ranks.config import qpn
from traffic.ranks.report import bandwidths

LATE_BIN_NS = 100_000             # lateness histogram: 0.1 ms bins up to 1 s
LATE_BINS = 10_000
POLL_CAP_S = 0.05                 # the longest wait with no timer due
DRAIN_NS = 30_000_000_000         # daemons' transfers on the wire when the job ends: their
                                  # time to finish before they are cut off


def talks(job):
    """(sender endpoint, receiver endpoint) pairs of every network instance."""
    pairs, shapes = set(), set()
    for inst in job.instances.values():
        if not inst.network or (inst.kind, inst.endpoints) in shapes:
            continue
        shapes.add((inst.kind, inst.endpoints))
        for ep, steps in zip(inst.endpoints, steps_of(inst)):
            pairs |= {(ep, t.peer) for st in steps for t in st.sends}
    return pairs


class JobEngine:
    """Runs a validated ``job_config.Job``; ``run`` returns the result document."""

    def __init__(self, job, clock=time.monotonic_ns):
        self.job, self.clock = job, clock
        self.pairs = talks(job)
        eps = job.endpoints
        self.partners = {i: set() for i in range(len(eps))}
        for a, b in self.pairs:
            self.partners[a].add(b)
            self.partners[b].add(a)
        # each instance's owner (``job_config.owner_of``), by tag: the NICs count per owner
        self.owners = sorted({owner_of(c) for c in job.instances})
        tag_owner = [0] * (len(job.instances) + 1)
        tag_class = [0] * (len(job.instances) + 1) if job.owner_class else None
        for inst in job.instances.values():
            tag_owner[inst.tag] = self.owners.index(owner_of(inst.id))
            if tag_class is not None:
                tag_class[inst.tag] = job.owner_class.get(owner_of(inst.id), 0)
        self.nics = []
        try:
            for i, spec in enumerate(eps):
                self.nics.append(JobNic(i, spec, job.nic,
                                        {j: eps[j] for j in self.partners[i]}, clock,
                                        job.tick_ns, job.timelines, tag_owner, job.classes,
                                        tag_class))
        except BaseException:
            self.close()
            raise

    def close(self):
        for nic in self.nics:
            nic.close()

    # -- before the start ------------------------------------------------------------
    def prepare(self):
        """Resolve the next-hop MACs, build every frame; scapy's objects are frozen."""
        self._resolve()
        nic_cfg = self.job.nic
        for a, b in sorted(self.pairs):
            self.nics[a].out.prepare(b)
            stack = self.nics[b].stack
            if stack:                 # the responder of each incoming QP or PDC, its frames
                ip = self.job.endpoints[a]["ip"]
                mac = self.nics[b].peer_mac[a]
                stack.uet.prepare(socket.inet_aton(ip), mac, ip)
                for q in range(nic_cfg["qps"] * max(1, len(self.job.classes))):
                    stack.rc.prepare(socket.inet_aton(ip), mac, ip,
                                     qpn(a, b, q, nic_cfg["qpn_seed"]))
        # a full GC pass over scapy's objects stalls the loop for tens of ms: exempt them
        gc.collect()
        gc.freeze()

    def _resolve(self):
        eps = self.job.endpoints
        pending = {}
        for nic in self.nics:
            for j in self.partners[nic.index]:
                if eps[j].get("next_hop_mac"):
                    nic.peer_mac[j] = eps[j]["next_hop_mac"]
                else:
                    pending.setdefault(nic.index, set()).add(j)
        end = time.monotonic() + self.job.resolve_timeout_s
        while pending and time.monotonic() < end:
            for i, js in pending.items():
                for j in js:          # the kernel ARPs for the next hop of a datagram
                    try:
                        self.nics[i].udp.sendto(b"arp", (eps[j]["ip"], 9))
                    except OSError:
                        pass          # no route yet: the next round tries again
            time.sleep(0.05)          # a poll interval while the kernels ARP
            for i, js in list(pending.items()):
                try:
                    with entered(eps[i].get("netns")):
                        found = next_hop_macs([eps[j]["ip"] for j in js])
                except Exception:     # no pyroute2 route lookup: the config's MACs
                    found = {}
                for j in list(js):
                    if found.get(eps[j]["ip"]):
                        self.nics[i].peer_mac[j] = found[eps[j]["ip"]]
                        js.discard(j)
                if not js:
                    del pending[i]
        for i, js in pending.items():
            for j in js:
                if not eps[j].get("mac"):
                    raise RuntimeError(f"no MAC for {eps[j]['name']} ({eps[j]['ip']}) "
                                       f"from {eps[i]['name']}")
                self.nics[i].peer_mac[j] = eps[j]["mac"]

    # -- the loop ------------------------------------------------------------------------
    def run(self, stop=lambda: False):
        job, clock, nics = self.job, self.clock, self.nics
        tick = job.tick_ns
        prog = JobProgram(job.programs, job.instances, job.daemons)
        runs, ended, late_start = {}, {}, {}
        rc = Transport(job.nic["transport"]).reliable
        sel = selectors.DefaultSelector()
        for nic in nics:
            sel.register(nic.rx, selectors.EVENT_READ, nic)
        hist = array("I", bytes(4 * LATE_BINS))
        late = [0, 0, 0]              # samples, sum, max (ns)
        stalls, aborted, wakeups = [], None, 0
        cpu0 = _cpu()
        t0 = clock()
        deadline = t0 + int(job.deadline_s * 1e9) if job.deadline_s else None
        ready, prev, closing = nics, None, None

        def launch(now):
            for inst in prog.advance(now - t0):
                late_start[inst.id] = now - t0 - prog.instance_times(inst.id)[0]
                runs[inst.id] = NetRun(inst, nics, now)

        while True:
            start = clock()
            if prev is not None and start - prev > 10_000_000:
                stalls.append((round((prev - t0) / 1e6, 1), round((start - prev) / 1e6, 1)))
            prev = start
            for nic in ready:
                nic.drain()
            now = clock()
            if rc:
                for nic in nics:
                    nic.poll_rc(now)
            launch(now)
            moved = True
            while moved:
                moved = False
                for cid, run in list(runs.items()):
                    if run.poll(now):
                        del runs[cid]
                        ended[cid] = (run, run.wrong())
                        for p in run.parts:
                            p.nic.forget(run.tag)
                        prog.network_done(cid, run.end - t0)
                        moved = True
                if moved:
                    launch(now)
            wait_tx = None
            for nic in nics:
                if nic.busy():
                    w = nic.transmit(now)
                    if w is not None and (wait_tx is None or w < wait_tx):
                        wait_tx = w
            if rc and any(nic.rc.any_failed for nic in nics):
                aborted = "a QP ran out of retries (transport retry counter exceeded)"
            elif stop():
                aborted = "stopped"
            elif deadline is not None and now >= deadline:
                aborted = "deadline_s passed"
            elif prog.finished() and all(self.daemon_only(r.inst) for r in runs.values()):
                if not runs:
                    break
                if closing is None:           # the daemons start nothing new; what they
                    prog.freeze(job.daemons)  # have on the wire finishes
                    closing = now
                elif now - closing > DRAIN_NS:
                    break
            elif not runs:
                try:
                    prog.check(now - t0)
                except Deadlock as e:
                    aborted = f"deadlock: {e}"
            if aborted:
                break
            due = [] if wait_tx is None else [now + wait_tx]
            t = prog.next_timer()
            if t is not None:
                due.append(t0 + t)
            due += [t for t in (r.next_timer() for r in runs.values()) if t is not None]
            if rc:
                due += [nic.rc_due for nic in nics if nic.rc_due is not None]
            wake = min(due) if due else None
            # at most one pass per tick: what falls due within it waits for the tick
            t = clock()
            if t < start + tick:
                time.sleep((start + tick - t) / 1e9)
                t = clock()
            timeout = POLL_CAP_S if wake is None else min(max(wake - t, 0) / 1e9, POLL_CAP_S)
            ready = [key.data for key, _ in sel.select(timeout)]
            wakeups += 1
            if wake is not None:
                woke = clock()
                if woke >= wake:      # a timer's pass: how far behind it ran
                    d = woke - wake
                    hist[min(d // LATE_BIN_NS, LATE_BINS - 1)] += 1
                    late[0] += 1
                    late[1] += d
                    late[2] = max(late[2], d)
        if rc:                         # the job's end closes its PDCs (UET)
            for nic in nics:
                nic.stack.uet.close_all(clock())
        cpu = _cpu() - cpu0
        wall = clock() - t0
        sel.close()
        cut = set()
        for cid, run in runs.items():  # still running: the job aborted, or daemons' cut off
            ended[cid] = (run, run.wrong())
            if not aborted:
                cut.add(cid)
        return self.result(prog, ended, late_start, t0, wall, cpu, wakeups, hist, late,
                           stalls, aborted, cut)

    # -- the result ----------------------------------------------------------------------
    def timeline(self, inst, t0):
        """A send/recv pair's timeline (ns since the job began): when the sender's
        first new packet left and when its queue of new ones ran empty; the bytes the
        receiver accepted, [[arrival ns, bytes so far], ...]."""
        src, dst = (self.nics[e] for e in inst.endpoints)
        first, drained = src.tx_first.get(inst.tag), src.tx_drained.get(inst.tag)
        return {"tx_first_ns": None if first is None else first - t0,
                "tx_drained_ns": None if drained is None else drained - t0,
                "rx_timeline": [[t - t0, b] for t, b in dst.rx_line.get(inst.tag, ())]}
    def daemon_only(self, inst):
        """Every member of ``inst`` is a daemon (cut off when the others have finished)."""
        return bool(self.job.daemons) and set(inst.members) <= self.job.daemons

    def result(self, prog, ended, late_start, t0, wall, cpu, wakeups, hist, late, stalls,
               aborted, cut=frozenset()):
        job, nics = self.job, self.nics
        names = [e["name"] for e in job.endpoints]
        insts = []
        for inst in sorted(job.instances.values(), key=lambda i: i.tag):
            start, net_end, end = prog.instance_times(inst.id)
            row = {"id": inst.id, "kind": inst.kind, "group": inst.group,
                   "members": list(inst.members), "bytes": inst.nbytes, "tag": inst.tag,
                   "endpoints": [names[e] for e in inst.endpoints], "network": inst.network,
                   "local_ns": inst.local_ns, "start_ns": start, "end_ns": end,
                   "time_s": None if end is None or start is None else (end - start) / 1e9,
                   "network_s": None if net_end is None else (net_end - start) / 1e9,
                   "launch_late_ns": late_start.get(inst.id)}
            if inst.id in ended:
                run, (missing, corrupted) = ended[inst.id]
                parts = [p.nic for p in run.parts]
                if inst.id in cut:      # a daemon's transfer the job's end cut off
                    missing = corrupted = None
                row.update({"chunks_missing": missing, "chunks_corrupted": corrupted,
                            "wrong": None if missing is None else missing + corrupted,
                            "cut_off": inst.id in cut,
                            "bytes_sent": sum(n.tx_bytes.get(inst.tag, 0) for n in parts),
                            "bytes_received": sum(n.rx_bytes.get(inst.tag, 0) for n in parts),
                            "retransmitted_bytes": sum(n.retx_bytes.get(inst.tag, 0)
                                                       for n in parts)})
                if inst.kind == "p2p" and job.timelines:
                    row.update(self.timeline(inst, t0))
                if net_end is not None and net_end > start and inst.kind != "p2p":
                    link = min(job.endpoints[e]["rate_bps"] for e in inst.endpoints)
                    bw = bandwidths(inst.kind, len(inst.endpoints), inst.nbytes,
                                    (net_end - start) / 1e9, link)
                    row.update({"busbw_Mbps": round(bw["busbw_Mbps"], 3),
                                "efficiency": round(bw["efficiency"], 4)})
            elif inst.network:        # never reached the network (an aborted job)
                row.update({"chunks_missing": None, "chunks_corrupted": None, "wrong": None})
            else:
                row.update({"chunks_missing": 0, "chunks_corrupted": 0, "wrong": 0,
                            "bytes_sent": 0, "bytes_received": 0, "retransmitted_bytes": 0})
            insts.append(row)
        ranks = [{"rank": r, "endpoint": names[job.ranks[r]], "ops": prog.rank_records(r),
                  "end_ns": prog.t[r]} for r in range(len(job.ranks))]
        eps = [nic.result(t0, self.owners) for nic in nics]
        sent = sum(e["data_frames_sent"] for e in eps)
        received = sum(e["data_frames_received"] for e in eps)
        control = sum(e["control_frames_sent"] + e["control_frames_received"] for e in eps)
        launches = [v for v in late_start.values() if v is not None]
        engine = {"cpu_s": round(cpu, 4), "wall_s": round(wall / 1e9, 4), "wakeups": wakeups,
                  "tick_ms": job.tick_ns / 1e6,
                  "data_frames_sent": sent, "data_frames_received": received,
                  "control_frames": control,
                  "cpu_us_per_packet": round(cpu * 1e6 / max(sent + received, 1), 3),
                  "cpu_us_per_frame": round(cpu * 1e6 / max(sent + received + control, 1), 3),
                  "cpu_share": round(cpu * 1e9 / max(wall, 1), 4),
                  "lateness_ms": dict(percentiles(hist, LATE_BIN_NS),
                                      mean=round(late[1] / late[0] / 1e6, 3) if late[0]
                                      else None, max=round(late[2] / 1e6, 3), n=late[0]),
                  "launch_late_ms": {"mean": round(sum(launches) / len(launches) / 1e6, 3)
                                     if launches else None,
                                     "max": round(max(launches, default=0) / 1e6, 3)},
                  "socket_drops": sum(e["socket_drops"] for e in eps),
                  "stalls": stalls[:50]}
        failed = [dict(q, endpoint=e["name"]) for e in eps for q in e.get("failed_qps", ())]
        return {"job": {"t0_ns": t0, "time_scale": job.time_scale, "ranks": len(job.ranks),
                        "endpoints": len(eps), "instances": len(insts), "aborted": aborted,
                        "failed_qps": failed,
                        "wrong": sum(i["wrong"] or 0 for i in insts),
                        "end_ns": max((r["end_ns"] for r in ranks), default=0)},
                "collectives": insts, "ranks": ranks, "endpoints": eps, "engine": engine}


def main(config_path, out=None, wait_go=False):
    """``python -m traffic job``: set up, say ready, run, write the result; exit status
    0, 1 (wrong chunks, or aborted), 2 (a bad config)."""
    try:
        job = load_job(config_path)
    except JobConfigError as e:
        print(f"job: bad config: {e}", file=sys.stderr)
        return 2
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    engine = JobEngine(job)
    try:
        engine.prepare()
        print("ready", flush=True)
        if wait_go and sys.stdin.readline().strip() != "go":
            print("job: no 'go' on stdin; nothing sent", file=sys.stderr)
            return 1
        doc = engine.run(stop=lambda: bool(stopping))
    finally:
        engine.close()
    write_doc(doc, out)
    return 1 if doc["job"]["aborted"] or doc["job"]["wrong"] else 0
