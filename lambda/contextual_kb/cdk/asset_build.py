"""Builds the transformation function's asset: the runtime package and its dependencies, nothing else.

One script for both bundling paths, run on the staged input folder (``bundling.py`` beside it copies it with
``requirements.txt``, ``constraints.txt`` and the runtime package): on this machine with its ``pip`` (this
Python's, else one on PATH, else uv's pip interface: the same wheels, only their installer's records differ),
or in CDK's Docker image when there is none. The same pins, the same platform, the same contents:

1. ``pip install`` of the runtime requirements under the constraints, as binary wheels for the Lambda's
   platform and Python (``--platform``, ``--python-version``), without compiling (``--no-compile``: the
   machine's bytecode is for its own Python, which the function's 3.13 cannot use);
2. the AWS SDK removed (``PROVIDED_BY_LAMBDA``): the Lambda runtime ships boto3 and botocore, kept patched by
   AWS, and bundling ours (17 MB zipped) would put the asset over its 12 MB budget; the calls the function
   makes (S3 GetObject/PutObject/DeleteObjects, SigV4 signing) are long-stable in every SDK a Python 3.13
   runtime carries;
3. the runtime package copied: ``contextual_kb/__init__.py`` and ``contextual_kb/runtime/``, never the
   command line, evaluation or local tooling; no ``__pycache__``; and the user's handler modules, if any
   (``handler_modules/*.py``), beside it;
4. the same bytes whoever builds it: RECORD lines of the console scripts (outside the asset, naming the
   building interpreter) dropped.

Standard library only: it runs in the bundling image too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

# Distributions the Lambda runtime provides (the AWS SDK and what only it needs), left out of the asset.
PROVIDED_BY_LAMBDA = ("boto3", "botocore", "s3transfer", "jmespath", "python_dateutil", "six", "urllib3")
PYTHON_VERSION = "3.13"
PLATFORMS = {"arm64": "manylinux2014_aarch64", "x86_64": "manylinux2014_x86_64"}
UV_PLATFORMS = {"arm64": "aarch64-manylinux2014", "x86_64": "x86_64-manylinux2014"}


def pip_command(
    python: str, output: Path, source: Path, architecture: str, pip: list[str] | None = None
) -> list[str]:
    """``pip``: the pip to run (``python -m pip`` by default; a pip of another interpreter does as well:
    the platform and Python version are given, not taken from the interpreter)."""
    return [
        *(pip or [python, "-m", "pip"]), "install", "--quiet", "--disable-pip-version-check", "--no-compile",
        "--platform", PLATFORMS[architecture], "--implementation", "cp", "--python-version", PYTHON_VERSION,
        "--only-binary=:all:", "--target", str(output),
        "--requirement", str(source / "requirements.txt"), "--constraint", str(source / "constraints.txt"),
    ]  # fmt: skip


def uv_command(uv: str, output: Path, source: Path, architecture: str) -> list[str]:
    """The same install through uv's pip interface (a venv made by uv has no pip)."""
    return [
        uv, "pip", "install", "--quiet", "--python-platform", UV_PLATFORMS[architecture],
        "--python-version", PYTHON_VERSION, "--only-binary", ":all:", "--target", str(output),
        "--requirement", str(source / "requirements.txt"), "--constraint", str(source / "constraints.txt"),
    ]  # fmt: skip


def installer() -> tuple[str, list[str]] | None:
    """What installs the wheels here: this interpreter's pip, else a pip on PATH (another interpreter's),
    else uv; None when there is none."""
    import importlib.util

    if importlib.util.find_spec("pip") is not None:
        return "pip", [sys.executable, "-m", "pip"]
    for name in ("pip3", "pip"):
        if found := shutil.which(name):
            return "pip", [found]
    if found := shutil.which("uv"):
        return "uv", [found]
    return None


def remove_distribution(output: Path, name: str) -> None:
    """Every file a distribution installed (its RECORD) and its dist-info."""
    for info in output.glob("*.dist-info"):
        if info.name.split("-")[0].lower().replace("-", "_") != name:
            continue
        record = info / "RECORD"
        for line in record.read_text().splitlines() if record.exists() else []:
            path = (output / line.split(",")[0]).resolve()
            if not path.is_relative_to(output.resolve()):  # a script's ../../bin path: not ours to touch
                continue
            if path.is_file() or path.is_symlink():
                path.unlink()
        shutil.rmtree(info, ignore_errors=True)


def remove_empty_folders(output: Path) -> None:
    for folder, _, _ in sorted(os.walk(output), key=lambda entry: len(entry[0]), reverse=True):
        if Path(folder) != output and not any(Path(folder).iterdir()):
            Path(folder).rmdir()


def drop_records_outside(output: Path) -> None:
    """RECORD lines of files outside the asset (console scripts under ../../bin, never shipped): their
    hashes cover the building interpreter's path (the scripts' first line), so the same inputs built by
    another Python (a user's venv, this checkout's) would give other bytes."""
    for record in output.glob("*.dist-info/RECORD"):
        lines = record.read_text().splitlines(keepends=True)
        kept = [line for line in lines if not line.startswith("../")]
        if kept != lines:
            record.write_text("".join(kept))


def build(
    source: Path,
    output: Path,
    architecture: str,
    python: str = sys.executable,
    tool: tuple[str, list[str]] | None = None,
) -> None:
    """``tool``: ``installer()``'s answer (this interpreter's pip when not given)."""
    kind, command = tool or ("pip", [python, "-m", "pip"])
    if kind == "uv":
        subprocess.run(uv_command(command[0], output, source, architecture), check=True)
        (output / ".lock").unlink(missing_ok=True)  # uv's lock on the target folder, not the asset's
    else:
        subprocess.run(pip_command(python, output, source, architecture, command), check=True)
    for name in PROVIDED_BY_LAMBDA:
        remove_distribution(output, name)
    remove_empty_folders(output)
    shutil.copytree(
        source / "contextual_kb",
        output / "contextual_kb",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    modules = source / "handler_modules"  # the user's own handler (docs/SDK.md), beside contextual_kb
    for module in sorted(modules.glob("*.py")) if modules.is_dir() else []:
        shutil.copy2(module, output / module.name)
    for cache in list(output.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(output / "bin", ignore_errors=True)  # console scripts: of no use in a function
    drop_records_outside(output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--architecture", choices=sorted(PLATFORMS), default="arm64")
    args = parser.parse_args()
    build(args.source, args.output, args.architecture)


if __name__ == "__main__":
    main()
