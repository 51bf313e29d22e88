"""A large fabric comes up (root): 128 hosts on 40 switches, every host checked
against a host on every leaf (``reach.check_pairs``).

Before, the builtin controller stopped after installing 2-3 of 40 switches:
os-ken's per-app event queue (128) filled with PORT_STATUS events while a
handler waited for a barrier reply queued behind them.  The speed goal lives
in ``bench/bench_fabric.py --hosts``; this holds the start to a generous bound.
"""

import json
import subprocess
import sys

from tests.conftest import REPO


def test_a_128_host_fabric_comes_up_reachable(tmp_path):
    p = subprocess.run([sys.executable, "-m", "emulator", "run", "-P", "spines=8",
                        "-P", "leaves=32", "-P", "hosts_per_leaf=4", "--workload", "none",
                        "--results", str(tmp_path)], cwd=REPO, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    (run,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    r = json.loads((run / "results.json").read_text())
    assert r["reachability"]["pairs"] == r["reachability"]["reachable"] == 128 * 32
    assert r["reachability"]["checked"] == "every host to a host on every leaf"
    assert r["timings"]["reachable_after_build_s"] < 180, r["timings"]
    assert "fabric: 40 switches, 128 hosts" in p.stdout
    # every switch installed by the controller, each once
    log = (run / "controller.log").read_text()
    assert log.count('"event": "connect", "found_flows"') == 40
