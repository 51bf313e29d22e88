"""Rail-only against rail-optimized (root): where a cross-rail transfer goes.

Two hosts with two NICs, one leaf per rail.  The all-to-all of
``compare --fabrics`` (experiments.compare.rails_cmp) runs on each: on
rail-only every cross-rail byte crosses the sending host's HB link (its
``hb0`` counters) and no spine carries anything (each rail is one leaf);
on rail-optimized there is no HB link and the cross-rail bytes cross the
spine.  Every transfer completes.
"""

import argparse

from emulator.dataplane.session import Session
from emulator.experiments.compare import rails as rails_cmp

S = 256 << 10
PARAMS = {"planes": "2", "spines_per_plane": "1", "leaves_per_plane": "1",
          "hosts_per_leaf": "2", "host_rate": "10Mbps"}


def run(name, tmp_path):
    fabric = rails_cmp.build(name, PARAMS)
    args = argparse.Namespace(rail_size=S, qps=2)
    with Session(fabric, results_base=str(tmp_path), queue_ms=500.0) as s:
        return rails_cmp.run_one(fabric, "alltoall", s, args, 7, lambda m: None)


def test_cross_rail_bytes_cross_the_hb_link_on_rail_only_and_the_spines_otherwise(tmp_path):
    only = run("rail-only", tmp_path)
    assert only["wrong"] == 0 and not only["aborted"]
    assert only["time_s"] is not None and only["hb_stage_s"] > 0
    # 4 iterations x 2 hosts x S x (rails - 1) through the HB links, frame headers on top
    assert 8 * S <= only["hb_bytes"] < 8 * S * 1.1, only["hb_bytes"]
    assert only["spine_bytes"] < S // 10, only["spine_bytes"]

    opt = run("rail-optimized", tmp_path)
    assert opt["wrong"] == 0 and not opt["aborted"] and opt["time_s"] is not None
    assert opt["hb_bytes"] is None and opt["hb_stage_s"] is None
    # per iteration each host's 2 GPUs send S/4 to the other host's other-rail GPU
    assert opt["spine_bytes"] >= 4 * 4 * S // 4, opt["spine_bytes"]
