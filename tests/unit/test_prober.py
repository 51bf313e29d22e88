"""The black-box prober's pure logic: pairs, path choice, coverage, statistics,
localization from probe counts, and the windows that confirm a suspect."""

import random

import pytest

from emulator.errors import ConfigError
from emulator.experiments.measure.paths import choose, ecmp_width
from emulator.experiments.probe import prober as pr
from emulator.experiments.probe.probe import fault_hop, parse_fault
from emulator.fabric import addressing, presets


def topo(preset="leaf-spine", **params):
    return addressing.plan(presets.build(preset, {k: str(v) for k, v in params.items()}))


def port_to(topo_doc, node, peer):
    sw = next(s for s in topo_doc["switches"] if s["name"] == node)
    return next(p["name"] for p in sw["ports"] if p["peer"] == peer)


def leaf_spine_paths(t):
    """Every probe path of a leaf-spine fabric, as ofproto/trace would give them:
    each prober pair through every spine."""
    spines = [s["name"] for s in t["switches"] if s["kind"] == "spine"]
    paths = {}
    for src, dst in pr.probe_pairs(t):
        for sp in spines:
            paths[f"{src['name']}>{dst['name']}@{sp}"] = [
                f"{src['name']}:eth0", f"{src['leaf']}:{port_to(t, src['leaf'], sp)}",
                f"{sp}:{port_to(t, sp, dst['leaf'])}",
                f"{dst['leaf']}:{port_to(t, dst['leaf'], dst['name'])}", dst["name"]]
    return paths


def counts_for(paths, bad_hops, rate, n, rng, noise=0.0):
    """{flow: (n, lost)}: each probe lost with ``rate`` on every bad hop it crosses,
    and with ``noise`` anywhere (the emulator's own losses)."""
    out = {}
    for f, path in paths.items():
        hits = sum(h in bad_hops for h in path)
        p = 1 - (1 - rate) ** hits * (1 - noise)
        out[f] = (n, sum(rng.random() < p for _ in range(n)))
    return out


def test_binomial_tails():
    assert pr.binom_cdf(0, 10, 0.5) == pytest.approx(1 / 1024)
    assert pr.binom_sf(10, 10, 0.5) == pytest.approx(1 / 1024)
    assert pr.binom_sf(0, 10, 0.3) == pytest.approx(1.0)
    assert pr.binom_cdf(3, 20, 0.1) + pr.binom_sf(4, 20, 0.1) == pytest.approx(1.0)
    assert pr.binom_sf(6, 500, 0.001) < 1e-4 < pr.binom_sf(3, 500, 0.001)


def test_every_host_probes_one_host_on_every_other_leaf():
    t = topo()
    pairs = pr.probe_pairs(t)
    assert len(pairs) == 8 * 3
    for h in t["hosts"]:
        leaves = [d["leaf"] for s, d in pairs if s["name"] == h["name"]]
        assert sorted(leaves) == sorted({x["leaf"] for x in t["hosts"]} - {h["leaf"]})
    assert {d["name"] for _, d in pairs} == {h["name"] for h in t["hosts"]}   # all receive
    mp = topo("multi-plane")
    rails = {s["rail"] for s, _ in pr.probe_pairs(mp)}
    assert rails == {1, 2}                                          # every rail probed
    assert all(s["ports"][0]["switch"] != d["ports"][0]["switch"] for s, d in pr.probe_pairs(mp))


def test_ecmp_width_counts_the_shortest_paths():
    t = topo(spines=4)
    assert ecmp_width(t, "leaf1", "leaf2") == 4
    assert ecmp_width(t, "leaf1", "leaf1") == 1
    dual = topo("dual-tor")
    assert ecmp_width(dual, "h1.nic", "h3.nic") == 8   # 2 ToRs x 2 spines x 2 ToRs


def test_choose_keeps_one_candidate_per_complete_distinct_path():
    a = ["h1:eth0", "leaf1:eth3", "spine1:eth2", "leaf2:eth1", "h3"]
    b = ["h1:eth0", "leaf1:eth4", "spine2:eth2", "leaf2:eth1", "h3"]
    dropped = ["h1:eth0", "leaf1:eth5"]                       # the trace ended in a drop
    assert choose({7: a, 5: a, 9: b, 3: dropped}) == {5: a, 9: b}


def test_coverage_names_the_directed_links_no_probe_crosses():
    t = topo()
    paths = leaf_spine_paths(t)
    covered, total, missing = pr.coverage(paths, t)
    assert total == 8 * 2 + 4 * 4 * 2 and covered == total and missing == []
    without = {k: v for k, v in paths.items() if "@spine4" not in k}
    _, _, missing = pr.coverage(without, t)
    assert missing == sorted([f"leaf{i}->spine4" for i in range(1, 5)]
                             + [f"spine4->leaf{i}" for i in range(1, 5)])
    dual = topo("dual-tor")
    names = set(pr.directed_links(dual).values())
    assert "h1.nic->leaf1" in names and "leaf1->h1.nic" in names
    assert "h1.nic->h1" not in names and "h1->h1.nic" not in names  # inside the host


def test_hops_map_back_to_links():
    t = topo()
    (sw, port), other = pr.link_of_hop(f"leaf1:{port_to(t, 'leaf1', 'spine2')}", t)
    assert (sw, port["peer"], other) == ("leaf1", "spine2", "spine2")
    (sw, port), other = pr.link_of_hop("h3:eth0", t)
    assert (sw, port["peer"], other) == ("leaf2", "h3", "h3")
    assert fault_hop("leaf1-spine1", t) == f"leaf1:{port_to(t, 'leaf1', 'spine1')}"
    assert fault_hop("spine1-leaf1", t) == f"spine1:{port_to(t, 'spine1', 'leaf1')}"
    assert fault_hop("h1-leaf1", t) == "h1:eth0"
    assert fault_hop("leaf1-h1", t) == f"leaf1:{port_to(t, 'leaf1', 'h1')}"


def test_fault_specs():
    t = topo()
    assert parse_fault(None, t) == ("leaf1-spine1", "loss", 5.0)
    assert parse_fault("spine2-leaf3:corrupt:2.5", t) == ("spine2-leaf3", "corrupt", 2.5)
    for bad in ("leaf1-spine1:loss:0", "leaf1-spine1:drop:5", "leaf1-spine1:loss:x",
                "leaf1-spine9:loss:5", "h1-leaf1:loss:5"):
        with pytest.raises(ConfigError):
            parse_fault(bad, t)


@pytest.mark.parametrize("bad", [("leaf1", "spine1"), ("spine3", "leaf2"), ("h5", None),
                                 ("leaf4", "h8")])
def test_a_lossy_link_is_localized_alone(bad):
    t = topo()
    paths = leaf_spine_paths(t)
    node, peer = bad
    hop = f"{node}:eth0" if peer is None else f"{node}:{port_to(t, node, peer)}"
    rng = random.Random(1)
    res = pr.localize(paths, counts_for(paths, {hop}, 0.05, 300, rng))
    assert [s["hop"] for s in res["suspects"]] == [hop]
    assert res["unexplained"] == [] and res["lossy"]
    assert 0.02 < res["suspects"][0]["loss"] < 0.09


def test_two_lossy_links_are_both_named():
    t = topo()
    paths = leaf_spine_paths(t)
    hops = {f"leaf1:{port_to(t, 'leaf1', 'spine1')}", f"spine4:{port_to(t, 'spine4', 'leaf3')}"}
    res = pr.localize(paths, counts_for(paths, hops, 0.1, 300, random.Random(2)))
    assert {s["hop"] for s in res["suspects"]} == hops


def test_the_emulators_own_losses_name_nobody():
    t = topo()
    paths = leaf_spine_paths(t)
    for seed in range(20):
        counts = counts_for(paths, set(), 0.0, 500, random.Random(seed), noise=0.0005)
        assert pr.localize(paths, counts)["suspects"] == []
        # a noisier machine, once its floor is known, is not blamed on a link either
        counts = counts_for(paths, set(), 0.0, 500, random.Random(seed), noise=0.004)
        floor = sum(k for _, k in counts.values()) / sum(n for n, _ in counts.values())
        assert pr.localize(paths, counts, floor=floor)["suspects"] == []


def test_no_probes_no_verdict():
    t = topo()
    paths = leaf_spine_paths(t)
    assert pr.localize(paths, {f: (0, 0) for f in paths}) == {
        "suspects": [], "lossy": [], "unexplained": []}


def progress(t_s, totals):
    """An engine progress line: totals {flow: [sent, arrived]}, nothing lost in flight
    and the last packet of each step arriving (the span is what was sent)."""
    return {"t_ns": int(t_s * 1e9), "flows": {f: [n, k] for f, (n, k) in totals.items()},
            "sent": {f: n for f, (n, _) in totals.items()}}


def test_prober_confirms_over_windows_and_measures_the_floor():
    t = topo()
    paths = leaf_spine_paths(t)
    hop = f"leaf2:{port_to(t, 'leaf2', 'spine3')}"
    p = pr.Prober(paths, window_s=2.0, confirm=2)
    rng = random.Random(3)
    totals = {f: [0, 0] for f in paths}
    named, t_s = [], 0.0
    for step in range(16):                      # 0.5 s steps, 50 probes per path each
        t_s += 0.5
        bad = {hop} if step >= 6 else set()
        for f, (n, k) in counts_for(paths, bad, 0.05, 50, rng).items():
            totals[f][0] += n
            totals[f][1] += n - k
        named.append(p.feed(progress(t_s, totals)))
        if step == 5:
            assert p.set_floor(int(0.5e9)) == pr.MIN_FLOOR      # calm: no losses
    assert not any(named[:6])                    # nothing before the fault
    first = next(i for i, x in enumerate(named) if x)
    assert named[first] == [hop] and first >= 7  # confirmed on the 2nd window naming it
    assert all(x in ([], [hop]) for x in named)
    c = p.counts()
    assert all(n == 200 for n, _ in c.values())  # a 2 s window of 100 probes/s


def test_a_black_hole_is_seen_by_the_senders_count():
    """Nothing arrives on the paths through one link: no span grows there, the
    sent counts show them lost."""
    t = topo()
    paths = leaf_spine_paths(t)
    hop = f"spine2:{port_to(t, 'spine2', 'leaf4')}"
    p = pr.Prober(paths, window_s=2.0, confirm=2)
    span = {f: 0 for f in paths}
    arrived = dict(span)
    named = []
    for step in range(1, 9):
        doc = {"t_ns": int(step * 0.5e9), "flows": {}, "sent": {}}
        for f, path in paths.items():
            doc["sent"][f] = 50 * step
            if not (step > 3 and hop in path):          # black-holed from step 4 on
                span[f] = arrived[f] = 50 * step
            if span[f]:
                doc["flows"][f] = [span[f], arrived[f]]
        named.append(p.feed(doc))
    assert named[-1] == [hop] and not any(named[:3])
    lost = {f: k for f, (n, k) in p.counts().items() if hop in paths[f]}
    assert lost and all(k >= 150 for k in lost.values())


def engine_progress(paths, t_s, lost, read_lag_s=0.0, pps=100):
    """The progress line an engine prints at ``t_s`` (every flow sends sequence i
    at i / pps s, 1 ms to arrive): arrivals read only up to ``read_lag_s`` before
    (a held-up engine), the sequences in ``lost[flow]`` never arriving."""
    doc = {"t_ns": int(t_s * 1e9), "flows": {}, "sent": {}}
    for f in paths:
        sent = int(t_s * pps) + 1
        seen = [i for i in range(int((t_s - read_lag_s - 0.001) * pps) + 1)
                if i not in lost.get(f, ())]
        doc["sent"][f] = sent
        if seen:
            doc["flows"][f] = [seen[-1] - seen[0] + 1, len(seen), seen[-1] + 1]
    return doc


def test_late_snapshots_and_reads_count_no_loss_and_losses_exactly():
    """Snapshots 0.5 s apart, some late by tens of ms (a held-up engine), some
    read with arrivals behind: a lossless window counts 0 on every flow, a
    window with losses counts exactly them."""
    t = topo()
    paths = leaf_spine_paths(t)
    times = [0.5, 1.0, 1.545, 2.045, 2.55, 3.05, 3.5, 4.0]
    lags = {1.545: 0.045, 3.05: 0.03}
    p = pr.Prober(paths, window_s=2.0, confirm=2)
    for t_s in times:
        p.feed(engine_progress(paths, t_s, {}, lags.get(t_s, 0.0)))
        assert all(k == 0 for _, k in p.counts().values()), t_s
        assert all(k == 0 for _, k in p.counts(since_ns=int(1.5e9)).values())
    assert all(n >= 200 for n, _ in p.counts(since_ns=int(1.5e9)).values())
    flows = sorted(paths)
    lost = {flows[0]: {260, 261, 300}, flows[5]: {330}}   # sent at 2.6-3.3 s
    p = pr.Prober(paths, window_s=2.0, confirm=2)
    for t_s in times:
        p.feed(engine_progress(paths, t_s, lost, lags.get(t_s, 0.0)))
    c = p.counts(since_ns=int(2.5e9))
    assert c[flows[0]][1] == 3 and c[flows[5]][1] == 1
    assert sum(k for _, k in c.values()) == 4


def test_links_on_the_same_paths_are_named_together():
    """With two leaves, leaf1->spine1 and spine1->leaf2 carry exactly the same
    probes: no probe can tell them apart, so both are named."""
    t = topo(spines=2, leaves=2)
    paths = leaf_spine_paths(t)
    up, down = f"leaf1:{port_to(t, 'leaf1', 'spine1')}", f"spine1:{port_to(t, 'spine1', 'leaf2')}"
    res = pr.localize(paths, counts_for(paths, {down}, 0.05, 400, random.Random(4)))
    (s,) = res["suspects"]
    assert {s["hop"], *s["alike"]} == {up, down}
    p = pr.Prober(paths, window_s=1.0, confirm=1)
    doc = progress(1.0, {f: (0, 0) for f in paths})
    p.feed(doc)
    totals = {f: (400, 400 - k) for f, (_, k) in
              counts_for(paths, {down}, 0.05, 400, random.Random(5)).items()}
    assert sorted(p.feed(progress(2.0, totals))) == sorted([up, down])


def test_the_summary_counts_a_repeat_localized_only_without_false_suspects():
    from emulator.experiments.probe.probe import summarise, table
    ok = {"floor": 0.001, "detected": True, "detect_s": 1.5, "isolated_s": 1.6,
          "lost_after": 0, "suspects": ["leaf1->spine1"], "true_link": "leaf1->spine1",
          "false_suspects": [], "fidelity": {"verdict": "faithful"}}
    wrong = dict(ok, suspects=["leaf1->spine1", "h1->leaf1"], false_suspects=["h1->leaf1"])
    missed = dict(ok, detected=False, suspects=[], isolated_s=None)
    del missed["detect_s"], missed["isolated_s"]
    s = summarise([ok, wrong, missed], 15)
    assert (s["localized"], s["repeats"], s["false_suspects"]) == (1, 3, 1)
    assert s["detect_s"] == {"median": 1.5, "max": 1.5}
    assert "localized 1/3" in table([ok, wrong, missed], s)
    none = summarise([missed], 15)
    assert none["detect_s"]["median"] is None and "not isolated" in table([missed], none)
