"""The package as a user gets it: ``python -m build``'s wheel and sdist, a fresh venv outside the checkout
holding the wheel with the extras a user names, and commands run there with nothing of the checkout
importable. Shared by tests/packaging (the wheel, the installed ``ckb``) and tests/lifecycle (the users' apps
deployed on ministack); tests/conftest.py builds the wheel once per session (``wheel_dist``) and installs
the CDK user's venv once (``wheel_cdk_venv``)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_SOURCE = ROOT / "lambda" / "contextual_kb"
CDK_CLI = ["npx", "--yes", "aws-cdk@2.1148.1"]
VERSION = "0.2.0"


def build(out: Path) -> Path:
    """The wheel and sdist of this checkout into ``out``, a new empty folder: never a wheel of an earlier
    build (the folder must be empty, and one wheel is found there)."""
    out.mkdir(parents=True, exist_ok=True)
    assert not any(out.iterdir()), f"{out} is not empty: a wheel left there could be installed instead"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    # setuptools' deprecations (the TOML-table license stops building in February 2027) fail here first
    assert "SetuptoolsDeprecationWarning" not in built.stdout + built.stderr, built.stderr[-3000:]
    return out


def wheel_of(dist: Path) -> Path:
    (wheel,) = dist.glob(f"contextual_kb-{VERSION}-*.whl")
    return wheel


# What a user's CDK app adds beside ``[cdk]`` to run the checks our user apps run (cdk-nag in the app,
# cfn-lint on its templates) and the alpha L2 of tests/user_apps/alpha_app.py: theirs, not the package's.
USER_CHECKS = ("cdk-nag", "cfn-lint", "aws-cdk.aws-bedrock-alpha")


def install(
    dist: Path,
    folder: Path,
    extras: str,
    *,
    also: tuple[str, ...] = (),
    constraints: tuple[Path, ...] = (ROOT / "constraints.txt",),
) -> Path:
    """A fresh venv in ``folder`` with the wheel and ``extras`` (``"cdk,cli"``) and ``also`` (the user's own
    requirements), under ``constraints`` (the repository's pins by default; none: the registry's newest), as
    ``pip install "<wheel>[extras]"`` gives it; its package checked to be this checkout's source."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    for each in constraints:
        pip += ["--constraint", str(each)]
    done = subprocess.run(
        [*pip, f"{wheel_of(dist)}[{extras}]", *also], check=False, cwd=folder, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    installed = installed_package(folder, folder)
    assert source_digests(installed) == source_digests(PACKAGE_SOURCE), "the wheel is not this checkout's"
    assert installed_requirements(folder) == declared_requirements(), "the wheel's metadata is stale"
    return folder


def installed_versions(venv: Path, *names: str) -> dict[str, str]:
    """Distribution name -> version installed in the venv."""
    shown = run_outside(
        venv, str(venv / "bin" / "python"), "-c",
        "import importlib.metadata as m, json, sys; "
        "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))",
        *names, cwd=venv,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def declared_requirements() -> tuple[str, set[str]]:
    """(version, requirements) as pyproject.toml declares them, each extra's marked as the wheel marks it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = {str(Requirement(r)) for r in project["dependencies"]}
    for extra, listed in project["optional-dependencies"].items():
        requirements |= {str(Requirement(f'{r}; extra == "{extra}"')) for r in listed}
    return project["version"], requirements


def installed_requirements(venv: Path) -> tuple[str, set[str]]:
    """(version, requirements) of the distribution installed in the venv (its wheel's metadata)."""
    shown = run_outside(
        venv, str(venv / "bin" / "python"), "-c",
        "import importlib.metadata as m, json; d = m.distribution('contextual-kb'); "
        "print(json.dumps([d.version, d.requires or []]))",
        cwd=venv,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    version, requirements = json.loads(shown.stdout)
    return version, {str(Requirement(r)) for r in requirements}


def environment(venv: Path) -> dict[str, str]:
    """The venv's ``bin`` first on PATH; no PYTHONPATH, no VIRTUAL_ENV: nothing of the checkout importable."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "20"
    return env


def run_outside(
    venv: Path, *command: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """``command`` run from ``cwd`` (outside the checkout) with the venv first on PATH; ``env``: the
    environment to start from (the venv's PATH is put first in it)."""
    assert ROOT not in cwd.resolve().parents and cwd.resolve() != ROOT, f"{cwd} is in the checkout"
    given = environment(venv) if env is None else {**env, "PATH": environment(venv)["PATH"]}
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        given.pop(name, None)
    return subprocess.run(
        list(command), cwd=cwd, env=given, capture_output=True, text=True, check=False, timeout=timeout
    )


def installed_package(venv: Path, cwd: Path) -> Path:
    """Where the venv's Python imports ``contextual_kb`` from, run from ``cwd``: under the venv, never the
    checkout (asserted)."""
    python = str(venv / "bin" / "python")
    where = run_outside(venv, python, "-c", "import contextual_kb; print(contextual_kb.__file__)", cwd=cwd)
    assert where.returncode == 0, where.stderr
    path = Path(where.stdout.strip()).resolve()
    assert venv.resolve() in path.parents and ROOT not in path.parents, path
    return path.parent


def source_digests(package: Path) -> dict[str, str]:
    """Relative path -> sha256 of the package's Python files (not caches)."""
    return {
        p.relative_to(package).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(package.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def synth(venv: Path, app: Path, work: Path, name: str, *context: str) -> Path:
    """``cdk synth`` of ``app`` by the pinned CLI with the venv's Python, run in ``work`` (one folder for
    every app: one ``cdk.out`` cache of built assets), into ``work/<name>.out``."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / f"{name}.out"
    result = run_outside(
        venv, *CDK_CLI, "synth", "--quiet", "--app", f"{venv / 'bin' / 'python'} {app}", "-o", str(out),
        *context, cwd=work,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out
