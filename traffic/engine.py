"""One traffic-engine process for every host of a fabric.

Model.  A *plan* (JSON, validated by ``plan.load_plan``) lists

- ``streams``: paced RoCEv2 traffic, each from one host interface to one
  peer: ``{"netns", "intf", "src_mac", "src_ip", "dst_mac", "dst_ip",
  "rate_bps", "qps", "first_flow", "first_qpn", "qpns", "phase"}`` (flow ids and QPNs
  as in ``sender.make_flows``: one UDP source port per QP, ``qpns`` naming them
  when given; ``phase``: the
  fraction of its packet interval it starts after the others, default 0);
- ``receivers``: ``{"netns", "intf"}`` interfaces whose arriving RoCEv2
  frames are accounted per flow (``accounting``);
- ``duration`` (s), ``frame_len``, ``tick_ms`` (how often the engine wakes),
  ``idle`` (s of silence after the senders stop that ends the run),
  ``gap_ms`` (disruption threshold).

The engine opens every socket inside its host's namespace (``netns``) before
anything is sent, builds every frame template (scapy, once), then says
``ready`` on stdout and waits for ``go`` on stdin, so whoever drives it can
read counters around exactly the traffic.  One loop then serves everything:
it wakes once per tick (2 ms) or when the next packet is due, whichever is
later, sends what each stream's ``pacing.Schedule`` says is due (sendmmsg
batches), and drains every receive socket, breaking off a drain when the next
packet falls due and reading on after the sends (a slow pass, when the VM runs
the engine several times slower for tens of ms, then delays reading, which
costs nothing, not sending).  A wake-up costs 30-50 us of CPU
on a VM, so the tick, not the packet, is the unit of overhead; arrival times
come from the kernel's receive timestamps, so reading on the tick does not
add the tick to the measured latency.  No process per host, no per-host
Python start-up racing the traffic for the CPU.

What the engine reports besides the flows, so a run can tell the emulator's
limits from the network's (fidelity):

- per stream: packets scheduled, sent, ``skipped`` (the engine fell more
  than ``max_lag_ms`` behind: an emulation shortfall), sent ``late``, and
  ``caught_up`` (sent more than the default 20 ms behind, which only a
  larger ``max_lag_ms`` let leave);
- per receiver: the packet socket's own drops (``PACKET_STATISTICS``: the
  engine did not read fast enough) and a one-way latency histogram
  (sender and receiver share CLOCK_MONOTONIC: one machine);
- its own CPU time, wake-ups and CPU per packet.

With ``progress_ms`` the engine also prints, that often, one line
``progress {json}``: per flow the sequences it spans so far and how many of
them arrived, and the sequence after the highest that arrived (``flows``:
``[span, unique, next]``, so lost = span - unique, the tail in flight not
counted), the packets each flow sent so far (``sent``: a flow whose every
packet is lost spans nothing), and the engine's own
shortfalls so far (``skipped`` sends, receive ``socket_drops``).  A live consumer (the black-box prober)
reads them while the traffic runs, and may end the sending early with a
line ``stop`` on stdin.
"""

import gc
import json
import os
import resource
import select
import socket
import struct
import sys
import time
from array import array

from traffic.nic.accounting import Accounting
from traffic.nic.netns import entered
from traffic.nic.pacing import Schedule
from traffic.nic.receiver import nothing_more, open_capture, open_sink, socket_drops
from traffic.nic.sender import Sender, make_flows
from traffic.plan import PlanError, load_plan
from traffic.roce.frames import FastParser

SO_TIMESTAMPNS = 35             # SCM_TIMESTAMPNS: struct timespec, CLOCK_REALTIME
TIMESPEC = struct.Struct("=qq")
ANC_SIZE = socket.CMSG_SPACE(TIMESPEC.size)
LAT_BIN_NS = 100_000            # latency histogram: 0.1 ms bins ...
LAT_BINS = 100_000              # ... up to 10 s (the last bin holds the rest)
def percentiles(hist, bin_ns, qs=(0.5, 0.9, 0.99, 0.999)):
    """{q: upper edge in ms} of a histogram of counts per ``bin_ns`` bin."""
    total = sum(hist)
    out = {}
    if not total:
        return {f"p{q * 100:g}": None for q in qs}
    for q in qs:
        need, acc = q * total, 0
        for i, c in enumerate(hist):
            acc += c
            if acc >= need:
                out[f"p{q * 100:g}"] = round((i + 1) * bin_ns / 1e6, 3)
                break
    return out


class _Rx:
    """One receive socket and its accounting."""

    def __init__(self, spec, gap_ns, bin_ns=None):
        self.name = spec.get("name") or spec["intf"]
        with entered(spec.get("netns")):
            self.sock = open_capture(spec["intf"])
            self.sink = open_sink()
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.setblocking(False)
        self.acct = Accounting(gap_threshold_ns=gap_ns, bin_ns=bin_ns)
        self.hist = array("I", bytes(4 * LAT_BINS))
        self.lat_sum = self.lat_n = 0
        self.lat_max = 0
        self.other = 0
        self.drops = 0
        self.names = {}
        self.stats()                  # reset the kernel's counters

    def stats(self):
        """Add the kernel's drop count since the last call (it resets on read)."""
        drops = socket_drops(self.sock)
        self.drops += drops
        return drops

    def close(self):
        self.sock.close()
        if self.sink:
            self.sink.close()


class Engine:
    """Runs a plan; ``run`` returns the result document."""

    def __init__(self, plan, clock=time.monotonic_ns, on_flowing=lambda: None,
                 on_progress=lambda doc: None, stop_asked=lambda: False):
        self.plan = load_plan(plan)
        self.clock = clock
        self.on_flowing = on_flowing
        self.on_progress = on_progress
        self.stop_asked = stop_asked
        self.parse = FastParser(self.plan["verify_icrc"])
        # CLOCK_REALTIME - CLOCK_MONOTONIC: kernel receive stamps -> the senders' clock
        self.rt_offset = time.time_ns() - clock()
        self.senders = {}             # (netns, intf) -> Sender
        self.streams = []             # (spec, flows, sender)
        self.rx = []
        gap_ns = int(self.plan["gap_ms"] * 1e6)
        try:
            for spec in self.plan["streams"]:
                key = (spec.get("netns"), spec["intf"])
                if key not in self.senders:
                    with entered(spec.get("netns")):
                        self.senders[key] = Sender(spec["intf"], batch=64)
                flows = make_flows(spec.get("src_mac") or _mac(self.senders[key]),
                                   spec["dst_mac"],
                                   spec["src_ip"], spec["dst_ip"], qps=spec.get("qps", 1),
                                   first_flow=spec.get("first_flow", 0),
                                   first_qpn=spec.get("first_qpn", 0x100),
                                   qpns=spec.get("qpns"),
                                   frame_len=self.plan["frame_len"],
                                   dscp=spec.get("dscp", 26))
                self.streams.append((spec, flows, self.senders[key]))
            bin_ns = int(self.plan["timeline_ms"] * 1e6) if self.plan["timeline_ms"] else None
            for spec in self.plan["receivers"]:
                self.rx.append(_Rx(spec, gap_ns, bin_ns))
        except BaseException:
            self.close()
            raise

    def close(self):
        for s in self.senders.values():
            s.close()
        for r in self.rx:
            r.close()

    def run(self):
        p = self.plan
        clock = self.clock
        flen = max((f.template.len for _, flows, _ in self.streams for f in flows),
                   default=p["frame_len"])
        tick = int(p["tick_ms"] * 1e6)
        # scapy's ~10^5 objects stall a full collection 30-50 ms: exempt them once
        gc.collect()
        gc.freeze()
        cpu0 = _cpu()
        stalls = []                   # (when, ms) of loop passes > 10 ms apart
        start = clock() + 1_000_000   # 1 ms: every stream starts on one schedule
        end = start + int(p["duration"] * 1e9)
        scheds = []
        for spec, flows, sender in self.streams:
            interval = (1e9 / spec["rate_pps"] if spec.get("rate_pps")
                        else flen * 8 * 1e9 / spec["rate_bps"])
            scheds.append([Schedule(interval, start + int(spec.get("phase", 0) * interval),
                                    max_lag_ns=int(p["max_lag_ms"] * 1e6),
                                    late_ns=tick + 1_000_000, end_ns=end),
                           flows, sender, 0])
        idle_ns = int(p["idle"] * 1e9)
        hard_end = end + int((p["deadline"] or p["duration"] + 30) * 1e9)
        buf = bytearray(9216)
        wakeups = 0
        last_rx = None
        expect = p["expect_flows"]
        sending = bool(scheds)
        send_end = None
        prev = None
        every = int(p["progress_ms"] * 1e6) if p["progress_ms"] else None
        next_progress = start + every if every else None
        while True:
            now = clock()
            if every and now >= next_progress:
                next_progress = now + every
                self.on_progress(self._progress(now, scheds))
                if sending and self.stop_asked():
                    sending = False
                    send_end = now
                    for s in scheds:
                        s[0].end = now
            if prev is not None and now - prev > 10_000_000:
                stalls.append((round((prev - start) / 1e6, 1), round((now - prev) / 1e6, 1)))
            prev = now
            if sending:
                for s in scheds:
                    self._send_due(s, now)
                now = clock()
                if all(s[0].done(now) for s in scheds):
                    sending = False
                    send_end = now
            # Reading is never late (arrival times are the kernel's), sending is: a
            # drain stops when the next frame falls due and goes on after the sends
            due = (min((t for t in (s[0].next_ns() for s in scheds) if t is not None),
                       default=None) if sending else None)
            got, cut = 0, False
            for r in self.rx:
                n, stopped = self._drain(r, buf, until=due)
                got += n
                cut = cut or stopped
            if got:
                last_rx = clock()
                if expect and sum(len(r.acct.flows) for r in self.rx) >= expect:
                    self.on_flowing()
                    expect = None
            if sending:
                wake = max(end if due is None else due, now + tick)
            else:
                # receivers only (a server's part of a plan): others send until end
                quiet_since = max(last_rx or 0, send_end or (start if scheds else end))
                if not self.rx or now - quiet_since >= idle_ns or now >= hard_end:
                    break
                wake = now + tick
            delay = wake - clock()
            if delay > 0 and not cut:
                time.sleep(delay / 1e9)
            wakeups += 1
        cpu = _cpu() - cpu0
        doc = self._result(scheds, start, send_end or clock(), cpu, wakeups)
        doc["engine"]["stalls"] = stalls[:50]
        return doc

    def _progress(self, now, scheds):
        """The ``progress`` document: per flow [span, unique, next] so far, and shortfalls."""
        flows = {}
        for r in self.rx:
            r.stats()
            for key, fa in r.acct.flows.items():
                flows[key] = [fa.expected(), fa.unique, fa.highest + 1]
        sent = {f"{spec['src_ip']}#{f.flow_id}": f.sent for spec, fl, _ in self.streams
                for f in fl}
        return {"t_ns": now, "flows": flows, "sent": sent,
                "skipped": sum(s[0].skipped for s in scheds),
                "socket_drops": sum(r.drops for r in self.rx)}

    def _send_due(self, s, now):
        """Send what one stream's schedule says is due, round-robin over its QPs."""
        sched, flows, sender, rr = s
        while True:
            n = sched.due(now, sender.batch)
            if not n:
                break
            rr = sender.send_flows(flows, rr, n, self.clock)
        s[3] = rr

    def _drain(self, r, buf, limit=4096, until=None, every=8):
        """Read what one socket holds into its accounting; returns (frames read,
        whether it stopped with frames maybe left: at ``limit``, or at ``until``
        (ns, checked every ``every`` frames) when a send falls due).  Arrival times
        are the kernel's receive timestamps (CLOCK_REALTIME moved onto
        CLOCK_MONOTONIC): reading on the tick, or after the sends, adds nothing to
        the latency."""
        parse, acct, hist = self.parse, r.acct, r.hist
        sock, mv, off = r.sock, memoryview(buf), self.rt_offset
        got = 0
        for i in range(limit):
            if until is not None and i and not i % every and self.clock() >= until:
                return got, True
            try:
                n, anc, _, _ = sock.recvmsg_into([buf], ANC_SIZE)
            except OSError as e:
                if nothing_more(e):
                    break
                raise
            now = None
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = TIMESPEC.unpack_from(data)
                    now = sec * 1_000_000_000 + nsec - off
            if now is None:
                now = self.clock()
            pk = parse(mv, n)
            if pk is None:
                r.other += 1
                continue
            src, flow, psn, tx_ns, ok = pk
            if not ok:
                acct.corrupted += 1
                continue
            key = r.names.get((src, flow))
            if key is None:
                key = r.names[(src, flow)] = f"{socket.inet_ntoa(src)}#{flow}"
            acct.add(key, psn, now, n, tx_ns)
            lat = now - tx_ns
            if lat >= 0:
                b = lat // LAT_BIN_NS
                hist[b if b < LAT_BINS else LAT_BINS - 1] += 1
                r.lat_sum += lat
                r.lat_n += 1
                if lat > r.lat_max:
                    r.lat_max = lat
            got += 1
        else:
            return got, True
        return got, False

    def _result(self, scheds, start, send_end, cpu, wakeups):
        window = max(send_end - start, 1) / 1e9
        streams, sent_by_flow = [], {}
        for (spec, flows, _), (sched, *_rest) in zip(self.streams, scheds):
            per_flow = {f"{spec['src_ip']}#{f.flow_id}": f.sent for f in flows}
            sent_by_flow.update(per_flow)
            streams.append({
                "name": spec.get("name") or spec["intf"], "src_ip": spec["src_ip"],
                "dst_ip": spec["dst_ip"], "rate_bps": spec.get("rate_bps"),
                "rate_pps": spec.get("rate_pps"),
                "scheduled_packets": sched.sent + sched.skipped,
                "sent_packets": sched.sent, "skipped_packets": sched.skipped,
                "late_packets": sched.late, "max_late_ms": round(sched.max_late_ns / 1e6, 3),
                "caught_up_packets": sched.caught_up,
                "per_flow": per_flow})
        receivers = []
        for r in self.rx:
            r.stats()
            flows = [f for f in r.acct.flows]
            doc = r.acct.summary({k: sent_by_flow[k] for k in flows if k in sent_by_flow},
                                 timeline=False)
            if self.plan["timeline_ms"]:
                doc["timelines"] = {k: fa.timeline for k, fa in r.acct.flows.items()}
            doc.update({"name": r.name, "socket_drops": r.drops, "other_frames": r.other,
                        "latency_ms": dict(percentiles(r.hist, LAT_BIN_NS),
                                           mean=round(r.lat_sum / r.lat_n / 1e6, 3)
                                           if r.lat_n else None,
                                           max=round(r.lat_max / 1e6, 3))})
            receivers.append(doc)
        sent = sum(s["sent_packets"] for s in streams)
        received = sum(d["total"]["received_packets"] for d in receivers)
        hist = array("I", bytes(4 * LAT_BINS))
        for r in self.rx:
            for i, c in enumerate(r.hist):
                if c:
                    hist[i] += c
        lat_n = sum(r.lat_n for r in self.rx)
        return {
            "window_s": round(window, 6), "frame_len": self.plan["frame_len"],
            "streams": streams, "receivers": receivers,
            # the raw histogram, so engines on several servers merge exactly (merge_latency)
            "latency_hist": {"bin_ns": LAT_BIN_NS, "n": lat_n,
                             "sum_ns": sum(r.lat_sum for r in self.rx),
                             "counts": {str(i): c for i, c in enumerate(hist) if c}},
            "latency_ms": dict(percentiles(hist, LAT_BIN_NS),
                               mean=round(sum(r.lat_sum for r in self.rx) / lat_n / 1e6, 3)
                               if lat_n else None,
                               max=round(max((r.lat_max for r in self.rx), default=0) / 1e6, 3)),
            "engine": {"cpu_s": round(cpu, 4), "wakeups": wakeups, "sent_packets": sent,
                       "received_packets": received,
                       "cpu_us_per_packet": round(cpu * 1e6 / max(sent + received, 1), 3),
                       "skipped_packets": sum(s["skipped_packets"] for s in streams),
                       "late_packets": sum(s["late_packets"] for s in streams),
                       "caught_up_packets": sum(s["caught_up_packets"] for s in streams),
                       "socket_drops": sum(d["socket_drops"] for d in receivers)},
        }


def _mac(sender):
    """The MAC of a sender's interface (its packet socket's address: /sys is the
    namespace the process started in, not the socket's)."""
    return ":".join(f"{b:02x}" for b in sender.sock.getsockname()[4])


def _cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main(plan_path, out=None, wait_go=True):
    """``python -m traffic engine --plan FILE``: ready, wait for go, run, write JSON."""
    with open(plan_path) as f:
        plan = json.load(f)
    try:
        engine = Engine(plan, on_flowing=lambda: print("flowing", flush=True),
                        on_progress=lambda doc: print("progress " + json.dumps(doc),
                                                      flush=True),
                        stop_asked=lambda: bool(select.select([sys.stdin], [], [], 0)[0])
                        and sys.stdin.readline().strip() == "stop")
    except PlanError as e:
        print(f"engine: bad plan: {e}", file=sys.stderr)
        return 2
    try:
        if wait_go:
            print("ready", flush=True)
            line = sys.stdin.readline()
            if line.strip() != "go":
                print("engine: no 'go' on stdin; nothing sent", file=sys.stderr)
                return 1
        doc = engine.run()
    finally:
        engine.close()
    write_doc(doc, out)
    return 0


def write_doc(doc, out=None):
    """The result document as JSON: into ``out`` whole (written aside, then moved, so a
    reader never sees half of it), or on stdout."""
    text = json.dumps(doc, indent=1)
    if out:
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, out)
    else:
        print(text)
