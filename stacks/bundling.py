"""The function's asset, built without Docker: pinned wheels for the Lambda's platform, and our package.

``pip install --platform manylinux2014_<arch> --only-binary=:all: --python-version 3.13 --target`` takes
the runtime dependencies from ``pyproject.toml`` under ``constraints.txt``, so the asset holds exactly the
versions the tests ran; then ``lambda/contextual_kb`` is copied in. Docker bundling stays the fallback that
CDK uses when this returns False (no pip).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import jsii
from aws_cdk import BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lambda" / "contextual_kb"
PYTHON_VERSION = "3.13"
BUNDLE_CACHE = ROOT / "cdk.out" / ".bundles"
PLATFORMS = {"arm64": "manylinux2014_aarch64", "x86_64": "manylinux2014_x86_64"}


def runtime_requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def pip_command(target: Path, architecture: str) -> list[str]:
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--platform", PLATFORMS[architecture], "--implementation", "cp", "--python-version", PYTHON_VERSION,
        "--only-binary=:all:", "--target", str(target),
    ]  # fmt: skip
    constraints = ROOT / "constraints.txt"
    if constraints.exists():
        command += ["--constraint", str(constraints)]
    return [*command, *runtime_requirements()]


def bundle_key(architecture: str) -> str:
    """What the bundle is made of: the pip command (pins, platform, Python), the constraints and every file
    of the package. Equal keys, equal bundles."""
    digest = hashlib.sha256(json.dumps(pip_command(Path("<target>"), architecture)).encode())
    constraints = ROOT / "constraints.txt"
    if constraints.exists():
        digest.update(constraints.read_bytes())
    for path in sorted(PACKAGE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:32]


def build(target: Path, architecture: str) -> None:
    """The bundle into ``target``; built once per content (``make synth`` synthesizes two stores, and each
    synth bundled the same asset again), kept in cdk.out/.bundles."""
    cached = BUNDLE_CACHE / bundle_key(architecture)
    if not cached.is_dir():
        building = BUNDLE_CACHE / f"{cached.name}.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        subprocess.run(pip_command(building, architecture), check=True)
        shutil.copytree(
            PACKAGE,
            building / "contextual_kb",
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        building.replace(cached)  # published whole, or not at all
    shutil.copytree(cached, target, dirs_exist_ok=True)


@jsii.implements(ILocalBundling)
class LocalPipBundling:
    def __init__(self, architecture: str) -> None:
        self.architecture = architecture

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_: object) -> bool:
        try:
            build(Path(output_dir), self.architecture)
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"local bundling failed ({exc}); falling back to Docker", file=sys.stderr)
            return False
        return True


def function_code(architecture: str) -> lambda_.Code:
    return lambda_.Code.from_asset(
        str(ROOT / "lambda"),
        bundling=BundlingOptions(
            image=lambda_.Runtime.PYTHON_3_13.bundling_image,
            local=LocalPipBundling(architecture),
            command=[
                "bash",
                "-c",
                # The fallback: only the top-level pins (constraints.txt is outside the asset folder).
                "pip install --no-cache-dir -t /asset-output "
                + " ".join(f"'{r}'" for r in runtime_requirements())
                + " && cp -r /asset-input/contextual_kb /asset-output/",
            ],
        ),
    )
