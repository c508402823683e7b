"""What a user runs, from the built package alone: ``python -m build`` (wheel and sdist), the wheel installed
in a fresh venv outside the checkout, and in a temporary directory a user's own CDK app (one with the alpha
``KnowledgeBase`` and an L1 ``CfnDataSource``, one all L1, each plus our construct), and the examples' apps,
synthesized through the pinned CDK CLI, cdk-nag (in the app) and cfn-lint clean. The function's asset built
there is the one the checkout builds, byte for byte."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.packaging.wheel import CDK_CLI, VERSION, installed_package, run_outside, synth

pytestmark = pytest.mark.long

USER_APPS = ROOT / "tests" / "user_apps"


@pytest.fixture(scope="module")
def dist(wheel_dist: Path) -> Path:
    return wheel_dist


@pytest.fixture(scope="module")
def venv(wheel_cdk_venv: Path) -> Path:
    """A fresh venv with the wheel and its cdk and cli extras, under the pinned constraints."""
    return wheel_cdk_venv


def test_the_wheel_and_sdist_hold_everything(dist: Path) -> None:
    (wheel,) = dist.glob(f"contextual_kb-{VERSION}-*.whl")
    (sdist,) = dist.glob(f"contextual_kb-{VERSION}.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "contextual_kb/cdk/transformation.py",
        "contextual_kb/cdk/function-requirements.txt",
        "contextual_kb/cdk/function-constraints.txt",
        "contextual_kb/runtime/handler.py",
        "contextual_kb/runtime/sdk.py",
        "contextual_kb/cli/main.py",
        "contextual_kb/resources/attach_data_source.py",
        "contextual_kb/evaluation/java/CkbLucene.java",
    ):
        assert needed in names, needed
    # the licence's text and its SPDX expression (issue 49)
    assert f"contextual_kb-{VERSION}.dist-info/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"contextual_kb-{VERSION}.dist-info/METADATA").decode()
    assert "License-Expression: MIT-0" in metadata.splitlines()
    assert not any(line.startswith("License: ") for line in metadata.splitlines())
    with tarfile.open(sdist) as archive:
        assert any(
            n.endswith("lambda/contextual_kb/cdk/function-constraints.txt") for n in archive.getnames()
        )


def test_ckb_and_the_constructs_work_from_the_installed_wheel(venv: Path, tmp_path: Path) -> None:
    shown = run_outside(venv, "ckb", "--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    installed_package(venv, tmp_path)  # under the venv, never the checkout


def lint(venv: Path, out: Path) -> None:
    templates = sorted(out.glob("*.template.json"))
    assert templates
    result = run_outside(venv, "cfn-lint", "--ignore-checks", "W3005", "--", *map(str, templates), cwd=out)
    assert result.returncode == 0, result.stdout


def asset_of(out: Path) -> Path:
    """The transformation function's asset folder in a cloud assembly."""
    for template in out.glob("*.template.json"):
        for resource in json.loads(template.read_text())["Resources"].values():
            if resource["Type"] == "AWS::Lambda::Function" and "Code" in resource["Properties"]:
                key = resource["Properties"]["Code"]["S3Key"]
                if not isinstance(key, str):
                    continue
                folder = out / f"asset.{key.removesuffix('.zip')}"
                if (folder / "contextual_kb" / "runtime").is_dir():
                    return folder
    raise AssertionError("no function asset")


def tree(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's folder: their apps, run from here."""
    return tmp_path_factory.mktemp("user")


@pytest.fixture(scope="module")
def user_apps(venv: Path, work: Path) -> dict[str, Path]:
    apps = {}
    for name in ("alpha_app", "l1_app"):
        shutil.copy(USER_APPS / f"{name}.py", work / f"{name}.py")
        apps[name] = synth(venv, work / f"{name}.py", work, name)
    return apps


@pytest.mark.parametrize("name", ["alpha_app", "l1_app"])
def test_a_users_app_synthesizes_with_the_construct_nag_and_lint_clean(
    user_apps: dict[str, Path], venv: Path, name: str
) -> None:
    out = user_apps[name]
    lint(venv, out)
    (template,) = out.glob("*.template.json")
    text = template.read_text()
    assert "POST_CHUNKING" in text and "CustomTransformationConfiguration" in text


def test_the_asset_is_the_checkouts_byte_for_byte(user_apps: dict[str, Path], tmp_path: Path) -> None:
    """Built from the installed package (no repository, no Docker) and from the checkout: the same key, the
    same files."""
    import aws_cdk as cdk

    from contextual_kb.cdk import bundling
    from tests.infra.conftest import NO_BUNDLING
    from tests.user_apps import alpha_app

    installed = asset_of(user_apps["alpha_app"])
    app = cdk.App(context=NO_BUNDLING)  # the checkout's key for the same app, without building
    stack = alpha_app.build(app)
    template = app.synth().get_stack_by_name(stack.stack_name).template
    keys = {
        r["Properties"]["Code"]["S3Key"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
        and isinstance(r["Properties"].get("Code", {}).get("S3Key"), str)
    }
    assert f"{installed.name.removeprefix('asset.')}.zip" in keys
    checkout = tmp_path / "checkout"
    bundling.build(checkout, "arm64")
    assert tree(installed) == tree(checkout)


@pytest.mark.parametrize("example", ["path_metadata", "redact_emails"])
def test_an_examples_app_deploys_its_handler_with_the_construct(venv: Path, work: Path, example: str) -> None:
    folder = work / "examples" / example
    shutil.copytree(ROOT / "examples" / example, folder)
    out = synth(venv, folder / "cdk" / "app.py", work, example, "-c", "vectorStore=s3vectors")
    lint(venv, out)
    handlers = {
        r["Properties"]["Handler"]
        for t in out.glob("*.template.json")
        for r in json.loads(t.read_text())["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
    }
    assert "handler.handler" in handlers
    asset = asset_of(out)
    assert (asset / "handler.py").read_bytes() == (ROOT / "examples" / example / "handler.py").read_bytes()


def test_the_readme_shows_the_code_the_user_app_runs() -> None:
    """README's "In your own CDK app": each line of its code is a line of tests/user_apps/alpha_app.py, the
    app synthesized above, and it is under 15 lines."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## In your own CDK app", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    lines = [line.strip() for line in code.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert len(code.splitlines()) < 15
    app = {line.strip() for line in (USER_APPS / "alpha_app.py").read_text().splitlines()}
    assert [line for line in lines if line.split("  #")[0].strip() not in app] == []


def test_bad_input_fails_the_clis_synth_in_one_line(
    venv: Path, work: Path, user_apps: dict[str, Path]
) -> None:
    """What the user sees: `cdk synth` fails, the problem on one line, no traceback."""
    result = run_outside(
        venv, *CDK_CLI, "synth", "--quiet", "--app", f"{venv / 'bin' / 'python'} {work / 'l1_app.py'}",
        "-o", str(work / "bad.out"), "-c", "userSourceType=CUSTOM", cwd=work,
    )  # fmt: skip
    shown = result.stdout + result.stderr
    assert result.returncode != 0
    assert "ERROR a data source of type CUSTOM takes no custom transformation" in shown
    assert "Traceback" not in shown
