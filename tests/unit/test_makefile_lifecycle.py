"""`make test-lifecycle` as a contributor types it (issue 43): it finds the function's Python itself, and
without one, or given another, says in one line what to do before installing or running anything."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

STAMP = ".venv/.installed"


def make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # -o: the project's venv counts as up to date, so the target's own checks are what runs.
    return subprocess.run(
        ["make", "--no-print-directory", "-o", STAMP, "test-lifecycle", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def test_another_python_given_is_refused_in_one_line(tmp_path: Path) -> None:
    ran = make("MINISTACK_PYTHON=python3.11", f"MINISTACK_VENV={tmp_path / 'venv'}")
    assert ran.returncode == 2
    assert ran.stderr.splitlines()[0] == (
        "error: MINISTACK_PYTHON=python3.11 is not Python 3.13: the deployed function runs on 3.13, and "
        "ministack runs it with its own Python. Give a 3.13 interpreter, or leave MINISTACK_PYTHON unset to "
        "find one"
    )
    assert not (tmp_path / "venv").exists()


def test_no_python_313_anywhere_says_what_to_install(tmp_path: Path) -> None:
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYENV_ROOT": str(tmp_path / "pyenv")}
    found = subprocess.run(["sh", "-c", "command -v python3.13"], env=bare, capture_output=True, check=False)
    if found.returncode == 0:
        pytest.skip("this machine has python3.13 in /usr/bin")
    ran = make(f"MINISTACK_VENV={tmp_path / 'venv'}", env=bare)
    assert ran.returncode == 2
    line = ran.stderr.splitlines()[0]
    assert line.startswith("error: no Python 3.13 found") and "pyenv install 3.13" in line
    assert "MINISTACK_PYTHON=/path/to/python3.13" in line


def test_the_readme_and_ci_call_the_target_the_same_way() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test-lifecycle\n" in ci and "MINISTACK_PYTHON" not in ci
    assert "make test-lifecycle" in readme and "MINISTACK_PYTHON=" not in readme.replace(
        "MINISTACK_PYTHON=/path", ""
    )
    assert os.access(ROOT / ".ci" / "run", os.R_OK)
