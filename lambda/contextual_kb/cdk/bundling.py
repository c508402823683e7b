"""The function's asset: the runtime package and its pinned dependencies for the Lambda's platform.

``asset_build.py`` beside it builds it (what goes in, and why the AWS SDK does not), from an input folder
staged here: the runtime requirements and constraints shipped in this package (``function-requirements.txt``,
the project's dependencies less the AWS SDK; ``function-constraints.txt``, its ``constraints.txt``; kept equal
by tests/infra/test_constructs.py) and the installed package's runtime part. Nothing is read from a
repository: a user with only the installed package gets the same inputs, so the same key and the same bytes.
Both bundling paths run that one script on that one folder, so they give the same contents: locally with
this machine's ``pip`` (or uv: ``asset_build.installer``), or, when that fails, in CDK's Python 3.13 image
for the function's platform (``platform`` set, so an x86 machine does not bundle x86 wheels for an arm64
function); with neither, the synth stops in one line saying so. The asset's hash is the hash of the staged
inputs: a change to them, and nothing else, makes a new asset; a bundle built once is reused (``make synth``
synthesizes two stores), under the CLI's output folder (``-o``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from contextual_kb.cdk import asset_build

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent  # the installed contextual_kb (or lambda/contextual_kb in a checkout)
REQUIREMENTS = HERE / "function-requirements.txt"
CONSTRAINTS = HERE / "function-constraints.txt"
# What of the package the function runs: the runtime part alone (and the package's own __init__).
RUNTIME_PARTS = ("__init__.py", "py.typed", "runtime")
# The deferred workflow's step (deferred_workflow.py): ckb contextualize's code and what it imports (the
# runtime, and query's re-ingestion and stack clients); its own asset, never the function's.
WORKFLOW_PARTS = (*RUNTIME_PARTS, "query", "deferred")
# Under the CDK app's own output folder (the CLI's -o reaches the app as CDK_OUTDIR; cdk.out where cdk.json
# is otherwise): built once, reused by every synth of that app.
STAGING = Path(os.environ.get("CDK_OUTDIR", "cdk.out")).absolute() / ".bundle-input"
BUNDLE_CACHE = Path(os.environ.get("CDK_OUTDIR", "cdk.out")).absolute() / ".bundles"
DOCKER_PLATFORMS = {"arm64": "linux/arm64", "x86_64": "linux/amd64"}
ASSET_BUILD = Path(asset_build.__file__)


def runtime_requirements() -> list[str]:
    """The function's dependencies: the project's, less the AWS SDK the Lambda runtime provides."""
    return [line for line in REQUIREMENTS.read_text().splitlines() if line.strip()]


def requirements_of(dependencies: list[str], pins: dict[str, str]) -> list[str]:
    """What ``function-requirements.txt`` must hold for these project dependencies (ranges, pyproject's) and
    ``pins`` (name -> version, constraints.txt's): each but the AWS SDK, with its extras, at its pin (checked
    by a test)."""
    provided = {name.replace("_", "-") for name in asset_build.PROVIDED_BY_LAMBDA}
    pinned = []
    for dependency in dependencies:
        name, extras = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?", dependency).groups()  # type: ignore[union-attr]
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key not in provided:
            pinned.append(f"{name}{extras or ''}=={pins[key]}")
    return pinned


# Modules of the user's own handler (docs/SDK.md), staged here and put beside contextual_kb in the asset.
HANDLER_MODULES = "handler_modules"


def _inputs(
    modules: tuple[tuple[str, bytes], ...] = (), parts: tuple[str, ...] = RUNTIME_PARTS
) -> dict[str, bytes]:
    """Relative path -> content of everything the asset is built from; ``modules``: (file name, content) of
    the user's handler modules; ``parts``: the package's parts (the runtime alone for the function)."""
    files = {
        "requirements.txt": "\n".join(runtime_requirements()).encode() + b"\n",
        "constraints.txt": CONSTRAINTS.read_bytes(),
        "asset_build.py": ASSET_BUILD.read_bytes(),
    }
    for part in parts:
        path = PACKAGE / part
        found = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in found:
            if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                files[f"contextual_kb/{file.relative_to(PACKAGE).as_posix()}"] = file.read_bytes()
    files.update({f"{HANDLER_MODULES}/{name}": content for name, content in modules})
    return files


def bundle_key(
    architecture: str, modules: tuple[tuple[str, bytes], ...] = (), parts: tuple[str, ...] = RUNTIME_PARTS
) -> str:
    """Equal inputs, equal bundles: the hash of the staged inputs and the platform."""
    digest = hashlib.sha256(architecture.encode())
    for name, content in sorted(_inputs(modules, parts).items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()[:32]


def stage(
    architecture: str, modules: tuple[tuple[str, bytes], ...] = (), parts: tuple[str, ...] = RUNTIME_PARTS
) -> tuple[Path, str]:
    """The input folder for this content (written once), and its key."""
    key = bundle_key(architecture, modules, parts)
    folder = STAGING / key
    if not folder.is_dir():
        building = STAGING / f"{key}.staging-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        for name, content in _inputs(modules, parts).items():
            target = building / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        building.replace(folder)
    return folder, key


class NoInstallerError(OSError):
    """Neither a pip (this interpreter's, one on PATH) nor uv: the asset cannot be built here."""


NEEDS = (
    "the function's asset needs pip or Docker: no pip in this Python (a uv venv, --without-pip), none on "
    "PATH, no uv, and Docker does not answer; run `python -m ensurepip` (or `uv pip install pip`) in the "
    "app's venv, or start Docker"
)


def build(
    target: Path,
    architecture: str,
    modules: tuple[tuple[str, bytes], ...] = (),
    parts: tuple[str, ...] = RUNTIME_PARTS,
) -> None:
    """The bundle into ``target``: built once per content (cdk.out/.bundles), then copied."""
    source, key = stage(architecture, modules, parts)
    cached = BUNDLE_CACHE / f"{key}-{architecture}"
    if not cached.is_dir():
        tool = asset_build.installer()
        if tool is None:
            raise NoInstallerError(NEEDS)
        building = BUNDLE_CACHE / f"{cached.name}.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        asset_build.build(source, building, architecture, tool=tool)
        building.replace(cached)  # published whole, or not at all
    shutil.copytree(cached, target, dirs_exist_ok=True)


def docker_answers() -> bool:
    """Whether CDK's Docker fallback can run (its CLI found, its daemon answering)."""
    docker = shutil.which(os.environ.get("CDK_DOCKER", "docker"))
    if docker is None:
        return False
    try:
        return (
            subprocess.run([docker, "version"], capture_output=True, timeout=30, check=False).returncode == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


@jsii.implements(ILocalBundling)
class LocalPipBundling:
    def __init__(
        self,
        architecture: str,
        modules: tuple[tuple[str, bytes], ...] = (),
        parts: tuple[str, ...] = RUNTIME_PARTS,
    ) -> None:
        self.architecture = architecture
        self.modules = modules
        self.parts = parts

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_: object) -> bool:
        try:
            build(Path(output_dir), self.architecture, self.modules, self.parts)
        except (OSError, subprocess.CalledProcessError) as exc:
            if docker_answers():
                print(f"local bundling failed ({exc}); falling back to Docker", file=sys.stderr)
                return False
            # Docker would fail too, in a traceback from inside CDK: one line instead, and the app stops.
            message = (
                NEEDS if isinstance(exc, NoInstallerError) else f"the function's asset: {exc}, no Docker"
            )
            print(f"error: {message}", file=sys.stderr)
            raise SystemExit(1) from None
        return True


def docker_command(architecture: str) -> list[str]:
    """The fallback: the same script on the same staged inputs, in the bundling image."""
    return [
        "bash",
        "-c",
        "python /asset-input/asset_build.py --source /asset-input --output /asset-output "
        f"--architecture {architecture}",
    ]


def function_code(
    architecture: str, modules: tuple[tuple[str, bytes], ...] = (), parts: tuple[str, ...] = RUNTIME_PARTS
) -> lambda_.Code:
    """The function's asset; ``modules``: the user's handler modules, beside ``contextual_kb``; ``parts``
    given ``WORKFLOW_PARTS``: the deferred workflow step's asset instead."""
    source, key = stage(architecture, modules, parts)
    return lambda_.Code.from_asset(
        str(source),
        asset_hash=key,
        asset_hash_type=AssetHashType.CUSTOM,
        bundling=BundlingOptions(
            image=lambda_.Runtime.PYTHON_3_13.bundling_image,
            platform=DOCKER_PLATFORMS[architecture],
            local=LocalPipBundling(architecture, modules, parts),
            command=docker_command(architecture),
        ),
    )


def resources_code() -> lambda_.Code:
    """The custom resources' asset: ``contextual_kb/__init__.py`` and ``contextual_kb/resources/`` alone
    (standard library and the runtime's botocore: nothing to install)."""
    files = {
        f"contextual_kb/{path.relative_to(PACKAGE).as_posix()}": path.read_bytes()
        for path in [PACKAGE / "__init__.py", *sorted((PACKAGE / "resources").rglob("*.py"))]
        if "__pycache__" not in path.parts
    }
    digest = hashlib.sha256()
    for name, content in sorted(files.items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
    folder = STAGING / f"resources-{digest.hexdigest()[:32]}"
    if not folder.is_dir():
        building = STAGING / f"{folder.name}.staging-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        for name, content in files.items():
            (building / name).parent.mkdir(parents=True, exist_ok=True)
            (building / name).write_bytes(content)
        building.replace(folder)
    return lambda_.Code.from_asset(str(folder))
