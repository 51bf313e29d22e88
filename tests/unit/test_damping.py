"""BFD hold-down (controller/damping.py): a flapping gray failure is announced down
once and up once; carrier cuts are not dampened."""

import pytest

from controller.damping import HoldDown, parse_holddown

P = (1, 3)


def test_gray_flaps_are_announced_once_down_and_once_up():
    h = HoldDown(base_s=3.0, max_s=30.0)
    said = [h.event(P, False, True, 0.0)]            # BFD down: at once
    said.append(h.event(P, True, False, 1.0))        # back: held
    assert P in h.held() and h.next_deadline() == 4.0
    said.append(h.event(P, False, True, 1.5))        # down again while held
    said.append(h.event(P, True, False, 2.5))        # back: held twice as long
    assert h.hold[P] == 6.0 and h.flaps[P] == 2 and h.next_deadline() == 8.5
    assert h.expire(8.0) == []                       # not yet
    said.append(h.expire(8.5))
    assert said == [False, None, None, None, [P]]
    assert h.held() == set() and h.next_deadline() is None


def test_hold_down_doubles_up_to_its_maximum_and_starts_again_after_an_announce():
    h = HoldDown(base_s=1.0, max_s=3.0)
    h.event(P, False, True, 0.0)
    for k in range(5):
        h.event(P, True, False, 1.0 + k)
        h.event(P, False, True, 1.5 + k)
    assert h.hold[P] == 3.0
    h.event(P, True, False, 10.0)
    assert h.expire(13.0) == [P]
    assert h.event(P, False, True, 14.0) is False      # a new episode: base again
    h.event(P, True, False, 15.0)
    assert h.hold[P] == 1.0 and h.next_deadline() == 16.0


def test_a_cut_is_not_dampened_unless_a_bfd_hold_down_runs():
    h = HoldDown()
    assert h.event(P, False, False, 0.0) is False      # carrier lost
    assert h.event(P, True, False, 0.1) is True        # restored at once
    h.event(P, False, True, 1.0)                       # BFD down ...
    assert h.event(P, True, False, 2.0) is None        # ... held
    assert h.event(P, False, False, 2.5) is None       # cut meanwhile: still down
    assert h.event(P, True, False, 3.0) is None        # still dampened
    assert P in h.held()


def test_a_port_back_from_a_cut_is_not_damped_while_its_liveness_catches_up():
    h = HoldDown()
    for k in range(25):                                # a flap storm of carrier cuts
        t = k * 0.04
        assert h.event(P, False, False, t) is False     # carrier lost
        assert h.event(P, False, True, t + 0.01) is None   # carrier back, not live yet
        assert h.event(P, True, False, t + 0.02) is True   # live: announced at once
    # a cut that Open vSwitch reports as "not live" before the carrier loss
    assert h.event(P, False, True, 2.0) is False
    assert h.event(P, False, False, 2.001) is None
    assert h.event(P, True, False, 2.1) is True
    assert h.held() == set() and h.next_deadline() is None


def test_off_means_every_flap_is_announced():
    h = parse_holddown("0")
    assert h.event(P, False, True, 0.0) is False
    assert h.event(P, True, False, 0.5) is True
    assert h.held() == set()


@pytest.mark.parametrize("text", ["3", "a:b", "5:1", "-1:2", "1:2:3"])
def test_bad_holddown_is_refused(text):
    with pytest.raises(ValueError):
        parse_holddown(text)
    from emulator.errors import ConfigError
    from emulator.experiments.spec.options import parse_holddown as cli_parse
    with pytest.raises(ConfigError, match="--bfd-holddown"):
        cli_parse(text)


def test_good_holddown():
    assert (parse_holddown("2:16").base_s, parse_holddown("2:16").max_s) == (2.0, 16.0)
    from emulator.experiments.spec.options import parse_holddown as cli_parse
    assert cli_parse(" 2:16 ") == "2:16" and cli_parse("0") == "0"
