"""Each invariant of the chaos soak turns false when a violation is fed to it, and
each allowance says how many packets it excused (emulator/experiments/drill/
invariants: report, faultlog, files, allowances; chaos.check_log).  The leftover
interface is planted on the machine: tests/integration/test_chaos_soak.py."""

import json

import pytest

from emulator.experiments.drill import chaos as dc
from emulator.experiments.drill.chaos_job import reliable_check
from emulator.experiments.drill.invariants import allowances, faultlog, files
from emulator.experiments.drill.invariants import report as rep
from emulator.fabric import addressing, presets

T = 10_000_000_000                 # the first fault, CLOCK_MONOTONIC ns
NEXT = T + 5_000_000_000           # the second
MS = 1_000_000


@pytest.fixture(scope="module")
def topo():
    return addressing.plan(presets.build("leaf-spine", {"spines": 2, "leaves": 3,
                                                        "hosts_per_leaf": 1}))


def trace(topo, src, a, spine, b, dst):
    """A path as ofproto/trace gives it: host port, each switch's egress, the host."""
    sw = {s["name"]: s for s in topo["switches"]}
    port = {(s, p["peer"]): p["name"] for s in sw for p in sw[s]["ports"]}
    return [f"{src}:eth0", f"{a}:{port[a, spine]}", f"{spine}:{port[spine, b]}",
            f"{b}:{port[b, dst]}", dst]


@pytest.fixture
def paths(topo):
    # "a": h1 -> h2 crosses leaf2; "b": h3 -> h1 does not
    return {"a": trace(topo, "h1", "leaf1", "spine1", "leaf2", "h2"),
            "b": trace(topo, "h3", "leaf3", "spine2", "leaf1", "h1")}


CUT = {"kind": "cut", "target": "leaf2-spine1", "at_s": 1.0, "repair_s": 1.0, "params": {}}
CRASH = {"kind": "crash", "target": "spine1", "at_s": 6.0, "repair_s": 1.0, "params": {}}


def gap(start_ns, lost):
    return {"start_ns": start_ns, "end_ns": start_ns + 20 * MS, "skipped": lost,
            "never_arrived": lost}


def ran(recv=None, starts=(T,), **extra):
    recv = recv or {}
    doc = {"starts": list(starts), "interrupted": False, "sent": {"a": 100, "b": 100},
           "recv": {k: dict(recv.get(k, {}), received_packets=100) for k in ("a", "b")},
           "fid": {"verdict": "faithful", "emulation_drops": {"total": 0}},
           "drops": [{}] * len(starts), "in_flight_ms": None}
    doc.update(extra)
    return doc


def chaos_of(topo, paths, r, faults=(CUT,), lossless=False):
    return rep.report(list(faults), r, [], paths, topo, 1000.0, lossless)


# ---- untouched_flows_lost_nothing ---------------------------------------------------

def test_a_packet_lost_on_an_untouched_flow_breaks_it(topo, paths):
    lost_b = {"b": {"disruptions": [gap(T + 10 * MS, 3)]}}
    chaos = chaos_of(topo, paths, ran(lost_b))
    assert chaos["invariants"]["untouched_flows_lost_nothing"] is False
    assert chaos["faults"][0]["untouched_lost_packets"] == 3
    assert "3 at fault 1" in chaos["why"]["untouched_flows_lost_nothing"]
    assert "untouched_flows_lost_nothing: FALSE (3 at fault 1" in rep.table(chaos)
    # the same loss on the flow the cut touches is the fault's
    lost_a = {"a": {"disruptions": [gap(T + 10 * MS, 3)]}}
    chaos = chaos_of(topo, paths, ran(lost_a))
    assert chaos["invariants"]["untouched_flows_lost_nothing"] is True
    assert chaos["faults"][0]["lost_packets"] == 3


def test_a_packet_lost_before_the_first_fault_breaks_it(topo, paths):
    calm = {"a": {"disruptions": [gap(T - 2000 * MS, 2)]}}
    chaos = chaos_of(topo, paths, ran(calm))
    assert chaos["invariants"]["untouched_flows_lost_nothing"] is False
    assert chaos["totals"]["calm_lost_packets"] == 2
    assert "2 before the first fault" in chaos["why"]["untouched_flows_lost_nothing"]
    # a soak that injected nothing: every loss is calm
    chaos = chaos_of(topo, paths, ran(calm, starts=()), faults=())
    assert chaos["totals"]["calm_lost_packets"] == 2


def test_the_in_flight_allowance_says_how_many_packets_it_excused(topo, paths):
    # b's gap opens 8.9 ms before the crash (which touches every flow): its packets
    # were in flight when the crash struck; the cut before did not touch b
    late = {"b": {"disruptions": [gap(NEXT - 8_900_000, 32)]}}
    chaos = chaos_of(topo, paths, ran(late, starts=(T, NEXT), in_flight_ms=16.2),
                     faults=(CUT, CRASH))
    assert chaos["invariants"]["untouched_flows_lost_nothing"] is True
    a = chaos["allowances"]["in_flight"]
    assert a == {"invariant": "untouched_flows_lost_nothing", "value": 16.2, "unit": "ms",
                 "excused_packets": 32}
    assert "allowance in_flight (16.2 ms): excused 32 packets of " \
           "untouched_flows_lost_nothing" in rep.table(chaos)
    # at the 5 ms jitter floor the gap stays the cut's: a breach, nothing excused
    chaos = chaos_of(topo, paths, ran(late, starts=(T, NEXT)), faults=(CUT, CRASH))
    assert chaos["invariants"]["untouched_flows_lost_nothing"] is False
    assert chaos["allowances"]["in_flight"]["excused_packets"] == 0


def test_the_lossy_path_allowance_counts_the_loss_a_queue_on_the_path_took(topo, paths):
    lost_b = {"b": {"disruptions": [gap(T + 10 * MS, 5)]}}
    queue = [{"spine2->leaf1": 4}]                         # on b's path
    chaos = chaos_of(topo, paths, ran(lost_b, drops=queue))
    assert chaos["invariants"]["untouched_flows_lost_nothing"] is True
    assert chaos["allowances"]["lossy_path"]["excused_packets"] == 5
    strict = chaos_of(topo, paths, ran(lost_b, drops=queue), lossless=True)
    assert strict["invariants"]["untouched_flows_lost_nothing"] is False
    assert "lossy_path" not in strict["allowances"]        # not in force when lossless
    elsewhere = chaos_of(topo, paths, ran(lost_b, drops=[{"spine1->leaf2": 4}]))
    assert elsewhere["invariants"]["untouched_flows_lost_nothing"] is False


# ---- no_emulation_drops -------------------------------------------------------------

def test_an_emulation_drop_breaks_it_and_each_rule_says_what_it_excused(topo, paths):
    fid = {"verdict": "faithful", "emulation_drops": {"total": 1, "receiver_sockets": 1}}
    chaos = chaos_of(topo, paths, ran(fid=fid))
    assert chaos["invariants"]["no_emulation_drops"] is False
    assert chaos["why"]["no_emulation_drops"] == "receiver_sockets 1"
    assert chaos_of(topo, paths, ran(fid=None))["invariants"]["no_emulation_drops"] is False
    # three verdicts of the same window: all rules, no statistics lag, no faulted links
    v = [{"emulation_drops": {"total": n}} for n in (0, 4, 11)]
    chaos = chaos_of(topo, paths, ran(fid=v[0], verdicts=(v[1], v[2]),
                                      sender={"caught_up_packets": 12}, catch_up_ms=146.5))
    assert chaos["invariants"]["no_emulation_drops"] is True
    got = {k: (a["value"], a["excused_packets"]) for k, a in chaos["allowances"].items()}
    assert got["ovsdb_stats_lag"] == (5.0, 4) and got["faulted_links"] == (True, 7)
    assert got["sender_catch_up"] == (146.5, 12)
    assert allowances.verdict_excuses(v[0], None, v[2]) == (None, None)


# ---- reliable_qps_delivered_or_dead -------------------------------------------------

def job_of(instances):
    return {"hosts": ["h1", "h2"], "instances": len(instances), "interruptions": 0,
            "calls_completed": 1, "reliable": reliable_check(instances)}


def test_a_qp_packet_neither_delivered_nor_dead_breaks_it(topo, paths):
    a = "10.0.0.1"
    sent = {"src_ip": a, "qpn": 7, "sent_packets": 10, "outstanding": 0, "failed": False}
    docs = [{"name": "h1", "per_qp": {"requesters": [sent], "responders": []}},
            {"name": "h2", "per_qp": {"requesters": [], "responders": [
                {"src_ip": a, "qpn": 7, "delivered_packets": 9}]}}]
    chaos = chaos_of(topo, paths, ran(job=job_of([{"docs": docs}])))
    assert chaos["invariants"]["reliable_qps_delivered_or_dead"] is False
    assert "packets neither delivered nor reported dead" in \
        chaos["why"]["reliable_qps_delivered_or_dead"]
    # the same QP flushed by its aborted job: excused, and counted
    docs[0]["aborted"] = True
    chaos = chaos_of(topo, paths, ran(job=job_of([{"docs": docs}])))
    assert chaos["invariants"]["reliable_qps_delivered_or_dead"] is True
    assert chaos["allowances"]["aborted_job"]["excused_packets"] == 1


# ---- every_fault_reported, every_fault_repaired -------------------------------------

FLAP = {"kind": "flap", "target": "leaf1-spine2", "params": {"count": 2, "period": 0.2}}
LOSS = {"kind": "loss", "target": "leaf3-spine1", "params": {"percent": 10.0}}
KILL = {"kind": "kill", "target": "controller", "params": {}}


def rows():
    return [dict(CUT, t_ns=T), dict(FLAP, t_ns=T + 3000 * MS), dict(LOSS, t_ns=T + 6000 * MS),
            dict(KILL, t_ns=T + 9000 * MS)]


def log_of(rows_, late_ms=2):
    """The injector's lines for ``rows_``, each change ``late_ms`` after the soak's time."""
    out = []
    for r in rows_:
        t = r["t_ns"] + late_ms * MS
        for i, (kind, target) in enumerate(faultlog.expected(r)):
            out.append({"t_ns": t + i * 100 * MS, "kind": kind,
                        "target": target or "fl1234loss"})
    return out


def test_the_injectors_log_and_the_rows_agree_fault_for_fault():
    got = faultlog.compare(rows(), log_of(rows()))
    assert got["reported"] and got["repaired"] and got["max_offset_ms"] == 2.0
    assert got["logged_changes"] == 2 + 4 + 2 + 2


def test_a_fault_the_report_misses_breaks_every_fault_reported():
    log = log_of(rows())
    crash = [{"t_ns": T + 1500 * MS, "kind": "switch_crash", "target": "spine2"},
             {"t_ns": T + 1900 * MS, "kind": "switch_recover", "target": "spine2"}]
    got = faultlog.compare(rows(), log[:2] + crash + log[2:])
    assert not got["reported"] and got["repaired"]
    assert got["unreported_total"] == 1
    assert got["unreported"][0]["kind"] == "switch_crash"
    # one after the last row, too
    got = faultlog.compare(rows()[:3], log)
    assert not got["reported"] and got["unreported"][0]["kind"] == "controller_kill"


def test_a_row_the_injector_never_logged_or_logged_elsewhere_breaks_it():
    got = faultlog.compare(rows(), log_of(rows())[:-2])          # no controller kill
    assert not got["reported"] and got["unlogged"] == [4]
    far = log_of(rows(), late_ms=faultlog.MATCH_MS + 50)
    got = faultlog.compare(rows(), far)
    assert not got["reported"] and [r for r, _ in got["mistimed"]] == [1, 2, 3, 4]
    assert faultlog.compare(rows(), far, match_ms=faultlog.MATCH_MS + 100)["reported"]


def test_a_fault_without_its_repair_breaks_every_fault_repaired():
    log = log_of(rows())
    assert (log[5]["kind"], log[5]["target"]) == ("link_up", "leaf1-spine2")
    got = faultlog.compare(rows(), log[:5] + log[6:])             # the flap's last link_up
    assert got["reported"] and not got["repaired"]
    assert got["unrepaired"] == [[2, "link_up leaf1-spine2"]]
    # an interrupted soak's last fault may stop after a repair, not before one
    cut_short = log_of(rows()[:2])[:4]                             # one flap cycle, link up
    assert faultlog.compare(rows()[:2], cut_short, interrupted=True)["repaired"]
    assert not faultlog.compare(rows()[:2], cut_short[:3], interrupted=True)["repaired"]
    assert not faultlog.compare(rows()[:2], cut_short)["repaired"]


def test_the_soak_reads_the_injectors_own_file(tmp_path, topo, paths):
    path = tmp_path / "faults.jsonl"
    log = log_of([dict(CUT, t_ns=T)])
    path.write_text("".join(json.dumps(e) + "\n" for e in log))
    chaos = chaos_of(topo, paths, ran())
    dc.check_log(chaos, str(path))
    assert chaos["invariants"]["every_fault_reported"] is True
    assert chaos["invariants"]["every_fault_repaired"] is True
    # the file cut in its last line: the repair is not on record
    path.write_text(path.read_text()[:-9])
    chaos = chaos_of(topo, paths, ran())
    dc.check_log(chaos, str(path))
    assert chaos["invariants"]["every_fault_repaired"] is False
    assert "link_up leaf2-spine1" in chaos["why"]["every_fault_repaired"]
    # and no log at all: the report's row is nobody's
    chaos = chaos_of(topo, paths, ran())
    dc.check_log(chaos, str(tmp_path / "none.jsonl"))
    assert chaos["invariants"]["every_fault_reported"] is False
    assert "rows [1] not in the injector's log" in chaos["why"]["every_fault_reported"]


# ---- results_complete ---------------------------------------------------------------

def results_dir(d):
    (d / "sess").mkdir()
    (d / "run.yaml").write_text("id:\n  run: ab12\nfabric:\n  name: x\nversions:\n  kernel: 6\n")
    (d / "sess" / "topology.json").write_text(json.dumps({"switches": [], "hosts": []}))
    (d / "sess" / "faults.jsonl").write_text('{"kind": "link_down"}\n{"kind": "link_up"}\n')
    (d / "sess" / "controller.log").write_text("not checked")
    return d


def test_a_results_file_cut_short_breaks_results_complete(tmp_path):
    d = results_dir(tmp_path)
    assert files.complete(d) == {"holds": True, "checked": 3, "problems": {}}
    for name, cut in (("sess/topology.json", lambda t: t[:-1]),
                      ("sess/faults.jsonl", lambda t: t[:-1]),
                      ("sess/faults.jsonl", lambda t: t[:-5]),
                      ("run.yaml", lambda t: t[:t.index("versions")])):
        whole = (d / name).read_text()
        (d / name).write_text(cut(whole))
        got = files.complete(d)
        assert not got["holds"] and list(got["problems"]) == [name], (name, got)
        (d / name).write_text(whole)
    assert files.complete(d)["holds"]


def test_drill_json_is_written_whole_and_read_back(tmp_path):
    doc = {"chaos": {"faults": [{"at_s": 1.5, "params": {}}], "pair": (1, 2)}}
    assert files.write_whole(str(tmp_path / "drill.json"), doc) is None
    assert json.loads((tmp_path / "drill.json").read_text())["chaos"]["pair"] == [1, 2]
    assert not (tmp_path / "drill.json.part").exists()
    (tmp_path / "drill.json").write_text('{"chaos": {"faults": [')
    assert "does not parse" in files.problem(str(tmp_path / "drill.json"))
