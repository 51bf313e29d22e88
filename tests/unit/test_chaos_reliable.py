"""The chaos soak's invariant on reliable QPs (emulator/experiments/drill/chaos_job.py
``reliable_check``) and the per-QP counts it reads (traffic.roce.transport, traffic.roce.qps)."""

from emulator.experiments.drill.invariants import report as rep
from emulator.experiments.drill.chaos_job import reliable_check
from traffic.roce.transport import Requester, Responder


def req(ip, qpn, sent, outstanding=0, failed=False):
    return {"src_ip": ip, "qpn": qpn, "peer": 1, "qp": 0, "sent_packets": sent,
            "outstanding": outstanding, "failed": failed}


def resp(ip, qpn, delivered):
    return {"src_ip": ip, "qpn": qpn, "delivered_packets": delivered}


def rank(name, requesters, responders, aborted=False):
    return {"name": name, "aborted": aborted,
            "per_qp": {"requesters": requesters, "responders": responders}}


A, B = "10.0.0.1", "10.0.0.2"


def test_every_packet_delivered_holds():
    docs = [rank("h1", [req(A, 0x100, 50)], [resp(B, 0x200, 40)]),
            rank("h2", [req(B, 0x200, 40)], [resp(A, 0x100, 50)])]
    r = reliable_check([{"docs": docs}])
    assert r["holds"] and r["qps"] == 2 and r["sent_packets"] == 90
    assert r["delivered_packets"] == 90 and r["failed_qps"] == 0


def test_a_failed_qp_accounts_for_what_it_did_not_deliver():
    docs = [rank("h1", [req(A, 0x100, 50, outstanding=8, failed=True)], [],
                 aborted=True),
            rank("h2", [req(B, 0x200, 40, outstanding=3)], [resp(A, 0x100, 42)],
                 aborted=True)]
    r = reliable_check([{"docs": docs}])
    # h1's QP died; h2's was flushed when the job stopped (the peer never got its 40)
    assert r["holds"] and r["failed_qps"] == 1 and r["flushed_qps"] == 1
    assert r["delivered_packets"] == 42
    assert r["flushed_packets"] == 40        # what the aborted job's rule excused


def test_a_packet_neither_delivered_nor_reported_breaks_it():
    docs = [rank("h1", [req(A, 0x100, 50)], []), rank("h2", [], [resp(A, 0x100, 49)])]
    r = reliable_check([{"docs": docs}])
    assert not r["holds"] and r["violations_total"] == 1
    v = r["violations"][0]
    assert (v["rank"], v["qpn"], v["sent"], v["delivered"]) == ("h1", 0x100, 50, 49)
    # an ACK still outstanding on a QP that did not fail, all delivered: not accounted for
    docs = [rank("h1", [req(A, 0x100, 5, outstanding=1)], []), rank("h2", [], [resp(A, 0x100, 5)])]
    assert not reliable_check([{"docs": docs}])["holds"]
    # more accepted than sent
    docs = [rank("h1", [req(A, 0x100, 5)], []), rank("h2", [], [resp(A, 0x100, 6)])]
    assert reliable_check([{"docs": docs}])["violations"][0]["problem"] == \
        "delivered more than sent"


def test_an_instance_without_results_is_not_accounted_for():
    r = reliable_check([{"docs": None, "problem": "ranks still running after 90 s"}])
    assert not r["holds"] and "still running" in r["violations"][0]["problem"]


def test_the_transport_counts_distinct_psns_sent_and_accepted():
    q, r = Requester(), Responder()
    for psn in range(4):
        q.sent(psn, b"x", now=0)
    assert r.data(0, 1)[0] == Responder.ACCEPT
    assert r.data(2, 1)[0] == Responder.OUT_OF_SEQUENCE       # 1 lost
    q.nak(1, now=2)
    assert q.outstanding == 3
    while (item := q.next_resend()) is not None:
        q.sent(item[0], item[1], now=3, again=True)
        r.data(item[0], 4)
    r.data(3, 5)                                              # a duplicate
    assert q.first_sent == 4 and q.retransmitted == 3
    assert r.accepted == 4 and r.duplicates == 1
    q.ack(3, now=6)
    assert q.outstanding == 0


def test_the_soak_reports_the_invariant_with_its_numbers():
    job = {"hosts": ["h1", "h2"], "instances": 3, "interruptions": 1, "calls_completed": 30,
           "reliable": reliable_check([{"docs": [rank("h1", [req(A, 1, 9)], []),
                                                 rank("h2", [], [resp(A, 1, 9)])]}])}
    chaos = rep.report([], {"starts": [], "interrupted": False, "job": job,
                            "fid": {"emulation_drops": {"total": 0}}}, [], {}, None)
    assert chaos["invariants"]["reliable_qps_delivered_or_dead"] is True
    assert chaos["not_checked"] == {} and chaos["job"]["instances"] == 3
    text = rep.table(chaos)
    assert "1 QPs sent 9 packets, 9 delivered" in text and "1 interrupted" in text
    interrupted = rep.report([], {"starts": [], "interrupted": True}, [], {}, None)
    assert "reliable_qps_delivered_or_dead" in interrupted["not_checked"]
