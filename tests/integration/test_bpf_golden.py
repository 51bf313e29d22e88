"""The C programs (root) do what the instruction-level programs they replaced did:
each golden vector of tests/data/bpf_golden.json (made by
tests/data/make_bpf_golden.py from the assembler's programs of d0607a9) is run
again under BPF_PROG_TEST_RUN, loaded through the same Python entry points a run
uses (ecnq.programs, pfc.programs), and must give the same verdict, the same
bytes, the same skb->priority and the same map contents."""

# no pass of its own under FABRIC_LAB_LAYOUT (tests/conftest.py): no fabric
LAYOUT_INDEPENDENT = True

import json
import os
import struct
from types import SimpleNamespace

import pytest

from emulator.dataplane import bpf
from emulator.dataplane.lossless import ecnq, pfc
from emulator.errors import EnvironmentProblem

PATH = os.path.join(os.path.dirname(__file__), "..", "data", "bpf_golden.json")
with open(PATH) as f:
    GOLDEN = json.load(f)
VECTORS = GOLDEN["vectors"]


def load(vector, m):
    """The fd set of ``vector``'s program family on map ``m``, and the name of the
    one it runs."""
    p = vector["params"]
    if vector["program"] == "ecnq.enqueue":
        return ecnq.programs(m, p["index"], p["limit"], 0, 0, 1.0, 0), "ecnq_in"
    if vector["program"] == "ecnq.dequeue":
        return ecnq.programs(m, p["index"], 2 ** 31 - 1, p["kmin"], p["kmax"], p["pmax"],
                             p["min_len"]), "ecnq_out"
    if vector["program"] == "pfc.egress":
        return pfc.programs(m, p["key"], p["base"], 0, -1, 0), "pfc_egress"
    ecn = SimpleNamespace(**p["ecn"]) if p["ecn"] is not None else None
    return pfc.programs(m, p["key"], -1, p["up_key"], p["up_base"], p["stamp"], ecn,
                        p["min_len"]), "pfc_ingress"


def run(vector):
    """What the C program does with ``vector``'s input, recorded as the generator
    recorded the assembler's."""
    words = vector["value_words"]
    flags = bpf.F_MMAPABLE if vector["program"].startswith("pfc.") else 0
    m = bpf.Map(words * 8, vector["entries"], flags=flags)
    try:
        for key, e in vector["map_before"].items():
            m.update(int(key), struct.pack(f"<{words}Q", *e))
        fds, name = load(vector, m)
        packet = bytes.fromhex(vector["packet"])
        with fds:
            if "priority_in" in vector:
                ret, out, priority = bpf.test_run_skb(fds[name], packet,
                                                      vector["priority_in"])
            else:
                (ret, out), priority = bpf.test_run(fds[name], packet), None
        after = {}
        for key in range(vector["entries"]):
            w = list(struct.unpack(f"<{words}Q", m.lookup(key)))
            if vector["program"].startswith("pfc."):
                for t in GOLDEN["time_words"]:
                    w[t] = int(w[t] != 0)
            after[str(key)] = w
    finally:
        m.close()
    result = {"retval": ret, "packet_out_len": len(out),
              "packet_out_diff": [[i, out[i]] for i in range(len(out))
                                  if i >= len(packet) or out[i] != packet[i]],
              "map_after": after}
    if priority is not None:
        result["priority_out"] = priority
    return result


def test_the_vectors_cover_every_program():
    counts = {}
    for v in VECTORS:
        counts[v["program"]] = counts.get(v["program"], 0) + 1
    assert set(counts) == {"ecnq.enqueue", "ecnq.dequeue", "pfc.egress", "pfc.ingress"}
    assert len(VECTORS) >= 120, counts


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_same_as_the_assembler(vector):
    # a "random" vector is unmarked unless the 16-bit random draw is 0: one run in
    # 65536 may differ, so it has three tries
    for _ in range(3 if vector.get("random") else 1):
        got = run(vector)
        if got == vector["expect"]:
            break
    assert got == vector["expect"]


def test_a_struct_that_drifts_from_c_is_refused():
    swapped = [("base", "q"), ("key", "Q")] + [f for f in zip(pfc.CONFIG.names[2:],
                                                              pfc.CONFIG.format[3:])]
    wrong = bpf.Layout("pfc_cfg", swapped)
    with pytest.raises(EnvironmentProblem, match="struct pfc_cfg is .* in C but"):
        bpf.load("pfc", bytes(wrong.size), wrong, {})


BAD = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
const volatile struct bad_cfg { __u64 at; } cfg = {};
SEC("xdp") int bad(struct xdp_md *ctx)
{
	return *(__u8 *)(long)(ctx->data + cfg.at);     /* no bounds check */
}
char LICENSE[] SEC("license") = "GPL";
"""


def test_the_verifier_log_comes_with_a_refusal(tmp_path, monkeypatch):
    from emulator.dataplane.bpf import build
    (tmp_path / "bad.bpf.c").write_text(BAD)
    obj = build.compile_one(str(tmp_path / "bad.bpf.c"), build._clang(), "test",
                            str(tmp_path / "build"))
    monkeypatch.setattr(build, "object_path", lambda name: obj)
    layout = bpf.Layout("bad_cfg", [("at", "Q")])
    with pytest.raises(EnvironmentProblem) as refused:
        bpf.load("bad", layout.pack(14), layout, {})
    assert "refused" in str(refused.value) and "invalid access to packet" in str(refused.value)
