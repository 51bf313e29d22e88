"""The black-box prober on a real fabric (root): a link that silently drops or
corrupts 5 % of the frames leaving one end (no carrier loss, BFD off) is found
from the probes alone, named alone, and isolated: the controller routes around
it and no probe is lost afterwards.  About 25 s per case."""

import json

import pytest

from emulator.__main__ import main
from tests.conftest import unless_stolen, verdict_of


@pytest.mark.parametrize("fault,link", [("spine3-leaf2:loss:5", "spine3->leaf2"),
                                        ("leaf4-spine1:corrupt:5", "leaf4->spine1")])
def test_the_prober_finds_and_isolates_a_silently_lossy_link(tmp_path, capsys, fault, link):
    def measure(attempt):
        res = tmp_path / f"try{attempt}"
        rc = main(["probe", "--fault", fault, "--repeat", "1", "--baseline", "2",
                   "--results", str(res)])
        out = capsys.readouterr().out
        assert rc == 0, out[-3000:]
        (base,) = [d for d in res.iterdir() if d.name.startswith("probe-")]
        return json.loads((base / "probe.json").read_text()), out

    doc, out = unless_stolen(measure, lambda m: m[0]["repeats"][0]["fidelity"])
    cov = doc["coverage"]
    assert cov["covered"] == cov["links"] == 48 and cov["uncovered"] == []
    assert cov["paths"] == 24 * 4                 # every pair over each of the 4 spines
    (rep,) = doc["repeats"]
    assert rep["detected"] and rep["suspects"] == [link], rep
    assert rep["false_suspects"] == []
    assert 0 < rep["detect_s"] < 10
    assert rep["detect_s"] <= rep["isolated_s"] < rep["detect_s"] + 5
    assert rep["probes_after"] > 0 and rep["lost_after"] == 0, verdict_of(rep["fidelity"])
    assert doc["summary"]["localized"] == 1
    assert "localized 1/1" in out
