"""Two kinds of sender on one fabric (``compare --cc dcqcn+nscc``): which rank takes
which congestion control and transport, and each kind's share (pure)."""

import pytest

from emulator.errors import ConfigError
from emulator.experiments.compare.congestion import (
    parse_modes,
    sender_keys,
    sender_kind,
    shares,
    split_params,
    summarize,
    table,
)
from emulator.experiments.spec import build, ccparams
from emulator.experiments.spec import uet as uet_spec
from emulator.fabric import presets
from emulator.fabric.runspec import RunSpec
from lab.modes import CC, Transport


def test_modes_are_one_cc_or_two_joined_by_plus():
    assert parse_modes("none, dcqcn,dcqcn+nscc") == [
        ("none", (CC.NONE,)), ("dcqcn", (CC.DCQCN,)), ("dcqcn+nscc", (CC.DCQCN, CC.NSCC))]
    for bad in ("dcqcn+dcqcn", "dcqcn+nscc+timely", "bbr", "dcqcn+", ","):
        with pytest.raises(ConfigError) as e:
            parse_modes(bad)
        assert "--cc" in str(e.value)


def test_senders_take_the_parts_in_turn_the_root_sends_nothing():
    mode = (CC.DCQCN, CC.NSCC)
    # incast: rank 0 is the root; senders 1..7 alternate, starting with the first part
    assert [sender_kind(mode, r, "incast") for r in range(1, 8)] == [
        CC.DCQCN, CC.NSCC, CC.DCQCN, CC.NSCC, CC.DCQCN, CC.NSCC, CC.DCQCN]
    assert sender_kind(mode, 0, "incast") == CC.DCQCN
    # alltoall: every rank sends
    assert [sender_kind(mode, r, "alltoall") for r in range(4)] == [
        CC.DCQCN, CC.NSCC, CC.DCQCN, CC.NSCC]
    assert sender_kind((CC.TIMELY,), 5, "incast") == CC.TIMELY


def test_each_cc_rides_its_transport_with_the_runs_uet_keys():
    spec = build.complete(RunSpec(presets.build("leaf-spine", {}),
                                  **{"cc": "dcqcn", "queue_ms": 2000}))
    params = {CC.DCQCN: {"g": 0.0625}}
    rc = sender_keys(CC.DCQCN, spec, params)
    assert (rc["transport"], rc["cc"], rc["cc_params"]) == (Transport.RC, CC.DCQCN,
                                                            {"g": 0.0625})
    uet = sender_keys(CC.NSCC, spec, params)
    assert (uet["transport"], uet["cc"], uet["cc_params"]) == (Transport.UET, CC.NSCC, {})
    # every NIC, RoCE ones too, receives UET as the run sets it (delivery, timers, RTT)
    for keys in (rc, uet):
        assert {k: keys[k] for k in uet_spec.rank_keys(spec)} == uet_spec.rank_keys(spec)
    assert sender_keys(CC.NONE, spec, {})["transport"] == Transport.RC


def test_rccc_is_refused_in_a_mix_and_parameters_go_to_the_parts_that_know_them():
    with pytest.raises(ConfigError) as e:
        parse_modes("dcqcn+rccc")
    assert "rccc" in str(e.value)
    assert parse_modes("rccc") == [("rccc", (CC.RCCC,))]
    got = split_params(["g=0.0625", "maxwnd_bdps=2", "held_bytes=16K"],
                       [CC.NONE, CC.DCQCN, CC.NSCC])
    assert got == {CC.DCQCN: ["g=0.0625"], CC.NSCC: ["maxwnd_bdps=2", "held_bytes=16K"]}
    assert ccparams.parse(got[CC.NSCC], CC.NSCC) == {"maxwnd_bdps": 2, "held_bytes": 16384}
    with pytest.raises(ConfigError) as e:
        split_params(["g=0.0625"], [CC.NONE, CC.NSCC])
    assert "'g=0.0625'" in str(e.value) and "--cc-param" in str(e.value)


def test_each_kinds_share_against_its_fair_share():
    mode = (CC.DCQCN, CC.NSCC)
    # senders 1, 3, 5, 7 DCQCN at 3 MB/s; 2, 4, 6 NSCC at 1 MB/s: 12 of 15 to DCQCN
    rates = {r: 3e6 if r % 2 else 1e6 for r in range(1, 8)}
    s = shares(mode, rates, "incast")
    assert s["dcqcn"] == {"senders": 4, "median_Mbps": 24.0, "share": 0.8,
                          "fair_share": round(4 / 7, 4)}
    assert s["nscc"]["senders"] == 3 and s["nscc"]["share"] == 0.2
    assert s["nscc"]["median_Mbps"] == 8.0
    assert shares((CC.DCQCN,), rates, "incast") == {}
    # a sender with no figure counts as a sender, not in the shares
    s = shares(mode, {1: 2e6, 2: None}, "incast")
    assert s["dcqcn"]["share"] == 1.0 and s["nscc"] == {
        "senders": 1, "median_Mbps": None, "share": 0.0, "fair_share": 0.5}


def test_the_table_says_each_kinds_share():
    run = {"cc": "dcqcn+nscc", "rep": 0, "time_s": 1.0, "bottleneck": None, "jain": 0.8,
           "retransmitted": 0, "timeouts": 0, "cnps": 5, "marks": 7, "wrong": 0,
           "fidelity": "faithful",
           "shares": {"dcqcn": {"senders": 4, "median_Mbps": 24.0, "share": 0.8,
                                "fair_share": 0.5714},
                      "nscc": {"senders": 3, "median_Mbps": 8.0, "share": 0.2,
                               "fair_share": 0.4286}}}
    runs = [run, dict(run, rep=1, shares={k: dict(v, share=v["share"] + 0.1)
                                          for k, v in run["shares"].items()}),
            dict(run, rep=2)]
    (row,) = summarize(runs, kmax=30000)
    assert row["shares"]["dcqcn"]["share"] == 0.8 and row["shares"]["nscc"]["share"] == 0.2
    text = table([row])
    assert "dcqcn+nscc" in text.splitlines()[1]
    assert "dcqcn senders (4) got 0.80 of the senders' throughput (their fair share 0.57)" \
        in text
    (plain,) = summarize([dict(run, cc="dcqcn", shares={})], kmax=30000)
    assert plain["shares"] == {} and "fair share" not in table([plain])
    # a longer label widens the column: every row's time starts in one place
    wide = table([row, dict(row, cc="dcqcn+timely", shares={})]).splitlines()
    assert len({ln.index(" 1.00 ") for ln in wide[1:3]}) == 1
