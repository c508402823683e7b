"""The function's asset without ``python -m pip`` (a uv venv, ``--without-pip``) and without Docker: built
with another pip or uv when there is one, else the synth stops in one line that says what is needed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from contextual_kb.cdk import asset_build, bundling
from tests.conftest import ROOT


def _executable(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def _no_pip_here(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pip" else real(name, *a)
    )


def test_without_pip_in_the_venv_a_pip_on_path_then_uv_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_pip_here(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert asset_build.installer() is None
    uv = _executable(tmp_path, "uv")
    assert asset_build.installer() == ("uv", [str(uv)])
    pip = _executable(tmp_path, "pip")
    assert asset_build.installer() == ("pip", [str(pip)])


def test_the_uv_command_asks_for_the_same_wheels_as_pips() -> None:
    pip = asset_build.pip_command("python", Path("/out"), Path("/in"), "arm64")
    uv = asset_build.uv_command("uv", Path("/out"), Path("/in"), "arm64")
    assert uv[:3] == ["uv", "pip", "install"]
    for same in ("--target", "--python-version", "--requirement", "--constraint"):
        assert uv[uv.index(same) + 1] == pip[pip.index(same) + 1]
    assert uv[uv.index("--python-platform") + 1] == "aarch64-manylinux2014"  # manylinux2014_aarch64's name
    assert uv[uv.index("--only-binary") + 1] == ":all:"


def test_no_pip_no_uv_and_no_docker_stops_the_synth_in_one_line(tmp_path: Path) -> None:
    """A user's app, as `cdk synth` runs it: no traceback, the line says what to do."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    app = tmp_path / "app.py"
    app.write_text(
        textwrap.dedent(
            """
            import importlib.util
            real = importlib.util.find_spec
            importlib.util.find_spec = lambda name, *a: None if name == "pip" else real(name, *a)
            import aws_cdk as cdk
            from contextual_kb.cdk import ContextualTransformation
            app = cdk.App()
            ContextualTransformation(cdk.Stack(app, "User"), "Contextual")
            app.synth()
            """
        )
    )
    # This venv's pip, hidden as in a venv without one: `python -m pip` fails, find_spec finds none (the app).
    no_pip = tmp_path / "no_pip" / "pip"
    no_pip.mkdir(parents=True)
    (no_pip / "__init__.py").write_text("raise ImportError('No module named pip')\n")
    (bin_folder / "node").symlink_to(shutil.which("node") or "node")  # jsii's; no pip, pip3 or uv here
    env = {
        **os.environ,
        "PATH": str(bin_folder),
        "CDK_DOCKER": "no-such-docker",  # CDK and our check both use it: no Docker
        "CDK_OUTDIR": str(tmp_path / "out"),  # the bundle cache follows the CLI's -o
        "PYTHONPATH": f"{no_pip.parent}:{ROOT / 'lambda'}:{ROOT}",
    }
    ran = subprocess.run(
        [sys.executable, str(app)],
        check=False,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "Traceback" not in ran.stderr and ran.returncode == 1, ran.stderr[-2000:]
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {bundling.NEEDS}"]
    assert (tmp_path / "out" / ".bundle-input").is_dir()  # staged under -o, not ./cdk.out
    assert not (tmp_path / "cdk.out").exists()
