"""The job config: defaults, the NIC keys checked as a rank's, and every error naming
where it is."""

import pytest

from traffic.jobs.config import JobConfigError, load_job

EPS = [{"intf": f"eth{i}", "ip": f"10.0.0.{i + 1}", "rate_bps": 40e6} for i in range(3)]


def doc(programs, ranks=(0, 1), **extra):
    return dict({"endpoints": EPS, "ranks": list(ranks), "programs": programs}, **extra)


def ar(cid="ar", members=(0, 1), **kw):
    return dict({"op": "coll", "id": cid, "kind": "allreduce", "members": list(members),
                 "bytes": 4096}, **kw)


def test_defaults_and_derived_instances():
    j = load_job(doc([[ar(), {"op": "send", "id": "p", "peer": 1, "bytes": 9}],
                      [ar(), {"op": "recv", "id": "p", "peer": 0, "bytes": 9}]]))
    assert j.nic["mtu"] == 4096 and j.nic["transport"] == "rc" and j.tick_ns == 2_000_000
    assert j.nic["rc_params"].timeout_exp == 15
    assert [(i.id, i.tag, i.kind, i.endpoints) for i in j.instances.values()] == [
        ("ar", 1, "allreduce", (0, 1)), ("p", 2, "p2p", (0, 1))]
    assert j.endpoints[0]["name"] == "eth0"
    assert j.programs[0][0].blocking and j.programs[1][1].kind == "recv"


def test_ring_over_distinct_endpoints_in_member_order():
    prog = [ar(members=(4, 5, 0, 1, 2, 3), local_ns=7)]
    j = load_job(doc([prog] * 6, ranks=(0, 0, 1, 1, 2, 2)))
    inst = j.instances["ar"]
    assert inst.endpoints == (2, 0, 1) and inst.local_ns == 7
    # one rank per endpoint: no NVLink hop to add
    j = load_job(doc([[ar(local_ns=7)]] * 2))
    assert j.instances["ar"].local_ns == 0
    # a fabric: false collective, or one endpoint, takes local_ns without the network
    j = load_job(doc([[ar(fabric=False, local_ns=5)]] * 2))
    assert not j.instances["ar"].network and j.instances["ar"].local_ns == 5


@pytest.mark.parametrize("programs,ranks,extra,match", [
    ([[ar()], [ar()]], (0, 1), {"bogus": 1}, r"unknown keys \['bogus'\]"),
    ([[ar()]], (0, 1), {}, "one list of ops per rank"),
    ([[ar()], [ar()]], (0, 5), {}, "endpoint indices"),
    ([[{"op": "sleep"}], []], (0, 1), {}, r"programs\[0\]\[0\]"),
    ([[{"op": "compute", "ns": -1}], []], (0, 1), {}, r"programs\[0\]\[0\]: ns"),
    ([[ar(kind="gather")], [ar(kind="gather")]], (0, 1), {}, "kind one of"),
    ([[ar()], [ar(bytes=8)]], (0, 1), {}, r"programs\[1\]\[0\]: 'ar' differs"),
    ([[ar()], []], (0, 1), {}, "not of its members"),
    ([[ar(), ar()], [ar()]], (0, 1), {}, "twice"),
    ([[{"op": "wait", "ids": ["ar"]}, ar(blocking=False)], [ar()]], (0, 1), {},
     "not an earlier non-blocking"),
    ([[ar()], [ar(), {"op": "wait", "ids": ["ar"]}]], (0, 1), {}, "not an earlier"),
    ([[{"op": "send", "id": "p", "peer": 1, "bytes": 1}], []], (0, 1), {}, "one send"),
    ([[{"op": "send", "id": "p", "peer": 0, "bytes": 1}], []], (0, 1), {}, "another rank"),
    ([[ar(members=(0, 1, 2, 3))]] * 4, (0, 1, 0, 1), {}, "adjacent"),
    ([[ar()], [ar()]], (0, 1), {"mtu": 10}, "mtu"),
    ([[ar()], [ar()]], (0, 1), {"cc": "dcqcn", "transport": "none"}, "cc"),
    ([[ar()], [ar()]], (0, 1), {"tick_ms": 0}, "tick_ms"),
])
def test_errors_say_where(programs, ranks, extra, match):
    with pytest.raises(JobConfigError, match=match):
        load_job(doc(programs, ranks, **extra))


def test_endpoint_errors():
    with pytest.raises(JobConfigError, match=r"endpoints\[0\]: needs intf, ip, rate_bps"):
        load_job({"endpoints": [{"intf": "e"}], "ranks": [0], "programs": [[]]})
    with pytest.raises(JobConfigError, match="ip 10.0.0.1 twice"):
        load_job({"endpoints": [EPS[0], EPS[0]], "ranks": [0], "programs": [[]]})


def test_a_compute_label_is_a_string():
    j = load_job(doc([[{"op": "compute", "ns": 5, "label": "it0.L1.ig"}], []]))
    assert j.programs[0][0].label == "it0.L1.ig"
    with pytest.raises(JobConfigError, match=r"programs\[0\]\[0\]: label"):
        load_job(doc([[{"op": "compute", "ns": 5, "label": 3}], []]))


def test_until_ops_daemons_and_owners_are_checked():
    from traffic.jobs.config import owner_of
    eps = [{"intf": "eth0", "ip": "10.0.0.1", "rate_bps": 4e7},
           {"intf": "eth1", "ip": "10.0.0.2", "rate_bps": 4e7}]
    ok = load_job({"endpoints": eps, "ranks": [0, 1], "daemons": [1],
                   "programs": [[{"op": "until", "ns": 5}], []]})
    assert ok.programs[0][0].kind == "until" and ok.programs[0][0].ns == 5
    assert ok.daemons == {1}
    for bad, says in (({"daemons": [0, 1]}, "at least one rank"),
                      ({"daemons": [2]}, "daemons"),
                      ({"programs": [[{"op": "until", "ns": -1}], []]}, "ns, an integer")):
        doc = dict({"endpoints": eps, "ranks": [0, 1], "programs": [[], []]}, **bad)
        with pytest.raises(JobConfigError, match=says):
            load_job(doc)
    assert owner_of("a/it0.L3.fwd.TP0") == "a" and owner_of("it0.L3") == ""
    assert owner_of("bg.store/w.h3/12") == "bg.store"
