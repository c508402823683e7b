"""The release workflow (.github/workflows/release.yml): a tag ``v*`` builds and checks with ``make dist``
(which CI runs on every change: .ci/run), refuses a tag that is not pyproject's version, and publishes with
PyPI's trusted publishing (an OIDC token, the ``pypi`` environment, no stored secret)."""

from __future__ import annotations

import os
import subprocess

import yaml

from tests.packaging.ranges import ROOT, project

WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def test_a_tag_builds_checks_and_publishes_with_trusted_publishing() -> None:
    flow = workflow()
    assert flow[True]["push"] == {"tags": ["v*"]}  # YAML reads `on` as true
    assert flow["permissions"] == {"contents": "read"}
    build, publish = flow["jobs"]["build"], flow["jobs"]["publish"]
    assert any(step.get("run", "").startswith("make dist") for step in build["steps"])
    assert publish["needs"] == "build" and publish["environment"]["name"] == "pypi"
    assert publish["permissions"] == {"id-token": "write"}
    assert [s["uses"] for s in publish["steps"]][-1] == "pypa/gh-action-pypi-publish@release/v1"
    assert "password" not in str(publish) and "secrets." not in WORKFLOW.read_text()


def _tag_check(tag: str) -> subprocess.CompletedProcess[str]:
    (step,) = [s for s in workflow()["jobs"]["build"]["steps"] if s.get("name") == "The tag is the version"]
    env = {**os.environ, "GITHUB_REF_NAME": tag}
    return subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )


def test_the_tag_must_be_the_version() -> None:
    version = project()["version"]
    assert _tag_check(f"v{version}").returncode == 0
    for wrong in (f"v{version}.1", version, "v0.0.0", f"v{version}-rc1"):
        refused = _tag_check(wrong)
        assert refused.returncode == 1 and f"is not v{version}" in refused.stdout, wrong


def test_ci_runs_the_build_half() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make dist" in ci
    assert "twine check --strict" in (ROOT / "Makefile").read_text()
