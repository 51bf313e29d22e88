"""A chaos soak's reliable traffic: collective jobs on the RC transport, back to back.

Model.  While the soak's faults come and go, ``JobLoop`` runs an allreduce
over the first host of every leaf (``pick_hosts``; 2 QPs per connection, so
each pair of ranks uses two ECMP paths) at a tenth of the host link rate,
paced one packet at a time (no burst to overflow a queue the probes share),
as consecutive job instances of about ``INSTANCE_S`` seconds each, until the
soak's faults are over.  A job that ends early (a QP out of retries aborts
it: a job interruption) is followed by a new one, as a scheduler restarts a
failed training job.  Every rank writes its result document with each of
its QPs' counts (``traffic.roce.qps.RankQPs.per_qp``).

``reliable_check`` (pure) is the invariant "every packet a reliable QP sent
was delivered or its QP reported dead".  Per QP it matches the requester's
first transmissions (distinct PSNs sent) with what the responder at the peer
accepted (distinct PSNs placed), by source IP and QP number.  A QP's packets
are accounted for when every one was delivered, or the QP failed (retry
counter exceeded), or its job was aborted because another QP failed (the NIC
flushes the QP with an error: the application is told).  It breaks when a
QP ends with packets neither delivered nor reported (outstanding, or sent
and never accepted), when a responder accepted more than was sent, or when
an instance's ranks left no result (their packets are not accounted for).
"""

import json
import os
import sys
import threading
import time

from emulator.dataplane.session import REPO
from emulator.dataplane.system.proc import STDOUT, TimedOut
from emulator.experiments.workloads.collective import (
    default_timeout_exp,
    expected_seconds,
    rank_configs,
)
from emulator.fabric.addressing import home_leaf

INSTANCE_S = 10.0        # one job instance's ideal length
SIZE = 256 << 10         # bytes per call
SHARE = 0.1              # of the host link rate
QPS = 2


def reliable_check(instances):
    """The invariant over job instances ``[{"docs": [rank docs] or None, ...}]``:
    {holds, qps, sent_packets, delivered_packets, failed_qps, flushed_qps,
    flushed_packets (the undelivered packets of flushed QPs: what the aborted
    job's rule excused), violations: [...] (at most 20)}."""
    qps = sent = delivered = failed = flushed = flushed_packets = 0
    bad = []
    for i, inst in enumerate(instances):
        docs = inst.get("docs")
        if docs is None:
            bad.append({"instance": i, "problem": "no result from its ranks "
                                                  f"({inst.get('problem', 'killed')})"})
            continue
        accepted = {}
        for d in docs:
            for r in (d.get("per_qp") or {}).get("responders", ()):
                key = (r["src_ip"], r["qpn"])
                accepted[key] = accepted.get(key, 0) + r["delivered_packets"]
        aborted = any(d.get("aborted") for d in docs)
        for d in docs:
            for q in (d.get("per_qp") or {}).get("requesters", ()):
                qps += 1
                got = accepted.get((q["src_ip"], q["qpn"]), 0)
                sent += q["sent_packets"]
                delivered += min(got, q["sent_packets"])
                where = {"instance": i, "rank": d.get("name"), "qpn": q["qpn"],
                         "sent": q["sent_packets"], "delivered": got,
                         "outstanding": q["outstanding"]}
                if q["failed"]:
                    failed += 1
                elif got > q["sent_packets"]:
                    bad.append(dict(where, problem="delivered more than sent"))
                elif got < q["sent_packets"] or q["outstanding"]:
                    if aborted:
                        flushed += 1        # its job was aborted: the QP flushed in error
                        flushed_packets += q["sent_packets"] - min(got, q["sent_packets"])
                    else:
                        bad.append(dict(where, problem="packets neither delivered nor "
                                                       "reported dead"))
    return {"holds": not bad, "qps": qps, "sent_packets": sent,
            "delivered_packets": delivered, "failed_qps": failed, "flushed_qps": flushed,
            "flushed_packets": flushed_packets,
            "violations": bad[:20], "violations_total": len(bad)}


def pick_hosts(topo):
    """The first host of every leaf (at least two hosts), in topology order."""
    seen, out = set(), []
    for h in topo["hosts"]:
        leaf = home_leaf(h)
        if leaf not in seen:
            seen.add(leaf)
            out.append(h["name"])
    if len(out) < 2:
        out = [h["name"] for h in topo["hosts"][:2]]
    return out


class JobLoop:
    """Job instances one after another in a thread, from ``start`` until ``stop``."""

    def __init__(self, session, work, out=print):
        self.s, self.work, self.out = session, work, out
        self.hosts = pick_hosts(session.topo)
        link = min(h["ports"][0]["rate_bps"] for h in session.topo["hosts"]
                   if h["name"] in self.hosts)
        self.rate = link * SHARE
        per_call = expected_seconds("allreduce", len(self.hosts), [SIZE], self.rate)
        self.calls = max(1, int(INSTANCE_S / per_call))
        self.timeout = 60 + 4 * per_call * self.calls
        self.rank_configs = rank_configs
        self.timeout_exp = default_timeout_exp(getattr(session, "queue_ms", 30.0))
        self.instances, self.procs = [], []
        self.stopping, self.killed = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        self.out(f"... reliable traffic: allreduce over {', '.join(self.hosts)}, {QPS} QPs "
                 f"per connection at {self.rate / 1e6:g} Mbit/s, {self.calls} calls of "
                 f"{SIZE >> 10} KiB per job instance")
        self.thread.start()

    def stop(self):
        """No new instance; wait for the one running; returns the summary."""
        self.stopping.set()
        self.thread.join(self.timeout + 30)
        return self.summary()

    def kill(self):
        self.killed.set()
        self.stopping.set()
        for p, _ in self.procs:
            if p.poll() is None:
                p.kill()
        self.thread.join(30)

    def summary(self):
        done = [i for i in self.instances if i.get("docs") is not None]
        calls = sum(min(len(d["results"]) for d in i["docs"]) for i in done if i["docs"])
        return {"hosts": self.hosts, "rate_bps": self.rate, "calls_per_instance": self.calls,
                "instances": len(self.instances),
                "interruptions": sum(1 for i in done if any(d.get("aborted")
                                                            for d in i["docs"])),
                "calls_completed": calls,
                "reliable": reliable_check(self.instances)}

    def _loop(self):
        while not self.stopping.is_set():
            self.instances.append(self._instance(len(self.instances)))

    def _instance(self, k):
        d = os.path.join(self.work, f"job{k}")
        os.makedirs(d, exist_ok=True)
        configs = self.rank_configs(self.s.topo, "allreduce", [SIZE] * self.calls,
                                    self.hosts, QPS, rate_bps=self.rate, out_dir=d, warmup=0,
                                    mtu=getattr(self.s, "mtu", 4096))
        self.procs = []
        try:
            for cfg in configs:
                cfg["timeout_exp"] = self.timeout_exp
                cfg["burst"] = 1       # paced packet by packet: a burst of 8 jumbo frames
                #   overflowed a 40 Mbit/s link's queue and dropped a probe no fault touched
                cfg["qpn_seed"] = k + 1            # each instance's QPs are new ones
                path = os.path.join(d, f"rank{cfg['rank']}.config.json")
                with open(path, "w") as f:
                    json.dump(cfg, f)
                log = open(os.path.join(d, f"rank{cfg['rank']}.log"), "w")
                name = cfg["ranks"][cfg["rank"]]["name"]
                self.procs.append((self.s.net.popen_in(
                    name, [sys.executable, "-m", "traffic", "rank", "--config", path],
                    cwd=REPO, stdout=log, stderr=STDOUT), log))
            end = time.monotonic() + self.timeout
            for p, _ in self.procs:
                try:
                    p.wait(timeout=max(1.0, end - time.monotonic()))
                except TimedOut:
                    return {"docs": None, "problem": f"ranks still running after "
                                                     f"{self.timeout:.0f} s"}
            if self.killed.is_set():
                return {"docs": None, "problem": "interrupted"}
            docs = []
            for cfg in configs:
                try:
                    with open(cfg["output"]) as f:
                        docs.append(json.load(f))
                except (OSError, ValueError):
                    return {"docs": None, "problem": f"rank {cfg['rank']} wrote no result "
                                                     f"(exit {self.procs[cfg['rank']][0].returncode})"}
            return {"docs": docs}
        finally:
            for p, log in self.procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(timeout=10)
                log.close()
