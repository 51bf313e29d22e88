"""The Vagrantfile is valid and provisions with the same setup.sh as CI."""

import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import REPO


def test_vagrantfile_provisions_with_setup_sh():
    text = open(os.path.join(REPO, "Vagrantfile")).read()
    assert re.search(r'provision "shell", inline: "cd /vagrant && ./setup.sh"', text)
    assert 'rsync__exclude: [".venv/"' in text


def test_vagrant_validate(tmp_path):
    if shutil.which("vagrant") is None:
        if os.environ.get("FABRIC_LAB_REQUIRE_ROOT_TESTS") == "1":
            pytest.fail("vagrant is missing: ./setup.sh test installs it")
        pytest.skip("vagrant not installed (./setup.sh test installs it)")
    shutil.copy(os.path.join(REPO, "Vagrantfile"), tmp_path)
    p = subprocess.run(["vagrant", "validate", "--ignore-provider"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "VAGRANT_HOME": str(tmp_path / ".vagrant.d")})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Vagrantfile validated successfully" in p.stdout
