"""ECMP repetitions are independent draws: every job gets new QP numbers, hence new
UDP source ports, hence new paths, even with the switches' hash seed fixed.

The default fabric's strided AllReduce ring (compare's default: 2 connections
leave every leaf over 4 uplinks) is traced through the installed select groups
(``ofproto/trace`` on each source leaf) for 40 job seeds.  Balls into bins:
(3/4)^4 = 32 % of draws put no two connections on one uplink.  Before job
seeds, the connections' source ports were the same in every run, so a fixed
hash seed gave the same draw every time (seeds 1..11 all collided).
"""

import re

import pytest

from emulator.dataplane.session import Session
from emulator.experiments.measure.uplinks import ring_indices
from emulator.fabric import presets
from traffic.ranks.config import qpn
from traffic.roce.frames import udp_sport

JOBS = 40


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    with Session(presets.build("leaf-spine", {}), seed=1,
                 results_base=str(tmp_path_factory.mktemp("ecmp"))) as s:
        yield s


def uplink(s, leaf, src, dst, sport):
    sw = next(x for x in s.topo["switches"] if x["name"] == leaf)
    text = s.net.ovs(leaf).appctl(
        "ofproto/trace", sw["bridge"],
        f"in_port={src['ports'][0]['switch_port']},udp,dl_src={src['mac']},"
        f"dl_dst={dst['mac']},nw_src={src['ip']},nw_dst={dst['ip']},nw_ttl=64,"
        f"udp_src={sport},udp_dst=4791", timeout=10)
    return int(re.findall(r"\boutput:(\d+)", text)[-1])


def draw(s, job):
    hosts = s.topo["hosts"]
    order = ring_indices(s.topo, "strided")
    per_leaf = {}
    for k, i in enumerate(order):
        j = order[(k + 1) % len(order)]
        q = qpn(i, j, 0, job)
        leaf = hosts[i]["leaf"]
        per_leaf.setdefault(leaf, []).append(uplink(s, leaf, hosts[i], hosts[j], udp_sport(q, q)))
    return tuple(tuple(v) for _, v in sorted(per_leaf.items()))


def test_jobs_draw_new_paths_with_the_hash_seed_fixed(fabric):
    draws = [draw(fabric, job) for job in range(1000, 1000 + JOBS)]
    assert all(len(d) == 4 and all(len(v) == 2 for v in d) for d in draws)
    clean = sum(all(len(set(v)) == len(v) for v in d) for d in draws)
    # expected 12.6 of 40 (sd 2.9); these bounds are 3 sd and more away
    assert 3 <= clean <= 25, (clean, draws)
    assert len(set(draws)) >= JOBS - 5, draws
    # every uplink of every leaf is used by some draw
    assert all(len({u for d in draws for u in d[k]}) == 4 for k in range(4))
    # without a job seed the QP numbers, hence the draw, never change
    assert draw(fabric, None) == draw(fabric, None)
