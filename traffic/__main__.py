"""Command line: ``python -m traffic {send,recv,rank,engine,job,report} ...``.

send    paced RoCEv2 flows from this namespace to one peer (JSON stats out)
recv    account RoCEv2 flows arriving on an interface (JSON summary out)
rank    one rank of a collective (``--config FILE.json``, see traffic.ranks.rank)
engine  every host's paced flows and receivers in one process (traffic.engine)
job     a training job's ranks and collectives over every NIC in one process (traffic.jobs.job)
report  nccl-tests table of rank result files

Each sub-command imports its own modules when it runs ("lazy: per
sub-command"): a host's rank process, started once per host, does not pay for
the engine's or the job engine's imports.
"""

import argparse
import json
import os
import sys

UNITS = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}


def rate(text):
    """'40M', '1.5G', '200000' -> float."""
    text = text.strip()
    suffix = text[-1] if text and text[-1] in UNITS else ""
    return float(text[:-1] if suffix else text) * UNITS[suffix]


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m traffic", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send", help="send paced RoCEv2 flows")
    s.add_argument("--intf", required=True)
    s.add_argument("--src-ip", required=True)
    s.add_argument("--dst-ip", required=True)
    s.add_argument("--dst-mac", help="next-hop MAC (default: from the kernel's ARP)")
    s.add_argument("--src-mac", help="default: the interface's")
    s.add_argument("--qps", type=int, default=1, help="QPs (flows, UDP sports)")
    s.add_argument("--first-flow", type=int, default=0)
    s.add_argument("--first-qpn", type=lambda x: int(x, 0), default=0x100)
    g = s.add_mutually_exclusive_group()
    g.add_argument("--rate", type=rate, help="bit/s, e.g. 40M")
    g.add_argument("--pps", type=rate, help="packets/s")
    s.add_argument("--burst", type=int, default=None, help="packets per burst")
    s.add_argument("--duration", type=float)
    s.add_argument("--packets", type=int)
    s.add_argument("--bytes", type=int)
    s.add_argument("--frame-len", type=int, default=1078)
    s.add_argument("--dscp", type=int, default=26)
    s.add_argument("--pause", type=float, nargs=2, metavar=("AFTER_S", "LENGTH_S"),
                   help="stop sending LENGTH_S seconds after AFTER_S (inject a gap)")
    s.add_argument("--no-sendmmsg", action="store_true")
    s.add_argument("--out", help="write the JSON here instead of stdout")
    r = sub.add_parser("recv", help="account RoCEv2 flows")
    r.add_argument("--intf", required=True)
    r.add_argument("--expected", type=int)
    r.add_argument("--idle", type=float, help="stop after this many idle seconds")
    r.add_argument("--deadline", type=float, help="stop after this many seconds")
    r.add_argument("--gap-ms", type=float, default=10.0, help="disruption threshold")
    r.add_argument("--sent", nargs="*", default=[],
                   help="the senders' JSON outputs, to count drops exactly")
    r.add_argument("--no-timeline", action="store_true")
    r.add_argument("--ready-file", help="touched once the socket is open")
    r.add_argument("--out")
    k = sub.add_parser("rank", help="one rank of a collective")
    k.add_argument("--config", required=True)
    k.add_argument("--out")
    e = sub.add_parser("engine", help="run a traffic plan for every host in one process")
    e.add_argument("--plan", required=True, help="plan JSON (see traffic.engine)")
    e.add_argument("--out", help="write the JSON here instead of stdout")
    e.add_argument("--no-wait", action="store_true",
                   help="start at once instead of waiting for 'go' on stdin")
    j = sub.add_parser("job", help="a training job's ranks in one process")
    j.add_argument("--config", required=True, help="job JSON (see traffic.jobs.config)")
    j.add_argument("--out", help="write the JSON here instead of stdout")
    j.add_argument("--wait-go", action="store_true",
                   help="after 'ready', wait for 'go' on stdin before starting")
    p = sub.add_parser("report", help="nccl-tests table of rank results")
    p.add_argument("files", nargs="+")
    p.add_argument("--json", action="store_true", help="print JSON, not the table")
    return ap.parse_args(argv)


def emit(doc, out):
    """``doc`` as JSON into ``out`` whole (written aside, then moved: a process killed
    while writing leaves no half of it), or on stdout."""
    text = json.dumps(doc, indent=1)
    if out:
        with open(out + ".tmp", "w") as f:
            f.write(text + "\n")
        os.replace(out + ".tmp", out)
    else:
        print(text)


def cmd_send(a):
    from traffic.nic.sender import Sender, make_flows  # lazy: per sub-command
    from traffic.ranks.barrier import read_mac, resolve_mac  # lazy: per sub-command
    dst_mac = a.dst_mac or resolve_mac(a.dst_ip, a.intf, trigger=True)
    if not dst_mac:
        sys.exit(f"send: no ARP entry for {a.dst_ip}; give --dst-mac")
    flows = make_flows(a.src_mac or read_mac(a.intf), dst_mac, a.src_ip, a.dst_ip,
                       qps=a.qps, first_flow=a.first_flow, first_qpn=a.first_qpn,
                       frame_len=a.frame_len, dscp=a.dscp)
    with Sender(a.intf, use_sendmmsg=not a.no_sendmmsg) as s:
        st = s.run(flows, rate_bps=a.rate, rate_pps=a.pps, burst=a.burst,
                   duration=a.duration, packets=a.packets, nbytes=a.bytes,
                   pause=a.pause)
    doc = st.as_dict()
    # keys match the receiver's: "<src ip>#<flow id>"
    doc["per_flow"] = {f"{a.src_ip}#{k}": v for k, v in st.per_flow.items()}
    emit(doc, a.out)
    return 0


def cmd_recv(a):
    from traffic.nic.receiver import Receiver  # lazy: per sub-command
    sent = {}
    for path in a.sent:
        with open(path) as f:
            sent.update(json.load(f)["per_flow"])
    with Receiver(a.intf, gap_threshold_ms=a.gap_ms) as rx:
        if a.ready_file:
            open(a.ready_file, "w").close()
        acct = rx.run(expected=a.expected, idle=a.idle, deadline=a.deadline)
    emit(acct.summary(sent or None, timeline=not a.no_timeline), a.out)
    return 0


def cmd_report(a):
    from traffic.ranks.report import combine, load, table  # lazy: per sub-command
    rep = combine(load(a.files))
    print(json.dumps(rep, indent=1) if a.json else table(rep))
    return 0 if all(r["wrong"] == 0 for r in rep["rows"]) else 1


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.cmd == "send":
        return cmd_send(a)
    if a.cmd == "recv":
        return cmd_recv(a)
    if a.cmd == "engine":
        from traffic.engine import main as engine_main  # lazy: per sub-command
        return engine_main(a.plan, a.out, wait_go=not a.no_wait)
    if a.cmd == "rank":
        return rank_main(a.config, a.out)
    if a.cmd == "job":
        from traffic.jobs.job import main as job_main  # lazy: per sub-command
        return job_main(a.config, a.out, wait_go=a.wait_go)
    return cmd_report(a)


def rank_main(config_path, output=None):
    """``python -m traffic rank``: run one rank (traffic.ranks.rank); returns the exit status."""
    from traffic.ranks.rank import Rank, load_config  # lazy: per sub-command
    cfg = load_config(config_path)
    rank = Rank(cfg)
    try:
        doc = rank.run()
    finally:
        rank.close()
    emit(doc, output or cfg["output"])
    wrong = sum(r["chunks_missing"] + r["chunks_corrupted"] for r in doc["results"])
    return 1 if wrong or doc.get("failed_qps") else 0


if __name__ == "__main__":
    sys.exit(main())
