"""The fabric CLI (root): fault and view commands on a running fabric, driven by a
script the way a user types them; each uses the drill's injector and counters."""

import io
import logging
import os
import re

from emulator.dataplane.session import Session
from emulator.experiments.cli import FabricCLI
from emulator.fabric import presets

SCRIPT = """\
links 0.3
cut leaf1-spine1
h1 ping -c 2 -W 2 h2
loss leaf2-spine2 50
restore
cut nosuch-spine1
capture h1:eth0
h1 ping -c 5 -i 0.05 h2
capture stop
flap leaf1-spine2 2 100ms
"""


def test_cli_cuts_restores_shows_links_and_captures(tmp_path):
    from mininet.log import lg, setLogLevel
    fabric = presets.build("leaf-spine", {"spines": "2", "leaves": "2", "hosts_per_leaf": "1"})
    script = tmp_path / "commands"
    script.write_text(SCRIPT)
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)       # what the CLI prints, through Mininet's log
    lg.addHandler(handler)
    try:
        with Session(fabric, results_base=str(tmp_path)) as s, open(os.devnull) as null:
            setLogLevel("output")              # as run --cli does, once the fabric is up
            FabricCLI(s, stdin=null, script=str(script))
            # the injector of the CLI logged every event, and left every link up
            events = [line for line in open(f"{s.dir}/faults.jsonl")]
            assert len(events) >= 2 + 2 + 4        # cut/up, loss start/stop, 2 flaps
            up = {(sw["name"], p["intf"]) for sw in s.topo["switches"] for p in sw["ports"]}
            for sw, intf in up:
                with open(f"{s.net.sysfs(sw)}/class/net/{intf}/operstate") as f:
                    assert f.read().strip() == "up", intf
            captures = s.results["captures"]
    finally:
        setLogLevel("error")
        lg.removeHandler(handler)
    out = buf.getvalue()
    # links: every link direction with its load, backlog and drops
    assert re.search(r"^leaf1->spine1\s+[\d.]+\s+\d+\s+\d+$", out, re.M), out
    assert re.search(r"leaf1-spine1 down \(both\); switches told after 1.0 ms", out), out
    assert "0% packet loss" in out                 # the fabric routed around the cut
    assert "leaf2-spine2: dropping 50 % (a)" in out
    assert "leaf1-spine1 up" in out and "leaf2-spine2: loss ended" in out
    assert "error:" in out and "nosuch" in out     # a bad link: one error, prompt back
    assert "leaf1-spine2 flapped 2 times" in out
    assert captures["capture-h1-eth0.pcap"] >= 10   # 5 pings and their replies
