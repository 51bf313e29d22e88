"""``show --picture`` draws any preset (reports.fabric_png) and ``show --yaml`` round-trips."""

import pytest

from emulator.__main__ import main
from emulator.fabric import spec


@pytest.mark.parametrize("preset", ["three-tier", "dual-link", "dual-tor", "dual-plane", "rail-only",
                                    "rail-optimized",
                                    "dragonfly", "dragonfly-plus"])
def test_show_picture_and_yaml(preset, tmp_path, capsys):
    path = tmp_path / f"{preset}.png"
    assert main(["show", "-p", preset, "--picture", str(path)]) == 0
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert f"{path}: {preset}" in capsys.readouterr().out
    assert main(["show", "-p", preset, "--yaml"]) == 0
    back = spec.load_text(capsys.readouterr().out)
    assert back.name.startswith(preset)


def test_show_rejects_a_bad_parameter_of_a_new_preset(capsys):
    assert main(["show", "-p", "three-tier", "-P", "superspine_attach=some"]) == 2
    assert "superspine_attach: 'some' is not one of plane, all" in capsys.readouterr().err
