"""Packet capture of a run (root): ``--capture`` writes one pcap per interface
into the results directory; the frames decode in tshark as RoCEv2
(InfiniBand BTH) and carry a correct ICRC; the report lists the files; a bad
``--capture`` is one clear error, exit 2, before anything is built."""

import json
import subprocess

from scapy.all import rdpcap
from scapy.contrib.roce import BTH
from scapy.layers.l2 import Ether

from tests.conftest import emulator
from traffic.roce.frames import icrc


def test_a_runs_capture_decodes_as_rocev2_with_a_correct_icrc(tmp_path):
    p = emulator("run", "-P", "spines=2", "-P", "leaves=2", "-P", "hosts_per_leaf=1",
                 "--duration", "1", "--capture", "h1,leaf1:eth3", "--results", str(tmp_path))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    (run,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    r = json.loads((run / "results.json").read_text())
    assert set(r["captures"]) == {"capture-h1-eth0.pcap", "capture-leaf1-eth3.pcap"}
    assert all(n and n > 0 for n in r["captures"].values()), r["captures"]
    assert "capture-h1-eth0.pcap" in p.stdout
    assert "## Captures" in (run / "report.md").read_text()
    cap = run / "capture-h1-eth0.pcap"
    fields = subprocess.run(["tshark", "-r", str(cap), "-Y", "infiniband", "-T", "fields",
                             "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp",
                             "-e", "udp.dstport"],
                            capture_output=True, text=True, timeout=120, check=True).stdout
    rows = [ln.split("\t") for ln in fields.strip().splitlines()]
    assert len(rows) > 100, fields[:500]
    assert all(port == "4791" for _, _, port in rows)
    roce = [f for f in rdpcap(str(cap)) if f.haslayer(BTH)]
    assert len(roce) == len(rows)
    for f in roce[:200]:
        raw = bytes(f)
        assert int.from_bytes(raw[-4:], "little") == icrc(raw)
        p2 = Ether(raw)
        p2[BTH].icrc = None                   # scapy recomputes it: the same value
        assert bytes(p2)[-4:] == raw[-4:]


def test_a_bad_capture_spec_is_one_error_before_anything_is_built(tmp_path):
    for spec, word in (("h99", "unknown node 'h99'"), ("leaf1:eth42", "no port 'eth42'")):
        p = emulator("run", "--capture", spec, "--results", str(tmp_path))
        assert p.returncode == 2, p.stdout + p.stderr
        assert word in p.stderr and "--capture" in p.stderr
    assert not any(tmp_path.iterdir())          # no results directory, nothing built
