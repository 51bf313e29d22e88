"""A shared cluster's pure parts: the jobs file and its errors by line, placement
policies, collisions and capacity, the merged engine document and its split, the
background schedules, and the uplink share arithmetic."""

import os
import textwrap
from types import SimpleNamespace

import pytest

from emulator.errors import ConfigError
from emulator.experiments.shared import background, jobsfile, merge, placement, shares
from emulator.experiments.shared.launch import classes
from emulator.experiments.training import hops, simai
from emulator.experiments.training import job as jobs
from emulator.fabric import addressing, presets
from lab.modes import FlowControl, Placement, TrafficClass
from tests.conftest import REPO

LLAMA = os.path.join(REPO, "tests", "data", "simai",
                     "L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt")
MICRO = os.path.join(REPO, "tests", "data", "simai", "microAllReduce.txt")


def topo(hosts_per_leaf=4, preset="leaf-spine", **params):
    ps = [f"hosts_per_leaf={hosts_per_leaf}"] + [f"{k}={v}" for k, v in params.items()]
    return addressing.plan(presets.build(preset, presets.parse_assignments(ps)))


def plan_of(text):
    return jobsfile.parse_text(textwrap.dedent(text), "jobs.yaml", "/")


def two(placement_a="packed", placement_b="packed", extra=""):
    """Two Llama-7B jobs of 16 ranks, 2 per host; ``extra``: top-level lines after them."""
    return plan_of(textwrap.dedent(f"""\
        jobs:
          - name: a
            workload: {LLAMA}
            ranks: 16
            gpus_per_host: 2
            placement: {placement_a}
          - name: b
            workload: {LLAMA}
            ranks: 16
            gpus_per_host: 2
            placement: {placement_b}
        """) + textwrap.dedent(extra))


def placed(plan, t=None, **kw):
    counts = {j.name: placement.ranks_of(j, simai.parse(j.workload), j.where("ranks"),
                                         plan.source) for j in plan.jobs}
    return placement.place_jobs(plan, t or topo(), counts, **kw)


# -- the file ---------------------------------------------------------------------------

def test_a_jobs_file_reads_every_key_with_its_line():
    p = plan_of(f"""\
        share_hosts: true
        host_gpus: 4
        jobs:
          - name: a
            workload: {LLAMA}
            ranks: 16
            gpus_per_host: 2
            placement: [h1, h2, h3, h4, h5, h6, h7, h8]
            start: 1500ms
            iterations: 4
            class: best-effort
            rails: rotated
        background:
          - {{kind: storage, name: st, op: read, storage: [h16], clients: [h1, h5], rate: 8Mbps,
              duty: 0.5, period: 2s, chunk: 256K}}
          - {{kind: checkpoint, job: a, storage: [h16], bytes: 4M, every: 6s, start: 3s}}
          - {{kind: stream, name: be, from: h3, to: h9, rate: 4Mbps}}
        """)
    (a,) = p.jobs
    assert p.share_hosts and p.host_gpus == 4
    assert a.placement == Placement.EXPLICIT and a.hosts[0] == "h1" and len(a.hosts) == 8
    assert (a.start_s, a.iterations, a.traffic_class, a.rails) == (
        1.5, 4, TrafficClass.BEST_EFFORT, "rotated")
    assert a.where("iterations") == "line 10, jobs[0].iterations"
    st, ck, be = p.background
    assert (st.op, st.rate_bps, st.duty, st.period_s, st.chunk) == ("read", 8e6, 0.5, 2.0,
                                                                     256 * 1024)
    assert (ck.name, ck.nbytes, ck.every_s, ck.start_s) == ("checkpoint2", 4 << 20, 6.0, 3.0)
    assert (be.src, be.dst, be.rate_bps) == ("h3", "h9", 4e6)
    # run.yaml keeps the document, the workload paths resolved
    assert p.document["jobs"][0]["workload"] == LLAMA


@pytest.mark.parametrize("body,where,says", [
    ("jobs: []", "line 1, jobs", "at least one job"),
    ("jobs:\n  - {name: a, workload: WL, colour: red}", "line 2, jobs[0].colour",
     "unknown key 'colour'"),
    ("jobs:\n  - name: a\n    workload: WL\n    placement: scatter", "line 4, jobs[0].placement",
     "placement 'scatter'"),
    ("jobs:\n  - name: a\n    workload: WL\n  - name: a\n    workload: WL", "line 4, jobs[1].name",
     "twice"),
    ("jobs:\n  - name: a\n    workload: nowhere.txt", "line 3, jobs[0].workload",
     "no such file"),
    ("jobs:\n  - name: a\n    workload: WL\n    start: 5", "line 4, jobs[0].start",
     "needs a unit"),
    ("jobs:\n  - name: a\n    workload: WL\n    placement: explicit", "line 4",
     "hosts go with placement: explicit"),
    ("jobs:\n  - name: a\n    workload: WL\nbackground:\n  - {kind: checkpoint, job: z, "
     "storage: [h1], bytes: 1M, every: 1s}", "line 5, background[0].job", "no job"),
    ("jobs:\n  - name: a\n    workload: WL\nbackground:\n  - kind: storage\n    storage: [h1]\n"
     "    clients: [h2]\n    rate: 1Mbps\n    duty: 2", "line 9, background[0].duty", "duty"),
    ("jobs:\n  - name: a\n    workload: WL\n  x: [", "line 4", "not valid YAML"),
])
def test_a_bad_jobs_file_names_its_line_and_the_reason(body, where, says):
    with pytest.raises(ConfigError) as e:
        jobsfile.parse_text(body.replace("WL", LLAMA), "jobs.yaml", "/")
    assert e.value.source == "jobs.yaml"
    assert e.value.where.startswith(where), e.value.where
    assert says in e.value.message, e.value.message


def test_several_simai_files_are_packed_jobs_named_in_order():
    p = jobsfile.from_workloads(f"simai:{LLAMA},simai:{MICRO}")
    assert [(j.name, j.workload, j.placement) for j in p.jobs] == [
        ("j1", LLAMA, Placement.PACKED), ("j2", MICRO, Placement.PACKED)]
    assert jobsfile.is_shared(f"simai:{LLAMA},simai:{MICRO}")
    assert jobsfile.is_shared("jobs:x.yaml") and not jobsfile.is_shared(f"simai:{LLAMA}")
    with pytest.raises(ConfigError, match="simai:FILE,simai:FILE"):
        jobsfile.from_workloads(f"simai:{LLAMA},allreduce")


# -- placement ----------------------------------------------------------------------------

def test_packed_fills_leaves_in_order_and_spread_goes_round_robin():
    p = placed(two())
    assert p["a"].hosts == tuple(f"h{i}" for i in range(1, 9))
    assert p["b"].hosts == tuple(f"h{i}" for i in range(9, 17))
    assert set(p["a"].leaves) == {"leaf1", "leaf2"} and set(p["b"].leaves) == {"leaf3", "leaf4"}
    s = placed(two("spread", "spread"))
    assert s["a"].hosts == ("h1", "h5", "h9", "h13", "h2", "h6", "h10", "h14")
    assert s["b"].hosts == ("h3", "h7", "h11", "h15", "h4", "h8", "h12", "h16")
    # ranks fill hosts two per host, GPU i on the host's one NIC, shared by 2 GPUs
    r = s["a"].ranks
    assert [(x.rank, x.host, x.gpu, x.sharing) for x in r[:3]] == [
        (0, "h1", 0, 2), (1, "h1", 1, 2), (2, "h5", 0, 2)]


def test_random_is_the_seeds_draw_and_a_policy_overrides_the_file():
    a = placed(two("random", "random"))
    again = placed(two("random", "random"))
    assert a["a"].hosts == again["a"].hosts and not set(a["a"].hosts) & set(a["b"].hosts)
    other = placed(two("random\n            seed: 2", "random"))
    assert other["a"].hosts != a["a"].hosts               # another seed, another draw
    forced = placed(two("random", "random"), policy=Placement.PACKED)
    assert forced["a"].hosts == tuple(f"h{i}" for i in range(1, 9))


def test_explicit_hosts_go_first_and_collide_unless_sharing():
    hosts = "[h1, h2, h3, h4, h5, h6, h7, h8]"
    p = placed(two("packed", hosts))
    assert p["b"].hosts == tuple(f"h{i}" for i in range(1, 9))     # placed first
    assert p["a"].hosts == tuple(f"h{i}" for i in range(9, 17))
    with pytest.raises(ConfigError) as e:
        placed(two(hosts, hosts))
    assert "host h1 is job a's already" in e.value.message and "line" in e.value.where
    # sharing: each job takes 2 of a host's 4 GPUs
    shared = placed(two(hosts, hosts, "share_hosts: true\nhost_gpus: 4"))
    assert [x.gpu for x in shared["a"].ranks[:2]] == [0, 1]
    assert [x.gpu for x in shared["b"].ranks[:2]] == [2, 3]
    assert shared["a"].ranks[0].sharing == 4          # the host's NIC serves 4 GPUs


def test_an_unknown_host_and_too_many_gpus_are_refused_with_the_line():
    with pytest.raises(ConfigError) as e:
        placed(two("[h1, h2, h3, h4, h5, h6, h7, h99]"))
    assert "unknown host 'h99'" in e.value.message and e.value.where.startswith("line 6")
    with pytest.raises(ConfigError) as e:
        placed(two(), topo(hosts_per_leaf=3))           # 12 hosts for 16
    assert "job b needs 8 hosts" in e.value.message and "4 such hosts are left" in \
        e.value.message and e.value.where.startswith("line 9")


def test_rotated_rails_shift_a_hosts_gpus_by_its_place_in_the_job():
    t = topo(preset="rail-optimized", hosts_per_leaf=2, planes=2, spines=2,
             leaves_per_plane=2)
    p = plan_of(f"""\
        jobs:
          - {{name: a, workload: {LLAMA}, ranks: 8, gpus_per_host: 2, rails: aligned}}
          - {{name: b, workload: {LLAMA}, ranks: 8, gpus_per_host: 2, rails: rotated}}
        """)
    with pytest.raises(ConfigError, match="needs 4 hosts"):
        placed(p, t)                                     # 4 hosts: one job fits
    one = plan_of(f"jobs:\n  - {{name: b, workload: {LLAMA}, ranks: 8, gpus_per_host: 2, "
                  "rails: rotated}")
    b = placed(one, t)["b"].ranks
    assert [(x.host, x.gpu, x.nic_index) for x in b[:4]] == [
        ("h1", 0, 0), ("h1", 1, 1), ("h2", 1, 1), ("h2", 0, 0)]


# -- the merged document -----------------------------------------------------------------

def built(plan, t=None):
    t = t or topo()
    pl = placed(plan, t)
    out = {}
    for j in plan.jobs:
        opts = jobs.JobOptions(gpus_per_host=2, iterations=2, scale=2000.0)
        out[j.name] = jobs.build_job(simai.parse(j.workload), jobs.fabric_hosts(t), opts,
                                     placement=pl[j.name].ranks)
    return pl, out


def test_the_merged_document_prefixes_shifts_and_splits_back():
    plan = two("spread", "spread")
    pl, bj = built(plan)
    m = merge.Merger()
    for j in plan.jobs:
        job = bj[j.name]
        m.add_job(j.name, jobs.job_document(job), job.placement,
                  hops.calibration(job.placement, 4096), 2_000_000_000 if j.name == "b" else 0)
    m.add_flow("st", "stream", [(("h1", "eth0", 4e7), ("h16", "eth0", 4e7),
                                 [(0, 4096), (10, 4096)])])
    doc = m.document()
    assert len(doc["endpoints"]) == 16 and len(doc["programs"]) == 32 + 2
    assert doc["daemons"] == [32, 33] and doc["owners"]["b"]["ranks"][0] == 16
    b0 = doc["programs"][16]
    until = next(i for i, op in enumerate(b0) if op["op"] == "until")
    assert b0[until - 1]["id"] == "b/cal.barrier"         # after the calibration
    coll = next(op for op in b0[until:] if op["op"] == "coll")
    assert coll["id"].startswith("b/it0.") and min(coll["members"]) >= 16
    assert all(r >= 16 for op in b0 for r in op.get("members", [16]))
    alone = merge.alone(doc, "a")
    assert alone["endpoints"] == doc["endpoints"] and alone["daemons"] == []
    assert all(not p for p in alone["programs"][16:]) and alone["programs"][0]
    # a fake result of the engine, cut back into b's
    res = {"job": {"t0_ns": 1, "aborted": None, "failed_qps": [], "wrong": 0},
           "engine": {}, "endpoints": [{"name": e["host"]} for e in doc["endpoints"]],
           "collectives": [{"id": "b/it0.x", "members": [16, 18], "wrong": 2},
                           {"id": "a/it0.x", "members": [0, 2], "wrong": 5}],
           "ranks": [{"rank": g, "endpoint": doc["endpoints"][doc["ranks"][g]]["host"],
                      "end_ns": g, "ops": [{"op": "coll", "id": "b/it0.x"}]}
                     for g in range(34)]}
    part = merge.split(res, "b", doc["owners"]["b"]["ranks"])
    assert [c["id"] for c in part["collectives"]] == ["it0.x"]
    assert part["collectives"][0]["members"] == [0, 2] and part["job"]["wrong"] == 2
    assert part["ranks"][0]["rank"] == 0 and part["ranks"][0]["ops"][0]["id"] == "it0.x"
    assert {e["name"] for e in part["endpoints"]} == set(pl["b"].hosts)


def test_background_schedules_keep_their_rate_duty_and_period():
    p = plan_of(f"""\
        jobs:
          - {{name: a, workload: {LLAMA}, ranks: 16, gpus_per_host: 2}}
        background:
          - {{kind: storage, name: st, storage: [h16], job: a, rate: 8Mbps, duty: 0.5,
              period: 2s, chunk: 100K}}
          - {{kind: checkpoint, name: ck, job: a, storage: [h15, h16], bytes: 1M, every: 3s,
              start: 1s}}
        """)
    st, ck = p.background
    s = background.schedule(st, 4.0, 4096)
    gap = 102400 * 8 / 8e6                                # 0.1024 s between chunks
    assert [round(t / 1e9, 4) for t, _ in s[:2]] == [0.0, round(gap, 4)]
    on = [t for t, _ in s if t < 2e9]
    assert len(on) == 10 and max(on) < 1e9                 # 1 s of every 2 s at 8 Mbit/s
    assert sum(n for t, n in s if t < 2e9) * 8 / 2.0 == pytest.approx(4e6, rel=0.03)
    assert background.schedule(ck, 8.0, 4096) == [(1e9, 1 << 20), (4e9, 1 << 20),
                                                  (7e9, 1 << 20)]
    pl = placed(p)
    pairs = background.endpoints_pairs(ck, pl)
    assert pairs[:2] == [("h1", "h15"), ("h2", "h16")] and len(pairs) == 8
    assert background.endpoints_pairs(st, pl)[0] == ("h1", "h16")


def test_shares_attribute_each_flows_bytes_to_its_path_and_name_shared_links():
    t = topo()
    eps = [{"name": "h1", "tx_flows": [
        {"peer_index": 1, "qp": 0, "owner": "a", "bytes": 3000, "retransmitted_bytes": 0},
        {"peer_index": 1, "qp": 0, "owner": "ck", "bytes": 1000, "retransmitted_bytes": 0}]},
        {"name": "h2", "tx_flows": [
            {"peer_index": 0, "qp": 0, "owner": "b", "bytes": 2000, "retransmitted_bytes": 0}]}]
    paths = {(0, 1, 0): ["h1:eth0", "leaf1:eth5", "spine1:eth2", "leaf2:eth1", "h5"],
             (1, 0, 0): ["h5:eth0", "leaf2:eth6", "spine2:eth1", "leaf1:eth1", "h1"]}
    att = shares.attribute(eps, paths, t)
    assert att["leaf1->spine1"] == {"a": 3000, "ck": 1000}
    assert att["spine2->leaf1"] == {"b": 2000}
    measured = {"leaf1->spine1": 4100, "spine2->leaf1": 2000, "leaf3->spine1": 0}
    kinds = {"a": "job", "b": "job", "ck": "checkpoint"}
    top, rows = shares.uplinks(att, measured, t, kinds, shares.link_rates(t), 1.0)
    first = top[0]
    assert first["link"] == "leaf1->spine1" and first["unattributed_bytes"] == 100
    assert first["share"] == {"a": round(3000 / 4100, 4), "ck": round(1000 / 4100, 4)}
    assert first["jobs"] == ["a"] and first["utilisation"] == round(4100 * 8 / 40e6, 4)
    assert shares.shared_links(rows) == []
    att["leaf1->spine1"]["b"] = 100                       # 2.4 % of it: b is on it too
    _, rows = shares.uplinks(att, measured, t, kinds, shares.link_rates(t), 1.0)
    assert shares.shared_links(rows) == ["leaf1->spine1"]
    assert shares.by_kind(rows[0], kinds)["checkpoint:ck"] == pytest.approx(1000 / 4100,
                                                                           abs=1e-4)
    # no per-flow attribution: the links' totals only
    top, _ = shares.uplinks({}, measured, t, kinds, shares.link_rates(t), 1.0,
                            attributable=False)
    assert "share" not in top[0] and top[0]["bytes"] == 4100


# -- slowdowns, rows, text --------------------------------------------------------------

def test_an_iteration_is_contended_while_every_other_job_runs():
    from emulator.experiments.shared.launch import contended
    it = lambda s, e: {"start_ns": s, "end_ns": e}      # noqa: E731
    docs = {"a": {"per_iteration": [it(0, 10), it(10, 20), it(20, 30)]},
            "b": {"per_iteration": [it(2, 12), it(12, 21)]}}
    got = contended(docs)
    # a's first iteration is 8/10 inside b's run (2..21), its last 1/10: neither counts
    assert got == {"a": [False, True, False], "b": [True, True]}


def test_compare_rows_hold_each_jobs_slowdowns_and_ecmp_against_dlb_seed_by_seed():
    from emulator.experiments.shared import compare
    def run(mode, seed, sa, sb):
        return {"placement": "spread", "mode": mode, "seed": seed, "faithful": True,
                "wrong": 0, "worst": max(sa, sb), "shared_links": ["leaf1->spine2"],
                "jobs": {"a": {"slowdown": sa, "iteration_s": 2 * sa, "alone_s": 2.0,
                               "retransmitted_bytes": 0},
                         "b": {"slowdown": sb, "iteration_s": 3 * sb, "alone_s": 3.0,
                               "retransmitted_bytes": 10}}}
    runs = [run("ecmp", 1, 1.3, 1.1), run("ecmp", 2, 1.0, 1.2), run("ecmp", 3, 1.5, 1.4),
            run("dlb", 1, 1.05, 1.0), run("dlb", 2, 1.1, 1.0), run("dlb", 3, 1.0, 1.02)]
    rows = compare.summarize(runs, [("spread", "ecmp"), ("spread", "dlb")], ["a", "b"])
    ecmp = rows[0]
    assert ecmp["jobs"]["a"] == {"slowdown": 1.3, "slowdown_min": 1.0, "slowdown_max": 1.5,
                                 "together_s": 2.6, "alone_s": 2.0, "retransmitted_bytes": 0,
                                 "fair_share_slowdown": None}
    assert ecmp["worst"] == [1.3, 1.2, 1.5] and ecmp["worst_median"] == 1.3
    d = compare.paired(rows, "ecmp", "dlb")["spread"]
    assert d["differences"] == [0.25, 0.1, 0.48] and d["median"] == 0.25 and d["lower_in"] == 3
    text = compare.table(rows, ["a", "b"])
    assert "1.300 (1.000..1.500)" in text and "3/3" in text


def test_the_summary_names_each_jobs_slowdown_the_flows_and_the_shared_links():
    from emulator.experiments.shared import report
    doc = {"verdicts": ["faithful"] * 3, "fidelity": {"verdict": "faithful"}, "baseline": True,
           "notes": ["traffic class: no effect"], "attributable": True,
           "jobs": [{"name": "a", "ranks": 16, "placement": "spread", "leaves": ["leaf1"],
                     "iteration_s": 8.4, "contended": [True, True, False], "alone_s": 7.0,
                     "slowdown": 1.2, "retransmitted_bytes": 2e6, "wrong": 0}],
           "background": [{"name": "ckpt", "kind": "checkpoint", "class": "lossless",
                           "pairs": 8, "offered_Mbps": 9.0, "achieved_Mbps": 8.5,
                           "loss": 0.01, "transfers": 16, "late_s_max": 0.2}],
           "uplinks": [{"link": "leaf1->spine2", "bytes": 5e7, "utilisation": 0.8,
                        "share": {"a": 0.6, "b": 0.38}, "unattributed_bytes": 1e6}],
           "shared_links": ["leaf1->spine2"]}
    text = "\n".join(report.lines(doc))
    assert "1.200" in text and "2/3" in text and "note: traffic class" in text
    assert "ckpt" in text and "1.00%" in text and "a 60%, b 38%" in text
    assert "links two or more jobs share: leaf1->spine2" in text


def test_the_switches_counts_are_split_among_a_pairs_owners_and_held_against_the_traces():
    from emulator.dataplane.observe.flows import Count
    eps = [{"tx_flows": [
        {"peer_index": 1, "qp": 0, "owner": "a", "bytes": 3000, "retransmitted_bytes": 0},
        {"peer_index": 1, "qp": 1, "owner": "ck", "bytes": 1000, "retransmitted_bytes": 0}]},
        {"tx_flows": []}]
    pairs = shares.pair_owners(eps)
    assert pairs == {(0, 1): {"a": 3000, "ck": 1000}}
    counts = {"leaf1->spine1": {("10.0.0.1", "10.0.0.5"): Count(2000, 2, 0, 0),
                                ("10.0.0.5", "10.0.0.1"): Count(0, 0, 120, 2)},
              "leaf2->spine1": {("10.0.0.9", "10.0.0.5"): Count(500, 1, 0, 0)}}
    att, control = shares.counted(counts, {"10.0.0.1": 0, "10.0.0.5": 1}, pairs)
    # 2000 bytes of the pair h1 -> h5 on the link, split 3:1 as h1's NIC sent them
    assert att["leaf1->spine1"] == {"a": 1500, "ck": 500}
    assert control == {"leaf1->spine1": 120, "leaf2->spine1": 0}
    assert att["leaf2->spine1"] == {shares.OTHER: 500}      # a pair no NIC counted
    assert shares.agreement({"leaf1->spine1": {"a": 1400, "ck": 500}}, att,
                            ["leaf1->spine1"]) == {"leaf1->spine1": 0.05}


def test_a_background_flow_is_named_on_the_links_it_shares_with_a_job():
    rows = [{"link": "spine1->leaf4", "owners": {"b": 900, "ckpt": 300}, "jobs": ["b"]},
            {"link": "leaf1->spine1", "owners": {"ckpt": 500}, "jobs": []},
            {"link": "leaf3->spine2", "owners": {"b": 1000}, "jobs": ["b"]}]
    got = shares.beside_jobs(rows, {"b": "job", "ckpt": "checkpoint"})
    assert got == {"ckpt": [{"link": "spine1->leaf4", "bytes": 300, "jobs": ["b"]}]}


def test_a_jobs_most_crowded_link_sets_the_slowdown_fair_sharing_predicts():
    rows = [{"link": "leaf1->spine1", "bytes": 4000, "owners": {"a": 1000, "b": 3000}},
            {"link": "leaf1->spine2", "bytes": 2000, "owners": {"a": 1000, "b": 1000}},
            {"link": "leaf2->spine1", "bytes": 5000, "owners": {"b": 5000}},
            {"link": "leaf3->spine1", "bytes": 90000, "owners": {"a": 500, "c": 89500}}]
    # a's 500 bytes are under 1 % of leaf3->spine1: a is not on it.  a's 1000 bytes
    # on leaf1->spine1 beside b's 3000 are through after 2000 byte times, twice its
    # 1000 alone (b's remaining 2000 go after them): k = 2, not 4000 / 1000
    assert shares.crowding(rows, "a") == (2.0, "leaf1->spine1")
    # b's busiest link is its own (5000); shared, its 3000 on leaf1->spine1 are
    # through after 4000: its own link still sets its time
    assert shares.crowding(rows, "b") == (1.0, "leaf2->spine1")
    assert shares.crowding(rows, "c") == (round(90000 / 89500, 4), "leaf3->spine1")
    assert shares.crowding(rows, "d") == (None, None)
    # 2 s of compute and 6 s of communication alone; 4 x the communication together
    assert shares.fair_share_slowdown(4.0, 8.0, 2.0) == 3.25
    assert shares.fair_share_slowdown(1.0, 8.0, 2.0) == 1.0
    assert shares.fair_share_slowdown(None, 8.0, 2.0) is None


def test_a_job_alone_on_its_links_has_k_one_and_fair_sharing_predicts_no_slowdown():
    # a's ring crosses two links nobody else uses; b's bytes elsewhere do not count
    rows = [{"link": "leaf1->spine1", "bytes": 6000, "owners": {"a": 6000}},
            {"link": "spine1->leaf2", "bytes": 6000, "owners": {"a": 6000}},
            {"link": "leaf3->spine2", "bytes": 9000, "owners": {"b": 9000}}]
    assert shares.crowding(rows, "a") == (1.0, "leaf1->spine1")
    assert shares.fair_share_slowdown(1.0, 3.0, 1.0) == 1.0
    # a background flow on a's link counts as an owner: k = (6000 + 2000) / 6000
    rows[1]["owners"]["ckpt"] = 2000
    rows[1]["bytes"] = 8000
    assert shares.crowding(rows, "a") == (round(8000 / 6000, 4), "spine1->leaf2")


def test_a_few_bytes_of_a_job_on_a_crowded_link_do_not_make_it_crowded():
    # adaptive routing moved a flowlet of a (400 bytes, 2 % of the link) onto b's
    # busy link: a's 400 bytes are through after 800 byte times, well within the
    # 10000 of its busiest link, so fair sharing predicts no slowdown, not 51x
    rows = [{"link": "leaf1->spine1", "bytes": 10000, "owners": {"a": 10000}},
            {"link": "leaf1->spine2", "bytes": 20400, "owners": {"a": 400, "b": 20000}}]
    assert shares.crowding(rows, "a") == (1.0, "leaf1->spine1")
    # b meets a's 400 bytes on its only link: 20400 / 20000
    assert shares.crowding(rows, "b") == (round(20400 / 20000, 4), "leaf1->spine2")
    # two jobs with equal bytes on one link, each also alone on another: k = 2
    rows = [{"link": "leaf1->spine1", "bytes": 2000, "owners": {"a": 1000, "b": 1000}},
            {"link": "leaf2->spine1", "bytes": 1000, "owners": {"a": 1000}}]
    assert shares.crowding(rows, "a") == (2.0, "leaf1->spine1")


def test_fair_sharing_stretches_only_the_exposed_communication():
    # 1 s of compute, 2 s of exposed communication alone: k = 2 doubles the 2 s
    assert shares.fair_share_slowdown(2.0, 3.0, 1.0) == round(5 / 3, 4)
    # between 1 (all compute) and k (all communication)
    assert shares.fair_share_slowdown(3.0, 4.0, 0.0) == 3.0
    assert shares.fair_share_slowdown(3.0, 4.0, 4.0) == 1.0
    # a compute figure above the iteration (measured apart) leaves no communication
    assert shares.fair_share_slowdown(3.0, 4.0, 4.5) == 1.0
    # no alone time, or no link: no prediction
    assert shares.fair_share_slowdown(2.0, 0.0, 1.0) is None
    assert shares.fair_share_slowdown(2.0, None, 1.0) is None


def test_a_lossy_fabric_says_the_classes_have_no_effect_whatever_was_asked():
    """One queue per link: a job that asked nothing (the lossless default) is told so
    too, not only one that asked for best effort."""
    job = SimpleNamespace(name="a", traffic_class=TrafficClass.LOSSLESS)
    ckpt = SimpleNamespace(name="ckpt", traffic_class=TrafficClass.LOSSLESS)
    be = SimpleNamespace(name="be", traffic_class=TrafficClass.BEST_EFFORT)
    dscp, notes = classes(SimpleNamespace(jobs=[job], background=[ckpt]), FlowControl.NONE)
    assert dscp == {} and len(notes) == 1 and "no effect here" in notes[0]
    assert "asked for best effort" not in notes[0]
    dscp, notes = classes(SimpleNamespace(jobs=[job], background=[be]), FlowControl.NONE)
    assert dscp == {} and "(be asked for best effort)" in notes[0]
    dscp, notes = classes(SimpleNamespace(jobs=[job], background=[be]), FlowControl.PFC)
    assert dscp == {"be": dscp["be"]} and "lossless class" in notes[0]
    assert classes(SimpleNamespace(jobs=[], background=[]), FlowControl.NONE) == ({}, [])
