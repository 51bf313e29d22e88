"""When an integration test may measure again (tests/conftest.py): only when the
platform explains a verdict that is not faithful, or the emulation drops a faithful
verdict carries."""

from tests.conftest import held_up, paused_late, stalled_bfd, stolen


def doc(verdict="emulator-bound", behind=12, other=0, saturated=0, steal=0.0):
    return {"verdict": verdict,
            "emulation_drops": {"sender_behind_schedule": behind, "ovs_send": other,
                                "total": behind + other},
            "cpu": {"machine_steal": steal,
                    "windows": {"window_ms": 100, "windows": 40, "saturated": saturated,
                                "max_steal": steal}}}


def test_an_engine_held_up_on_an_unsaturated_machine_is_measured_again():
    assert held_up(doc()) and stolen(doc())


def test_other_shortfalls_a_saturated_machine_or_a_faithful_run_are_not():
    assert not stolen(doc(other=3))                  # frames lost in Open vSwitch too
    assert not stolen(doc(saturated=2))              # the emulator's own load
    assert not stolen(doc(behind=0))                 # nothing the engine skipped
    assert not stolen(doc(verdict="faithful", behind=0))
    assert not stolen(doc(verdict="faithful", behind=0, other=1))    # not explained


def test_a_faithful_run_with_drops_the_platform_explains_is_measured_again():
    # tests assert a faithful run lost no frame to the emulator at all
    assert stolen(doc(verdict="faithful", behind=2))                 # held up
    assert stolen(doc(verdict="faithful", behind=0, other=1, steal=0.2))
    assert stolen(doc(behind=0, other=5, steal=0.2))  # the hypervisor's, as before


def test_a_lossless_pause_come_too_late_is_measured_again_and_nothing_else_with_it():
    late = {"verdict": "emulator-bound", "cpu": {"windows": {"saturated": 3}},
            "emulation_drops": {"pause_late": 4, "sender_behind_schedule": 0, "total": 4}}
    assert paused_late(late) and stolen(late)
    also = dict(late, emulation_drops={"pause_late": 4, "ovs_send": 2, "total": 6})
    assert not stolen(also)


def test_bfd_downs_where_no_fault_was_are_measured_again_when_they_are_the_only_reason():
    from emulator.experiments.measure.fidelity import spurious_downs
    clean = {"verdict": "faithful", "reasons": [], "remedy": None, "cpu": {},
             "emulation_drops": {"total": 0}}
    stalled = spurious_downs(clean, {"leaf2-spine2"})
    assert stalled["verdict"] == "emulator-bound" and stalled_bfd(stalled) and stolen(stalled)
    assert not stalled_bfd(clean) and not stolen(clean)
    both = dict(stalled, reasons=stalled["reasons"] + ["12 of 100 frames lost ..."])
    assert not stalled_bfd(both)
