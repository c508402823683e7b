"""The README's install routes, run as written from outside the checkout (issue 53): the package is not on
PyPI, so each route is from a copy of the repository (a clone: ``./contextual-kb``), from its URL (``git+``;
here a ``file://`` URL of that copy, a git repository), or from the wheel built from it. Each line of the
README's "Install" block runs in a fresh venv in a temporary folder, by bash, with ``<repository-url>``
replaced; the ``ckb`` it gives answers ``--version`` with pyproject's version from another folder."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging import ranges
from tests.packaging.wheel import run_outside

pytestmark = pytest.mark.long

ROOT = ranges.ROOT
VERSION = ranges.project()["version"]
EDITABLE = 'pip install -e "./contextual-kb[cli]"'


def install_block() -> list[str]:
    """The README's "Install" section's shell lines, comments kept (bash drops them)."""
    section = (ROOT / "README.md").read_text().split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [line for line in block.splitlines() if line.strip()]


def test_the_readme_says_not_on_pypi_on_its_first_screen() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme.index("Not yet on PyPI") < len("\n".join(readme.splitlines()[:40]))
    # the name alone (PyPI's route) nowhere, here or in docs/ and the examples: a name with `@ git+` is a URL
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("*.md")]
    for page in pages:
        if page.name == "RELEASING.md":  # what the docs become once published
            continue
        published = re.findall(r"pip install ['\"]?contextual-kb\[[^\]]*\]['\"]?(?! @)", page.read_text())
        assert not published, f"{page.relative_to(ROOT)}: {published}"


def test_the_routes_are_the_ones_this_test_runs() -> None:
    lines = install_block()
    assert lines[0].startswith("git clone <repository-url> contextual-kb")
    assert EDITABLE in lines[1]
    assert f"dist/contextual_kb-{VERSION}-py3-none-any.whl[cli]" in lines[-1], "the wheel's name: the version"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's folder with ``contextual-kb``: this checkout's files as a clone has them (tracked and new,
    not ignored), a git repository of its own (its ``file://`` URL stands for the repository's URL)."""
    where = tmp_path_factory.mktemp("user")
    copy = where / "contextual-kb"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "copy"]):
        subprocess.run([*git, *command], cwd=copy, check=True, capture_output=True)
    return where


def run_route(folder: Path, venv_name: str, lines: list[str]) -> Path:
    """``lines`` by bash from ``folder`` in a fresh venv (its bin first on PATH); the venv."""
    venv = folder / venv_name
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # a current pip, as the Makefile's (the one ensurepip bundles with 3.11 refuses a git+file:/// URL)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--upgrade", "pip==25.3"], check=True, capture_output=True)
    url = f"file://{folder / 'contextual-kb'}"
    script = "set -euo pipefail\n" + "\n".join(line.replace("<repository-url>", url) for line in lines)
    done = run_outside(venv, "bash", "-c", script, cwd=folder)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return venv


def check_ckb(venv: Path, folder: Path, tmp_path: Path) -> None:
    """``ckb --version`` and the package's version from ``tmp_path``; the package from the venv or, editable,
    the user's copy (``folder``), never the checkout."""
    shown = run_outside(venv, "ckb", "--version", cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.strip() == f"ckb {VERSION}", shown.stdout + shown.stderr
    version = run_outside(
        venv, "python", "-c", "import contextual_kb as c; print(c.__version__)", cwd=tmp_path
    )
    assert version.stdout.strip() == VERSION, version.stderr
    where = run_outside(venv, "python", "-c", "import contextual_kb as c; print(c.__file__)", cwd=tmp_path)
    path = Path(where.stdout.strip()).resolve()
    assert ROOT not in path.parents and (venv in path.parents or folder in path.parents), path


@pytest.mark.parametrize(
    "route",
    ["clone", "editable", "url", "wheel"],
)
def test_each_readme_route_installs_a_working_ckb(folder: Path, tmp_path: Path, route: str) -> None:
    lines = install_block()
    chosen = {
        "clone": [lines[1]],
        "editable": [EDITABLE],
        "url": [lines[2]],
        "wheel": [lines[3], lines[4]],
    }[route]
    assert "git clone" not in " ".join(chosen)  # the clone is the fixture's copy (no network here)
    venv = run_route(folder, f"venv-{route}", chosen)
    check_ckb(venv, folder, tmp_path)
