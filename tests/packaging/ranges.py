"""pyproject.toml's ranges and constraints-lowest.txt, their floors: one source (pyproject), the file its
image. ``python -m tests.packaging.ranges`` rewrites the file from pyproject; tests/packaging/test_ranges.py
fails when the two differ."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
LOWEST = ROOT / "constraints-lowest.txt"
HEADER = (
    "# The lowest versions pyproject.toml allows, one per direct requirement of the package and its extras:\n"
    '# `pip install -c constraints-lowest.txt "contextual-kb[...]"` installs them (CI\'s lowest end, make\n'
    "# test-ends). Written by `python -m tests.packaging.ranges` from pyproject.toml; never edit by hand.\n"
    "# An extra whose own dependencies need more installs above them: mcp 2.0 needs pydantic>=2.12, so\n"
    "# [mcp] is installed without this file's pydantic line.\n"
)


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def user_requirements() -> dict[str, list[Requirement]]:
    """What a user installs: the base (key "") and each extra but dev (the repository's, pinned)."""
    declared = project()
    found = {"": [Requirement(r) for r in declared["dependencies"]]}
    for extra, listed in declared["optional-dependencies"].items():
        if extra != "dev":
            found[extra] = [Requirement(r) for r in listed]
    return found


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def floor(requirement: Requirement) -> str:
    """The version after ``>=`` (every user requirement has one)."""
    (low,) = [s.version for s in requirement.specifier if s.operator == ">="]
    return low


def floors() -> dict[str, str]:
    """Canonical name -> lowest allowed version, over the base and the user extras (one floor a name)."""
    found: dict[str, str] = {}
    for requirements in user_requirements().values():
        for requirement in requirements:
            name = canonical(requirement.name)
            assert found.setdefault(name, floor(requirement)) == floor(requirement), f"two floors for {name}"
    return found


def render() -> str:
    return HEADER + "".join(f"{name}=={version}\n" for name, version in sorted(floors().items()))


if __name__ == "__main__":
    LOWEST.write_text(render())
    print(f"wrote {LOWEST.relative_to(ROOT)}")
