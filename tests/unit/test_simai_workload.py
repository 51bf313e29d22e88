"""SimAI / AICB workload files: headers, collectives and their groups, bad files, real samples."""

import os

import pytest

from emulator.errors import ConfigError
from emulator.experiments.training import simai
from emulator.experiments.training.simai import Collective, Unknown
from tests.conftest import REPO

DATA = os.path.join(REPO, "tests", "data", "simai")
ROW = "layer\t-1\t10\tNONE\t0\t20\tNONE\t0\t30\tNONE\t0\t5"
NEW = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 4 ep: 2 pp: 3 vpp: 5 "
       "ga: 6 all_gpus: 48 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 1024")


def text(header, *rows, count=None):
    rows = rows or (ROW,)
    return "\n".join([header, str(len(rows) if count is None else count), *rows]) + "\n"


def row(fwd="NONE", ig="NONE", wg="NONE", size=1000):
    return f"r\t-1\t1\t{fwd}\t{size}\t2\t{ig}\t{size}\t3\t{wg}\t{size}\t100"


def error(txt, path="w.txt"):
    with pytest.raises(ConfigError) as e:
        simai.parse_text(txt, path)
    return str(e.value)


# --- headers -------------------------------------------------------------------------

def test_new_header_every_key():
    w = simai.parse_text(text(NEW))
    assert w.policy == "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
    assert w.parallel == {"tp": 4, "ep": 2, "pp": 3, "vpp": 5, "ga": 6, "all_gpus": 48,
                          "pp_comm": 1024}
    assert w.unknown == () and w.extra == {}
    assert w.checkpoints == () and w.checkpoint_initiates == ()


def test_keys_in_any_order_give_the_same_workload():
    shuffled = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD pp_comm: 1024 all_gpus: 48 ga: 6 "
                "checkpoint_initiates: 0 vpp: 5 ep: 2 checkpoints: 0 pp: 3 "
                "model_parallel_NPU_group: 4")
    assert simai.parse_text(text(shuffled)).parallel == simai.parse_text(text(NEW)).parallel


def test_old_header_takes_1_for_missing_keys_and_no_all_gpus():
    w = simai.parse_text(text("HYBRID_TRANSFORMER_FWD_IN_BCKWD\tmodel_parallel_NPU_group: 8 "
                              "checkpoints: 0 checkpoint_initiates: 0"))
    assert w.parallel == {"tp": 8, "ep": 1, "pp": 1, "vpp": 1, "ga": 1, "all_gpus": None,
                          "pp_comm": 0}


@pytest.mark.parametrize("header,expect", [
    ("MICRO", {"tp": 1, "ep": 1, "pp": 1}),
    ("DATA", {"tp": 1}),
    ("HYBRID_TRANSFORMER model_parallel_NPU_group: 2 pp: 4", {"tp": 2, "pp": 4, "ep": 1}),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD ep: 8", {"tp": 1, "ep": 8, "ga": 1}),
])
def test_missing_keys_take_1(header, expect):
    w = simai.parse_text(text(header))
    assert w.policy == header.split()[0]
    assert {k: w.parallel[k] for k in expect} == expect and w.parallel["all_gpus"] is None


def test_pp_comm_without_colon_and_as_a_whole_float():
    w = simai.parse_text(text("HYBRID_TRANSFORMER_FWD_IN_BCKWD pp: 2 pp_comm 50331648"))
    assert w.parallel["pp_comm"] == 50331648
    w = simai.parse_text(text("HYBRID_TRANSFORMER_FWD_IN_BCKWD pp: 2 pp_comm: 2097152.0"))
    assert w.parallel["pp_comm"] == 2097152


def test_checkpoint_lists():
    w = simai.parse_text(text("HYBRID_TRANSFORMER_FWD_IN_BCKWD checkpoints: 2 0 2 "
                              "checkpoint_initiates: 1 3", ROW, ROW, ROW, ROW))
    assert w.checkpoints == (0, 2) and w.checkpoint_initiates == (3,)
    msg = error(text("HYBRID_TRANSFORMER_FWD_IN_BCKWD checkpoints: 1 7"))
    assert "line 1" in msg and "checkpoints" in msg and "7" in msg
    assert "2 layers announced, 1 given" in error(
        text("HYBRID_TRANSFORMER_FWD_IN_BCKWD checkpoints: 2 0"))


def test_unknown_keys_are_kept_and_reported():
    # aicb's micro-test writer emits expert_parallel_npu_group:, which SimAI ignores
    w = simai.parse_text(text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 "
                              "expert_parallel_npu_group: 2 stray"))
    assert w.extra == {"expert_parallel_npu_group": "2"}
    assert w.parallel["ep"] == 1
    assert w.unknown == (Unknown(1, "header", "expert_parallel_npu_group"),
                         Unknown(1, "header", "stray"))
    assert all("line 1" in r for r in w.report())
    assert w.unknown_rows == ()


@pytest.mark.parametrize("header,words", [
    ("HYBRID_TRANSFORMER ep: two", ["ep", "'two'", "whole number"]),
    ("HYBRID_TRANSFORMER ep: 1.5", ["ep", "'1.5'"]),
    ("HYBRID_TRANSFORMER model_parallel_NPU_group: 0", ["model_parallel_NPU_group", "at least 1"]),
    ("HYBRID_TRANSFORMER pp: -2", ["pp", "-2"]),
    ("HYBRID_TRANSFORMER all_gpus: 0", ["all_gpus"]),
    ("HYBRID_TRANSFORMER pp_comm: -1", ["pp_comm"]),
    ("HYBRID_TRANSFORMER ga:", ["'ga:' has no value"]),
    ("HYBRID_TRANSFORMER ep: 2 ep: 4", ["given twice"]),
    ("TRANSFORMER model_parallel_NPU_group: 2", ["not a parallelism policy", "MICRO"]),
])
def test_invalid_header_values_name_line_1(header, words):
    msg = error(text(header))
    assert msg.startswith("w.txt: line 1:")
    for word in words:
        assert word in msg


# --- collectives and groups ----------------------------------------------------------

@pytest.mark.parametrize("token,kind", [("ALLREDUCE", "allreduce"), ("ALLGATHER", "allgather"),
                                        ("REDUCESCATTER", "reducescatter"),
                                        ("ALLTOALL", "alltoall"), ("BROADCAST", "broadcast")])
def test_a_bare_collective_is_tp_in_fwd_and_ig_and_dp_in_wg(token, kind):
    layer = simai.parse_text(text("DATA", row(token, token, token, 4096))).layers[0]
    assert layer.fwd == Collective(kind, "TP", 4096)
    assert layer.ig == Collective(kind, "TP", 4096)
    assert layer.wg == Collective(kind, "DP", 4096)


@pytest.mark.parametrize("suffix,group", [("_EP", "EP"), ("_DP_EP", "DP_EP")])
def test_suffixes_name_the_group_in_every_column(suffix, group):
    layer = simai.parse_text(text("DATA", row("ALLTOALL" + suffix, "ALLGATHER" + suffix,
                                              "REDUCESCATTER" + suffix))).layers[0]
    assert layer.fwd == ("alltoall", group, 1000)
    assert layer.ig == ("allgather", group, 1000)
    assert layer.wg == ("reducescatter", group, 1000)


def test_none_is_no_collective_whatever_its_size():
    layer = simai.parse_text(text("DATA", row("NONE", "NONE", "NONE", 777))).layers[0]
    assert (layer.fwd, layer.ig, layer.wg) == (None, None, None)
    assert layer.phase("ig") == (2, None)
    assert (layer.fwd_ns, layer.ig_ns, layer.wg_ns, layer.update_ns) == (1, 2, 3, 100)


def test_unknown_tokens_are_kept_with_their_line_and_column():
    # SimAI turns these into no collective (ALLREDUCEALLTOALL even matches ALLREDUCE first)
    w = simai.parse_text(text("DATA", row(), row("ALLREDUCEALLTOALL", "ALLREDUCE_XY", "SEND"),
                              row(wg="ALLREDUCE_NVLS")))
    assert w.unknown == (Unknown(4, "fwd", "ALLREDUCEALLTOALL"), Unknown(4, "ig", "ALLREDUCE_XY"),
                         Unknown(4, "wg", "SEND"), Unknown(5, "wg", "ALLREDUCE_NVLS"))
    assert w.unknown_rows == (4, 5)
    assert len(w.layers) == 3 and w.layers[1].fwd is None
    assert w.report()[0].startswith("line 4: fwd collective 'ALLREDUCEALLTOALL'")


def test_rows_keep_names_dependencies_and_file_lines():
    w = simai.parse_text(text("DATA", row(), "", "emb  7  5 ALLREDUCE 8 0 NONE 0 0 NONE 0 0",
                              count=2))
    assert [(l.name, l.line, l.dependency) for l in w.layers] == [("r", 3, -1), ("emb", 5, 7)]


def test_hybrid_customized_rows_carry_their_policy():
    w = simai.parse_text(text("HYBRID_CUSTOMIZED", row() + "\tDATA"))
    assert w.layers[0].policy == "DATA"
    assert "12" in error(text("HYBRID_CUSTOMIZED", row()))
    assert "row policy 'NOPE'" in error(text("HYBRID_CUSTOMIZED", row() + "\tNOPE"))


# --- bad files -----------------------------------------------------------------------

@pytest.mark.parametrize("txt,line,words", [
    ("", 1, ["empty"]),
    ("\nDATA\n1\n" + ROW, 1, ["blank"]),
    ("DATA\n", 2, ["row count"]),
    ("DATA\ntwo\n" + ROW, 2, ["'two'"]),
    ("DATA\n0\n", 2, ["at least 1"]),
    ("DATA\n1\nlayer -1 10 NONE 0 20 NONE 0 30 NONE 0\n", 3, ["11 columns", "12 columns"]),
    ("DATA\n1\n" + ROW + " 9\n", 3, ["13 columns"]),
    ("DATA\n1\n" + row(size="12MB") + "\n", 3, ["fwd_bytes", "'12MB'"]),
    ("DATA\n1\n" + row(size="-5") + "\n", 3, ["fwd_bytes", "at least 0"]),
    ("DATA\n1\nr -1 1.5 NONE 0 2 NONE 0 3 NONE 0 1\n", 3, ["fwd_ns", "'1.5'"]),
    ("DATA\n1\nr x 1 NONE 0 2 NONE 0 3 NONE 0 1\n", 3, ["dependency"]),
    ("DATA\n3\n" + ROW + "\n\n" + ROW + "\n", 5, ["ends after 2 rows", "declares 3",
                                                  "set line 2 to 2"]),
    ("DATA\n1\n" + ROW + "\n" + ROW + "\n", 4, ["declares 1 rows", "has more"]),
])
def test_bad_files_name_the_file_and_line(txt, line, words):
    msg = error(txt, "bad.txt")
    assert msg.startswith(f"bad.txt: line {line}:"), msg
    for word in words:
        assert word in msg


def test_a_file_that_cannot_be_read(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        simai.parse(str(tmp_path / "missing.txt"))


def test_parse_reads_a_file_and_names_it(tmp_path):
    p = tmp_path / "w.txt"
    p.write_text("DATA\n2\n" + ROW + "\n")
    with pytest.raises(ConfigError, match=str(p) + ": line 3"):
        simai.parse(str(p))


# --- real samples (tests/data/simai/README.md) -----------------------------------------

def sample(name):
    path = os.path.join(DATA, name)
    with open(path) as f:
        lines = f.read().splitlines()
    return simai.parse(path), int(lines[1]), lines


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(DATA) if n.endswith(".txt")))
def test_every_real_sample_parses_with_every_row(name):
    w, count, lines = sample(name)
    assert len(w.layers) == count == sum(1 for line in lines[2:] if line.strip())
    assert w.unknown == ()
    assert w.path.endswith(name)


def test_simai_micro_allreduce_sample():
    w, _, _ = sample("microAllReduce.txt")
    assert w.parallel == {"tp": 8, "ep": 1, "pp": 1, "vpp": 8, "ga": 1, "all_gpus": 8,
                          "pp_comm": 0}
    assert [l.fwd for l in w.layers] == [("allreduce", "TP", 16777216),
                                         ("allreduce", "TP", 67108864)]
    assert w.layers[0].fwd_ns == 556000


def test_simai_analytical_sample_has_ep_and_dp_ep_groups():
    w, _, _ = sample("workload_analytical_first40.txt")
    assert w.parallel == {"tp": 2, "ep": 16, "pp": 12, "vpp": 8, "ga": 24, "all_gpus": 9216,
                          "pp_comm": 50331648}
    groups = {(p, getattr(l, p).group) for l in w.layers for p in simai.PHASES
              if getattr(l, p)}
    assert groups >= {("wg", "DP"), ("wg", "DP_EP"), ("fwd", "TP"), ("fwd", "EP"),
                      ("ig", "EP"), ("ig", "TP")}
    moe = w.layers[4]
    assert moe.name == "moe_grad_norm1" and moe.wg == ("allgather", "DP_EP", 19327352832)
    assert w.layers[7].ig == ("reducescatter", "TP", 0)


def test_aicb_samples_old_header_broadcast_and_mixed_whitespace():
    w, _, _ = sample("L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt")
    assert w.parallel["tp"] == 2 and w.parallel["all_gpus"] is None
    assert w.layers[0].fwd == ("broadcast", "TP", 16384)
    assert w.layers[1].wg == ("reducescatter", "DP", 13509853184)
    w, _, _ = sample("L7B-D1-C02_Llama7B_deepspeed_zero3_A100.txt")
    assert w.parallel["tp"] == 1
    assert (w.layers[0].fwd_ns, w.layers[0].ig_ns) == (14356000, 4756000)
    assert w.layers[8].wg is None and w.layers[0].ig == ("allgather", "TP", 357468)


# --- AICB's layout of an iteration ------------------------------------------------------

def named(*names, ga=1):
    rows = [f"{n}\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t0" for n in names]
    return simai.parse_text(text(f"HYBRID_TRANSFORMER pp: 2 ga: {ga}", *rows))


def test_layout_of_aicbs_pp2_ga4_file_prefix_four_blocks_suffix():
    w = simai.parse(os.path.join(DATA, "aicb_gpt7b_l4_tp2_pp2_ga4.txt"))
    lay = simai.layout(w)
    names = [w.layers[i].name for i in range(len(w.layers))]
    assert lay.found and len(lay.blocks) == w.parallel["ga"] == 4
    assert [names[i] for i in lay.prefix] == ["grad_norm", "layernorm", "moe_grad_norm1",
                                             "moe_grad_norm2"]
    for block in lay.blocks:
        assert [names[i] for i in block] == ["embedding_layer", "attention_layer", "mlp_layer",
                                            "attention_layer", "mlp_layer", "embedding_norm"]
    assert [names[i] for i in lay.suffix] == [f"cross_entropy{i}" for i in (1, 2, 3)] + [
        f"optimizer{i}" for i in (1, 2, 3, 4)]
    # every row is in exactly one place
    assert sorted(lay.prefix + sum(lay.blocks, ()) + lay.suffix) == list(range(len(names)))


def test_layout_of_aicbs_aiob_file_whose_blocks_differ_in_compute_only():
    w = simai.parse(os.path.join(DATA, "aicb_gpt7b_l4_tp2_pp2_ga4_aiob.txt"))
    lay = simai.layout(w)
    assert lay.found and len(lay.prefix) == 7 and len(lay.suffix) == 7
    assert [len(b) for b in lay.blocks] == [5] * 4
    first, second = (w.layers[b[0]] for b in lay.blocks[:2])
    assert first.name == second.name == "embedding_layer" and first.wg_ns != second.wg_ns


def test_layout_takes_the_longest_repeat_and_falls_back_to_one_block():
    lay = simai.layout(named("p", "a", "b", "a", "b", "s", ga=2))
    assert (lay.prefix, lay.blocks, lay.suffix) == ((0,), ((1, 2), (3, 4)), (5,))
    # a block that repeats inside itself: the longest block whose copies fit wins
    lay = simai.layout(named("a", "a", "a", "a", ga=2))
    assert lay.blocks == ((0, 1), (2, 3)) and lay.found
    lay = simai.layout(named("x", "y", "z", ga=3))           # no repeat: one micro-batch
    assert lay.blocks == ((0, 1, 2),) and not lay.found and lay.prefix == lay.suffix == ()
    assert "do not repeat" in lay.describe()
    lay = simai.layout(named("x", "y", ga=1))
    assert lay.blocks == ((0, 1),) and lay.found
