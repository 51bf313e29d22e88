"""Training jobs from SimAI workloads: placement, groups, where collectives run, sizes,
scale, the programs' order and the analytic estimate (all pure)."""

import json
import os

import pytest

from emulator.errors import ConfigError
from emulator.experiments.training import job, simai
from emulator.experiments.training.job import JobOptions, Nic
from emulator.experiments.training.timing import edge_bytes, fabric_size, local_bytes, simulate
from emulator.fabric import addressing, presets
from tests.conftest import REPO
from traffic.jobs.config import load_job
from traffic.ranks.collectives import BUSBW_FACTOR

DATA = os.path.join(REPO, "tests", "data", "simai")
MIB = 1 << 20


def hosts(n, rate=40e6, nics=1):
    return [(f"h{i + 1}", tuple(Nic(f"h{i + 1}", f"eth{k}", rate) for k in range(nics)))
            for i in range(n)]


def workload(header, *rows):
    return simai.parse_text("\n".join([header, str(len(rows)), *rows]) + "\n", "w.txt")


def row(name="l", fwd=("NONE", 0), ig=("NONE", 0), wg=("NONE", 0), ns=(0, 0, 0), update=0):
    return (f"{name} -1 {ns[0]} {fwd[0]} {fwd[1]} {ns[1]} {ig[0]} {ig[1]} "
            f"{ns[2]} {wg[0]} {wg[1]} {update}")


def ops(program, kind=None):
    return [op for op in program if kind is None or op["op"] == kind]


# --- groups, worked by hand ----------------------------------------------------------

def test_groups_16_ranks_tp4_dp4():
    g = job.form_groups(16, tp=4)
    assert g["TP"] == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15))
    assert g["DP"] == ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15))
    assert g["PP"] == tuple((r,) for r in range(16))
    assert sorted(g["EP"]) == [(r,) for r in range(16)]           # ep 1: one-member groups
    assert sorted(g["DP_EP"]) == sorted(g["DP"])                   # ep 1: DP_EP is DP


def test_groups_with_ep2_split_the_dp_dimension():
    g = job.form_groups(16, tp=4, ep=2)
    # EP: two consecutive TP groups, same TP position; DP_EP: TP groups 2 apart
    assert g["EP"] == ((0, 4), (1, 5), (2, 6), (3, 7), (8, 12), (9, 13), (10, 14), (11, 15))
    assert g["DP_EP"] == ((0, 8), (1, 9), (2, 10), (3, 11), (4, 12), (5, 13), (6, 14),
                          (7, 15))


def test_groups_with_pp2_stay_inside_a_stage():
    g = job.form_groups(16, tp=2, pp=2)
    assert g["TP"][:2] == ((0, 1), (2, 3)) and g["TP"][4] == (8, 9)
    assert g["DP"] == ((0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15))
    assert g["PP"] == tuple((q, q + 8) for q in range(8))


def simai_mock_groups(n, tp, ep):
    """SimAI's MockNcclGroup constructor (SimCCL MockNcclGroup.cc), loop for loop, pp 1."""
    dp, tp_nums = n // tp, n // tp
    dp_ep = dp // ep
    tps = [[i * tp + j for j in range(tp)] for i in range(tp_nums)]
    dps = [[i + j * (n // dp) for j in range(dp)] for i in range(n // dp)]
    eps = []
    for i in range(tp_nums // ep):
        idx = i * ep
        for k in range(tp):
            eps.append([tps[l][k] for l in range(idx, idx + ep)])
    dpeps = []
    for i in range(tp_nums // dp_ep):
        for k in range(tp):
            dpeps.append([tps[l][k] for l in range(i, i + dp_ep * ep, ep)])
    return {"TP": tps, "DP": dps, "EP": eps, "DP_EP": dpeps}


@pytest.mark.parametrize("n,tp,ep", [(16, 4, 2), (32, 2, 4), (64, 8, 2), (24, 3, 2), (8, 1, 8)])
def test_groups_match_simai_mock_nccl(n, tp, ep):
    mine = job.form_groups(n, tp=tp, ep=ep)
    for kind, theirs in simai_mock_groups(n, tp, ep).items():
        assert sorted(mine[kind]) == sorted(tuple(x) for x in theirs), kind


@pytest.mark.parametrize("n,tp,pp,ep,words", [
    (16, 3, 1, 1, ["16 ranks", "tp 3", "multiple of 3"]),
    (16, 2, 3, 1, ["pp 3", "multiple of 6"]),
    (16, 4, 1, 3, ["ep 3", "data-parallel size 4"]),
])
def test_groups_that_do_not_divide(n, tp, pp, ep, words):
    with pytest.raises(ConfigError) as e:
        job.form_groups(n, tp, pp, ep)
    for w in words:
        assert w in str(e.value)


# --- placement -----------------------------------------------------------------------

def test_ranks_fill_hosts_in_order():
    pl = job.place(hosts(4), 4)
    assert len(pl) == 16
    assert (pl[5].host, pl[5].gpu, pl[5].nic.port, pl[5].sharing) == ("h2", 1, "eth0", 4)
    assert pl[5].share_bps == 10e6
    assert [p.host for p in job.place(hosts(4), 4, all_gpus=6)] == ["h1"] * 4 + ["h2"] * 2


def test_too_many_gpus_names_the_numbers_and_the_fix():
    with pytest.raises(ConfigError) as e:
        job.place(hosts(4), 4, all_gpus=20)
    msg = str(e.value)
    for w in ("20 GPUs", "4 hosts x 4 GPUs per host = 16", "hosts_per_leaf", "--gpus-per-host 5"):
        assert w in msg
    with pytest.raises(ConfigError, match="--gpus-per-host"):
        job.place(hosts(4), 0)


def test_gpus_use_the_nic_of_their_rail():
    pl = job.place(hosts(2, nics=2), 4)           # 2 NICs, 4 GPUs: GPU g on NIC g mod 2
    assert [(p.nic.port, p.sharing) for p in pl[:4]] == [("eth0", 2), ("eth1", 2)] * 2
    pl = job.place(hosts(2, nics=4), 4)           # one NIC per GPU
    assert [(p.nic.port, p.sharing) for p in pl[:4]] == [(f"eth{g}", 1) for g in range(4)]


def test_fabric_hosts_from_presets():
    topo = addressing.plan(presets.build("multi-plane", {}), "ab12")
    hs = job.fabric_hosts(topo)
    assert [n.port for n in hs[0][1]] == ["eth0", "eth1"]
    topo = addressing.plan(presets.build("dual-tor", {}), "ab12")
    assert [n.port for n in job.fabric_hosts(topo)[0][1]] == ["bond0"]


# --- where collectives run, and their sizes --------------------------------------------

def test_equivalent_sizes_keep_the_ring_edges_bytes():
    s = 12 * MIB
    for kind in ("allreduce", "allgather", "reducescatter"):
        eq = fabric_size(kind, s, [2, 2])          # 4 members on 2 endpoints
        assert eq == s * 3 * 2 / (4 * 1)
        assert edge_bytes(kind, 2, eq) == pytest.approx(edge_bytes(kind, 4, s))
        eq = fabric_size(kind, s, [4, 4, 4])        # 12 members on 3 endpoints
        assert edge_bytes(kind, 3, eq) == pytest.approx(edge_bytes(kind, 12, s))
    # AlltoAll: each member sends s/n to every other; endpoints A, B exchange m_A m_B s/n
    eq = fabric_size("alltoall", s, [2, 2])
    assert eq / 2 == 2 * 2 * s / 4
    assert fabric_size("alltoall", s, [1, 1, 1, 1]) == s
    assert fabric_size("broadcast", s, [2, 2]) == s


def test_nvlink_bytes_are_nccl_tests_ring_bytes():
    assert local_bytes("allreduce", 8 * MIB, [4]) == 2 * 3 / 4 * 8 * MIB
    assert local_bytes("allgather", 8 * MIB, [4]) == 3 / 4 * 8 * MIB
    assert local_bytes("alltoall", 8 * MIB, [2, 2]) == 1 / 4 * 8 * MIB
    assert local_bytes("allreduce", 8 * MIB, [1, 1]) == 0


def one_op(program, group):
    return next(op for op in program if op["op"] == "coll" and op["group"] == group)


def test_local_and_fabric_groups():
    # 16 ranks, 4 per host, tp 4: TP on one host (NVLink), DP across the 4 hosts
    w = workload("HYBRID_TRANSFORMER model_parallel_NPU_group: 4",
                 row(fwd=("ALLREDUCE", 8 * MIB), wg=("ALLREDUCE", 4 * MIB)))
    j = job.build_job(w, hosts(4), JobOptions(gpus_per_host=4, real_rate_bps=10e6, scale=1))
    assert j.rate_ratio == 1 and j.stretch == 1 and j.nvlink_bps == 80e6
    tp, dp = one_op(j.programs[5], "TP"), one_op(j.programs[5], "DP")
    assert tp["members"] == [4, 5, 6, 7] and not tp["fabric"] and tp["bytes"] == 8 * MIB
    assert tp["local_ns"] == round(2 * 3 / 4 * 8 * MIB * 8 / 80e6 * 1e9)
    assert dp["members"] == [1, 5, 9, 13] and dp["fabric"] and dp["local_ns"] == 0
    assert dp["bytes"] == 4 * MIB                 # one member per endpoint: the size itself
    assert j.summary["TP"]["local"] == 4 and j.summary["DP"]["fabric"] == 4


def test_a_hierarchical_group_runs_the_equivalent_size_over_its_endpoints():
    # 2 hosts x 8 GPUs, tp 4: DP {0, 4, 8, 12}, two members behind each NIC
    w = workload("HYBRID_TRANSFORMER model_parallel_NPU_group: 4",
                 row(wg=("ALLREDUCE", 12 * MIB)))
    j = job.build_job(w, hosts(2), JobOptions(gpus_per_host=8, real_rate_bps=5e6, scale=1))
    dp = one_op(j.programs[0], "DP")
    assert dp["members"] == [0, 4, 8, 12] and dp["fabric"]
    assert dp["bytes"] == round(12 * MIB * 3 * 2 / 4)
    assert dp["local_ns"] == round(2 * 3 / 4 * 12 * MIB * 8 / j.nvlink_bps * 1e9)
    assert j.summary["DP"]["fabric_bytes"] == 4 * dp["bytes"]


def test_rail_fabric_groups_inside_a_host_stay_local():
    # one NIC per GPU: a TP group spans the host's NICs but talks over NVLink
    w = workload("HYBRID_TRANSFORMER model_parallel_NPU_group: 4",
                 row(fwd=("ALLREDUCE", MIB), wg=("ALLREDUCE", MIB)))
    j = job.build_job(w, hosts(2, nics=4), JobOptions(gpus_per_host=4, scale=1))
    assert not one_op(j.programs[0], "TP")["fabric"]
    assert one_op(j.programs[0], "DP")["members"] == [0, 4]
    assert j.summary["intra_host_network"] == 0
    # tp 2 < 4 GPUs: a DP group puts two NICs of one host in its ring: counted
    w = workload("HYBRID_TRANSFORMER model_parallel_NPU_group: 2", row(wg=("ALLREDUCE", MIB)))
    j = job.build_job(w, hosts(2, nics=4), JobOptions(gpus_per_host=4, scale=1))
    assert j.summary["intra_host_network"] == 2


def test_ring_order_keeps_an_endpoints_members_together():
    # 2 NICs, 4 GPUs per host, tp 1: DP is every rank; ring by host, NIC, rank
    w = workload("DATA", row(wg=("ALLREDUCE", MIB)))
    j = job.build_job(w, hosts(2, nics=2), JobOptions(gpus_per_host=4, scale=1))
    assert one_op(j.programs[0], "DP")["members"] == [0, 2, 1, 3, 4, 6, 5, 7]


# --- scale -----------------------------------------------------------------------------

def test_choose_scale_rule():
    assert job.choose_scale(10.0, 300.0) == 100.0                # 10 s x 300 / 30 s
    assert job.choose_scale(0.01, 300.0) == 1.0                  # never enlarges
    assert job.choose_scale(10.0, 300.0, cap=40.0) == 40.0
    assert job.choose_scale(10.0, 300.0, target_s=60.0) == 50.0


def test_scaling_divides_sizes_and_stretches_times():
    w = workload("HYBRID_TRANSFORMER", row(wg=("ALLREDUCE", 10 * MIB), ns=(1000, 2000, 3000),
                                           update=100))
    o = JobOptions(gpus_per_host=1, real_rate_bps=400e6, scale=10)   # r = 400e6 / 40e6 = 10
    j = job.build_job(w, hosts(4), o)
    assert (j.rate_ratio, j.scale, j.stretch) == (10, 10, 1)
    o = JobOptions(gpus_per_host=1, real_rate_bps=4e9, scale=10)      # r = 100
    j = job.build_job(w, hosts(4), o)
    assert j.stretch == 10
    prog = j.programs[0]
    assert [op["ns"] for op in ops(prog, "compute")] == [10000, 20000, 30000]
    dp = one_op(prog, "DP")
    assert dp["bytes"] == round(10 * MIB / 10) and dp["local_ns"] == 100 * 10


def test_scale_cap_keeps_chunks_at_8_frames_and_flags_small_collectives():
    # DP over 4 hosts: chunk = size / 4; 1 MiB -> 256 KiB = 64 frames -> cap 8
    w = workload("HYBRID_TRANSFORMER",
                 row(wg=("ALLREDUCE", MIB)), row(wg=("ALLREDUCE", 4096)))
    j = job.build_job(w, hosts(4), JobOptions(gpus_per_host=1, real_rate_bps=400e9))
    assert j.scale_cap == 8.0                     # the 4 KiB one is below 8 frames anyway
    assert j.scale <= 8.0 and j.latency_bound == ("L1.wg.DP",)
    j = job.build_job(w, hosts(4), JobOptions(gpus_per_host=1, scale=16))   # forced past it
    assert j.latency_bound == ("L0.wg.DP", "L1.wg.DP")


def test_default_scale_brings_an_iteration_to_30_seconds():
    w = simai.parse(os.path.join(DATA, "L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt"))
    j = job.build_job(w, hosts(8), JobOptions(gpus_per_host=2))
    assert 1 < j.scale < j.scale_cap
    assert j.rate_ratio == 400e9 / 20e6
    assert job.estimate(j)["iteration_s"] == pytest.approx(30.0, rel=1e-3)
    assert job.estimate(j)["iteration_s"] == pytest.approx(
        j.real_iteration_s * j.rate_ratio / j.scale, rel=1e-3)


# --- programs ----------------------------------------------------------------------------

TWO_ROWS = ("HYBRID_TRANSFORMER model_parallel_NPU_group: 2",
            row("a", fwd=("ALLREDUCE", MIB), ig=("ALLGATHER", MIB), wg=("REDUCESCATTER", MIB),
                ns=(10, 20, 30)),
            row("b", fwd=("ALLREDUCE", MIB), wg=("ALLREDUCE", MIB), ns=(11, 21, 31)))


def shape(program):
    out = []
    for op in program:
        if op["op"] == "compute":
            out.append(op["ns"])
        elif op["op"] == "coll":
            out.append(op["id"] + ("" if op["blocking"] else "~"))
        else:
            out.append(op["op"] + ":" + ",".join(op.get("ids", [op.get("id", "")])))
    return out


def test_simai_order_forward_backward_and_waits():
    j = job.build_job(workload(*TWO_ROWS), hosts(2),
                      JobOptions(gpus_per_host=2, iterations=2, scale=1,
                                 real_rate_bps=20e6))
    assert shape(j.programs[0]) == [
        10, "it0.L0.fwd.TP0", 11, "it0.L1.fwd.TP0",
        21, 31, "it0.L1.wg.DP0~",                     # b: no ig collective
        20, "it0.L0.ig.TP0", 30, "it0.L0.wg.DP0~",
        "wait:it0.L0.wg.DP0", 10, "it1.L0.fwd.TP0",
        "wait:it0.L1.wg.DP0", 11, "it1.L1.fwd.TP0",
        21, 31, "it1.L1.wg.DP0~", 20, "it1.L0.ig.TP0", 30, "it1.L0.wg.DP0~",
        "wait:it1.L0.wg.DP0,it1.L1.wg.DP0"]
    # every member holds the very same op; the document is JSON
    assert j.programs[0][1] is j.programs[1][1]
    assert json.loads(json.dumps(job.job_document(j)))["ranks"] == [0, 0, 1, 1]


def test_data_policy_has_no_fwd_or_ig_collectives():
    header, *rows = TWO_ROWS
    j = job.build_job(workload("DATA", *rows), hosts(2),
                      JobOptions(gpus_per_host=2, scale=1, real_rate_bps=20e6))
    assert shape(j.programs[0]) == [10, 11, 31, "it0.L1.wg.DP0~", 21, 30, "it0.L0.wg.DP0~",
                                    "wait:it0.L0.wg.DP0,it0.L1.wg.DP0"]
    assert j.summary["skipped"]["policy"] == 2 * 4  # 2 fwd collectives x 4 TP groups (tp 1)
    assert j.summary["TP"]["collectives"] == 0


def test_micro_runs_every_rows_wg_collective_blocking():
    w = workload("MICRO", row(wg=("ALLGATHER", 4096)), row(wg=("ALLGATHER", 8192)))
    j = job.build_job(w, hosts(4), JobOptions(gpus_per_host=1, scale=1))
    assert shape(j.programs[2]) == ["it0.L0.wg.DP0", "it0.L1.wg.DP0"]


def test_one_member_groups_zero_bytes_and_simai_4096_floor():
    w = workload("HYBRID_TRANSFORMER_FWD_IN_BCKWD",                       # tp 1
                 row(fwd=("ALLREDUCE", MIB), wg=("ALLREDUCE", 0)),
                 row(ig=("ALLGATHER", 1)))
    j = job.build_job(w, hosts(2), JobOptions(gpus_per_host=1, scale=1))
    assert ops(j.programs[0], "coll") == []
    assert j.summary["skipped"] == {"single_member": 4, "zero_bytes": 1, "policy": 0}
    w = workload("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2",
                 row(fwd=("ALLREDUCE", 100), ig=("ALLREDUCE", 100)))
    j = job.build_job(w, hosts(1), JobOptions(gpus_per_host=2, scale=1))
    assert [op["bytes"] for op in ops(j.programs[0], "coll")] == [4096, 100]


def test_checkpoints_replay_forward_before_the_initiating_rows_ig():
    w = simai.parse_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 "
                         "checkpoints: 1 1 checkpoint_initiates: 1 3\n4\n" + "\n".join(
                             row(f"l{i}", fwd=("ALLREDUCE", MIB), ns=(1, 2, 3))
                             for i in range(4)) + "\n")
    j = job.build_job(w, hosts(1), JobOptions(gpus_per_host=2, scale=1))
    ids = [op["id"] for op in ops(j.programs[0], "coll")]
    assert ids == ["it0.L0.fwd.TP0", "it0.L1.fwd.TP0", "it0.L2.fwd.TP0", "it0.L3.fwd.TP0",
                   "it0.L1.rfwd.TP0", "it0.L2.rfwd.TP0"]


PIPELINE = ("HYBRID_TRANSFORMER model_parallel_NPU_group: 1 pp: 2 ga: 3 pp_comm: 65536",
            row("pre", wg=("ALLREDUCE", MIB), ns=(1, 1, 1)),
            *[r for m in range(3) for r in (row("a", wg=("ALLREDUCE", MIB), ns=(5, 5, 5)),
                                             row("b", ns=(5, 5, 5)))],
            row("loss", ns=(2, 2, 2)))


def walk(program):
    """Compute labels, p2p and collectives of one iteration's program, in order."""
    out = []
    for op in program:
        if op["op"] == "compute":
            out.append(op["label"].split(".", 1)[1])
        elif op["op"] in ("send", "recv"):
            out.append(op["op"] + ":" + ".".join(op["id"].split(".")[1:3]))
        elif op["op"] == "coll":
            out.append(op["id"].split(".", 1)[1] + ("" if op["blocking"] else "~"))
        else:
            out.append("wait")
    return out


def test_pipeline_runs_aicbs_layout_prefix_blocks_1f1b_suffix():
    j = job.build_job(workload(*PIPELINE), hosts(4), JobOptions(gpus_per_host=1, scale=1))
    assert j.groups["PP"] == ((0, 2), (1, 3))
    assert j.summary["layout"]["text"] == "prefix 1 rows, 3 micro-batches of 2 rows, suffix 1 rows"
    # stage 0: the prefix's forward once, then 1F1B over the blocks (rows 1-2, 3-4, 5-6)
    # with one warm-up forward, the suffix (row 7), the prefix's backward last
    assert walk(j.programs[0]) == [
        "L0.fwd", "L1.fwd", "L2.fwd", "send:mb0.act", "L3.fwd", "L4.fwd", "send:mb1.act",
        "recv:mb0.grad", "L2.ig", "L2.wg", "L1.ig", "L1.wg", "L1.wg.DP0~",
        "L5.fwd", "L6.fwd", "send:mb2.act",
        "recv:mb1.grad", "L4.ig", "L4.wg", "L3.ig", "L3.wg", "L3.wg.DP0~",
        "recv:mb2.grad", "L6.ig", "L6.wg", "L5.ig", "L5.wg", "L5.wg.DP0~",
        "L7.fwd", "L7.ig", "L7.wg", "L0.ig", "L0.wg", "L0.wg.DP0~", "wait"]
    # stage 1 alternates from the start
    assert walk(j.programs[2])[:11] == [
        "L0.fwd", "recv:mb0.act", "L1.fwd", "L2.fwd", "L2.ig", "L2.wg", "L1.ig", "L1.wg",
        "L1.wg.DP1~", "send:mb0.grad", "recv:mb1.act"]
    sends = {op["id"]: (r, op["peer"], op["bytes"]) for r, p in enumerate(j.programs)
             for op in p if op["op"] == "send"}
    recvs = {op["id"]: (op["peer"], r, op["bytes"]) for r, p in enumerate(j.programs)
             for op in p if op["op"] == "recv"}
    assert sends == recvs and len(sends) == 2 * 2 * 3
    assert j.summary["PP"] == {"collectives": 12, "bytes": 12 * 65536,
                               "scaled_bytes": 12 * 65536, "fabric": 12, "local": 0,
                               "fabric_bytes": 12 * 65536}
    assert job.estimate(j)["groups"]["PP"]["exposed_s"] > 0
    # every row's compute runs once per iteration on every rank, whatever the layout
    for p in j.programs:
        ns = sum(op["ns"] for op in p if op["op"] == "compute")
        assert ns == (3 + 6 * 15 + 2 * 3) * j.stretch


def test_a_pipeline_without_ga_repeats_runs_each_row_once_as_one_micro_batch():
    w = workload("HYBRID_TRANSFORMER model_parallel_NPU_group: 1 pp: 2 ga: 3 pp_comm: 65536",
                 *[row(f"l{i}", wg=("ALLREDUCE", MIB), ns=(5, 5, 5)) for i in range(6)])
    j = job.build_job(w, hosts(4), JobOptions(gpus_per_host=1, scale=1))
    assert not j.summary["layout"]["found"] and j.summary["layout"]["micro_batches"] == 1
    assert [x for x in walk(j.programs[0]) if ":" in x] == ["send:mb0.act", "recv:mb0.grad"]
    assert [x for x in walk(j.programs[0]) if x.endswith(".fwd")] == [
        f"L{i}.fwd" for i in range(6)]


def test_unsupported_policy_and_bad_options():
    with pytest.raises(ConfigError, match="HYBRID_DLRM is not one the lab runs"):
        job.build_job(workload("HYBRID_DLRM", row()), hosts(1), JobOptions(gpus_per_host=1))
    with pytest.raises(ConfigError, match="iterations"):
        job.build_job(workload("DATA", row()), hosts(1), JobOptions(iterations=0))


def test_real_samples_build_on_a_preset():
    topo = addressing.plan(presets.build("leaf-spine", {}), "ab12")
    for name in ("microAllReduce.txt", "L7B-D1-C02_Llama7B_deepspeed_zero3_A100.txt",
                 "L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt"):
        j = job.build_job(simai.parse(os.path.join(DATA, name)), job.fabric_hosts(topo),
                          JobOptions(gpus_per_host=2))
        assert job.estimate(j)["iteration_s"] <= 30.0 * 1.001


# --- the estimate --------------------------------------------------------------------------

def micro(kind, size, n_hosts, k=1):
    w = workload("MICRO", row(wg=(kind, size)))
    return job.build_job(w, hosts(n_hosts, rate=40e6), JobOptions(
        gpus_per_host=k, scale=1, real_rate_bps=40e6 / k))


@pytest.mark.parametrize("kind", ["allreduce", "allgather", "reducescatter", "alltoall"])
def test_estimate_of_one_collective_is_the_textbook_number(kind):
    j = micro(kind.upper(), 8 * MIB, 4)
    est = job.estimate(j)
    textbook = BUSBW_FACTOR[kind](4) * 8 * MIB * 8 / 40e6
    assert est["iteration_s"] == pytest.approx(textbook)
    assert est["groups"]["DP"]["busy_s"] == pytest.approx(textbook)
    assert est["groups"]["DP"]["exposed_s"] == pytest.approx(textbook)
    assert est["compute_s"] == 0


def test_estimate_of_a_hierarchical_allreduce():
    # 2 hosts x 2 GPUs share each 40 Mbit/s NIC (20 per GPU): the fabric ring carries the
    # 4-member ring's edge bytes at one GPU's share, then the NVLink hop
    j = micro("ALLREDUCE", 8 * MIB, 2, k=2)
    est = job.estimate(j)
    wire = 2 * 3 / 4 * 8 * MIB * 8 / 20e6
    nvlink = 2 * 3 / 4 * 8 * MIB * 8 / (8 * 20e6)
    assert est["iteration_s"] == pytest.approx(wire + nvlink, rel=1e-6)
    assert job.estimate(j, 80e6)["iteration_s"] == pytest.approx(wire / 2 + nvlink, rel=1e-6)


def test_non_blocking_wg_overlaps_the_next_compute():
    # wg of row 1 (issued first in backward) overlaps ig/wg compute of row 0
    w = workload("HYBRID_TRANSFORMER",
                 row("a", ns=(0, 0, 1_000_000_000)),
                 row("b", wg=("ALLREDUCE", 4 * MIB)))
    j = job.build_job(w, hosts(2), JobOptions(gpus_per_host=1, scale=1, real_rate_bps=40e6))
    ar = 2 * 1 / 2 * 4 * MIB * 8 / 40e6                    # 0.84 s < 1 s of compute
    est = job.estimate(j)
    assert est["iteration_s"] == pytest.approx(1.0)
    assert est["groups"]["DP"]["busy_s"] == pytest.approx(ar)
    assert est["exposed_s"] == pytest.approx(0.0, abs=1e-9)


def test_simulate_reports_a_deadlock():
    prog = [[{"op": "recv", "id": "x", "peer": 1, "bytes": 1}], []]
    with pytest.raises(RuntimeError, match="deadlock"):
        simulate(prog, [1e9, 1e9], ["a", "b"])


def test_the_hop_calibration_runs_over_one_rank_per_host_then_a_barrier_of_all():
    from emulator.experiments.training import hops
    j = job.build_job(workload(*TWO_ROWS), hosts(3, nics=2),
                      JobOptions(gpus_per_host=2, scale=1, real_rate_bps=20e6))
    cal = hops.calibration(j.placement, 4096)
    firsts = [0, 2, 4]                               # each host's GPU 0, on its NIC 0
    for r, ops in enumerate(cal):
        assert ops[-1]["id"] == "cal.barrier" and ops[-1]["members"] == list(range(6))
        assert not ops[-1]["fabric"]
        assert len(ops) == (1 + hops.REPEATS if r in firsts else 1)
    hop = cal[0][0]
    assert hop["members"] == firsts and hop["bytes"] == 3 * 4096 and hop["blocking"]
    assert hops.calibration(j.placement[:2], 4096) == [[], []]     # one host: nothing
    doc = job.job_document(j)
    assert all(not op.get("id", "").startswith("cal.") for p in doc["programs"] for op in p)
    # the job engine takes the calibration ahead of the programs (launch.job_config)
    eps = [{"intf": f"eth{i}", "ip": f"10.0.0.{i + 1}", "rate_bps": 40e6}
           for i in range(len(doc["endpoints"]))]
    cfg = load_job({"endpoints": eps, "ranks": doc["ranks"],
                    "programs": [c + p for c, p in zip(cal, doc["programs"])]})
    assert cfg.instances["cal.hop0"].endpoints == (0, 2, 4)     # one NIC per host
    assert not cfg.instances["cal.barrier"].network
