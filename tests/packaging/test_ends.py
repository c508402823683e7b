"""Both ends of the ranges pyproject.toml declares, from the built wheel (issue 49): in one fresh venv the
lowest versions the metadata allows (constraints-lowest.txt), in another the registry's newest (a plain
install, no constraints); in each, the users' apps of tests/user_apps synthesized through the pinned CDK CLI
outside the checkout. The lowest venv holds ``[cdk]`` and nothing else of ours: ``import
contextual_kb.cdk`` works there with neither cdk-nag nor cfn-lint. And a user's neighbour versions resolve
beside the wheel (``pip install --dry-run``). Run by ``make test-ends`` (CI), not by ``make test``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from tests.packaging import ranges
from tests.packaging.wheel import (
    USER_CHECKS,
    install,
    installed_versions,
    run_outside,
    synth,
    wheel_of,
)

# A venv installed on a busy machine can take minutes: the fixture counts in the first test's time.
pytestmark = [pytest.mark.ends, pytest.mark.timeout(1800)]

USER_APPS = ranges.ROOT / "tests" / "user_apps"
FLOORS = ranges.floors()
# The versions each end is checked to hold (what the constructs and the runtime import).
CHECKED = ("aws-cdk-lib", "constructs", "boto3", "pydantic", "anthropic", "aws-lambda-powertools")


@pytest.fixture(scope="module")
def lowest(wheel_dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install -c constraints-lowest.txt "<wheel>[cdk]"``: no cdk-nag (cdk-nag 3 needs an aws-cdk-lib
    the floor may be below), so the app runs with -c userNag=off."""
    return install(wheel_dist, tmp_path_factory.mktemp("venv-lowest"), "cdk", constraints=(ranges.LOWEST,))


@pytest.fixture(scope="module")
def newest(wheel_dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install "<wheel>[cdk]" cdk-nag cfn-lint aws-cdk.aws-bedrock-alpha``: the resolver's newest."""
    return install(
        wheel_dist, tmp_path_factory.mktemp("venv-newest"), "cdk", also=USER_CHECKS, constraints=()
    )


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's folder, one for both ends: the function's asset (exact pins of its own, whatever the venv
    holds) is built once and reused from its cdk.out cache."""
    return tmp_path_factory.mktemp("user")


def _synthesize_the_user_apps(venv: Path, work: Path, end: str, *context: str, apps: tuple[str, ...]) -> None:
    for name in apps:
        shutil.copy(USER_APPS / f"{name}.py", work / f"{name}.py")
        out = synth(venv, work / f"{name}.py", work, f"{end}-{name}", *context)
        (template,) = out.glob("*.template.json")
        text = template.read_text()
        assert "POST_CHUNKING" in text and "CustomTransformationConfiguration" in text, name


def test_the_lowest_end_holds_the_floors_and_synthesizes_the_users_apps(lowest: Path, work: Path) -> None:
    assert installed_versions(lowest, *CHECKED) == {name: FLOORS[name] for name in CHECKED}
    # the all-L1 app: the alpha app's own code (alpha.VectorStore) needs a newer alpha L2 than the lowest's
    _synthesize_the_user_apps(lowest, work, "lowest", "-c", "userNag=off", apps=("l1_app",))


# Below 2.270 (Validations refuses the constructs' IDs up to 2.264) and at cdk-nag 3's floor: cdk-nag 2 there.
NAG2 = ("aws-cdk-lib==2.258.1", "cdk-nag==2.38.2")


@pytest.fixture(scope="module")
def nag2(wheel_dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install "<wheel>[cdk]" aws-cdk-lib==2.258.1 cdk-nag==2.38.2``: a user of cdk-nag 2."""
    return install(wheel_dist, tmp_path_factory.mktemp("venv-nag2"), "cdk", also=NAG2, constraints=())


def test_cdk_nag_2_finds_the_constructs_findings_acknowledged(nag2: Path, work: Path) -> None:
    """cdk-nag 2 (an aspect: an unacknowledged finding is an error annotation, and ``cdk synth`` fails)
    reads the constructs' ``cdk_nag`` metadata (cdk/nag.py's fallback; without it, seven findings fail)."""
    assert installed_versions(nag2, "aws-cdk-lib", "cdk-nag") == dict(r.split("==") for r in NAG2)
    _synthesize_the_user_apps(nag2, work, "nag2", "-c", "userNag=2", apps=("l1_app",))


def test_cdk_alone_imports_the_constructs_without_the_repositorys_checks(
    lowest: Path, tmp_path: Path
) -> None:
    python = str(lowest / "bin" / "python")
    imported = run_outside(
        lowest,
        python,
        "-c",
        "import contextual_kb.cdk, contextual_kb; print(contextual_kb.__version__)",
        cwd=tmp_path,
    )
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert imported.stdout.strip() == ranges.project()["version"]
    for module in ("cdk_nag", "cfnlint", "typer", "moto"):
        found = run_outside(lowest, python, "-c", f"import {module}", cwd=tmp_path)
        assert found.returncode != 0, f"{module} came with [cdk]"


def test_the_newest_end_synthesizes_the_users_apps(newest: Path, work: Path) -> None:
    pinned = {
        ranges.canonical(name): version
        for name, version in (
            line.split("==")
            for line in (ranges.ROOT / "constraints.txt").read_text().splitlines()
            if "==" in line
        )
    }
    for name, version in installed_versions(newest, *CHECKED).items():
        assert Version(version) >= Version(pinned[name]), f"{name} {version}: not the newest"
    _synthesize_the_user_apps(newest, work, "newest", apps=("alpha_app", "l1_app"))


def _dry_run(venv: Path, cwd: Path, *requirements: str) -> subprocess.CompletedProcess[str]:
    return run_outside(
        venv, str(venv / "bin" / "python"), "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-",
        "--disable-pip-version-check", *requirements, cwd=cwd,
    )  # fmt: skip


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    """A user's fresh venv, nothing installed: where ``pip install --dry-run`` resolves."""
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    return tmp_path / "venv"


def test_a_users_neighbour_versions_resolve_beside_the_wheel(
    wheel_dist: Path, empty: Path, tmp_path: Path
) -> None:
    """The issue's neighbours (each was ResolutionImpossible beside the exact pins); the lowest aws-cdk-lib
    with the newest boto3; one below the floor (2.249) refused."""
    wheel = f"{wheel_of(wheel_dist)}[cdk]"
    found = json.loads(_dry_run(empty, tmp_path, "boto3").stdout)["install"]
    (boto3,) = [p["metadata"]["version"] for p in found if p["metadata"]["name"] == "boto3"]
    for neighbours in (
        (f"aws-cdk-lib=={FLOORS['aws-cdk-lib']}", f"boto3=={boto3}"),
        ("aws-cdk-lib==2.274.0", "boto3==1.44.6", "pydantic==2.14.2", "constructs==10.8.0"),
    ):
        resolved = _dry_run(empty, tmp_path, wheel, *neighbours)
        assert resolved.returncode == 0, f"{neighbours}: {resolved.stderr[-2000:]}"
        report = json.loads(resolved.stdout)["install"]
        chosen = {p["metadata"]["name"]: p["metadata"]["version"] for p in report}
        for requirement in neighbours:
            name, version = requirement.split("==")
            assert chosen[name] == version, requirement
    refused = _dry_run(empty, tmp_path, wheel, "aws-cdk-lib==2.249.0")
    assert refused.returncode != 0 and "aws-cdk-lib" in refused.stderr
