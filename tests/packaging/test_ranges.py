"""What a user installs declares compatible ranges and only what the package imports (issue 49): every
requirement of the base and of each user extra is ``>=floor,<next major``; constraints-lowest.txt is the
floors, written from pyproject.toml; the repository's venv (constraints.txt) and the function's asset
(function-requirements.txt) pin versions inside the ranges; ``[cdk]`` is what contextual_kb.cdk imports, no
checks (cdk-nag, cfn-lint); the license is an SPDX expression with its text in the distribution. Both ends
installed and used: tests/packaging/test_ends.py (``make test-ends``)."""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from tests.packaging import ranges
from tests.packaging.ranges import ROOT, canonical, floors, user_requirements

# Calendar-versioned: no major to stay below.
CALVER = {"regex"}


def pins(path: Path) -> dict[str, str]:
    return {
        canonical(name): version
        for name, version in (
            line.strip().split("==") for line in path.read_text().splitlines() if "==" in line
        )
    }


def test_every_user_requirement_is_a_range_from_a_floor_to_below_the_next_major() -> None:
    for extra, requirements in user_requirements().items():
        for requirement in requirements:
            operators = sorted(s.operator for s in requirement.specifier)
            where = f"{requirement} ({extra or 'base'})"
            assert "==" not in operators and "~=" not in operators, f"pinned: {where}"
            low = Version(ranges.floor(requirement))
            if canonical(requirement.name) in CALVER:
                assert operators == [">="], where
                continue
            assert operators == ["<", ">="], f"not >=floor,<next major: {where}"
            (high,) = [Version(s.version) for s in requirement.specifier if s.operator == "<"]
            # below a major not yet out (a range may span majors the code is tested on: rich 14 and 15); for
            # 0.x, a minor is a major: <0.y or <1
            assert len(high.release) == 1 or high.release[0] == 0, where
            assert high.major > low.major or (low.major == 0 and high > low), where


def test_constraints_lowest_is_written_from_the_ranges() -> None:
    """Not edited by hand: `python -m tests.packaging.ranges` writes it from pyproject.toml."""
    assert ranges.LOWEST.read_text() == ranges.render(), "run: python -m tests.packaging.ranges"


def test_the_repositorys_pins_are_inside_the_ranges() -> None:
    """What `make test` runs (constraints.txt) is a version every range allows; the function's asset is built
    from the same pins (function-constraints.txt is constraints.txt)."""
    pinned = pins(ROOT / "constraints.txt")
    for extra, requirements in user_requirements().items():
        if extra == "dense":  # not in the repository's venv (make eval-dense adds it)
            continue
        for requirement in requirements:
            version = pinned[canonical(requirement.name)]
            assert requirement.specifier.contains(version), f"constraints.txt {version}: {requirement}"
    function = ROOT / "lambda" / "contextual_kb" / "cdk" / "function-requirements.txt"
    for line in function.read_text().split():
        requirement = Requirement(line)
        (spec,) = requirement.specifier
        assert spec.operator == "==" and pinned[canonical(requirement.name)] == spec.version, line


def test_the_floors_are_one_per_name() -> None:
    found = floors()
    assert found["aws-cdk-lib"] == "2.250.0"  # docs/CONSTRUCTS.md, "Supported versions"
    assert "cdk-nag" not in found and "cfn-lint" not in found


def _imported_top_levels(folder: Path) -> set[str]:
    found = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"contextual_kb", "__future__"}


def _requires(distribution: str) -> set[str]:
    return {
        canonical(Requirement(r).name)
        for r in importlib.metadata.requires(distribution) or []
        if "extra ==" not in r
    }


def test_the_cdk_extra_is_what_the_constructs_import() -> None:
    """contextual_kb.cdk imports aws_cdk, constructs, jsii (aws-cdk-lib's own dependency) and the base's
    (pydantic): [cdk] names aws-cdk-lib and constructs, and no check of the repository's (cdk-nag, cfn-lint)
    nor the alpha L2."""
    declared = {canonical(r.name) for r in user_requirements()["cdk"]}
    assert declared == {"aws-cdk-lib", "constructs"}
    distributions = importlib.metadata.packages_distributions()
    imported = _imported_top_levels(ROOT / "lambda" / "contextual_kb" / "cdk")
    assert {"aws_cdk", "constructs"} <= imported
    base = {canonical(r.name) for r in user_requirements()[""]}
    allowed = declared | base | {name for d in declared for name in _requires(d)}
    for module in imported:
        assert {canonical(d) for d in distributions[module]} & allowed, f"{module}: not in [cdk] nor the base"
    assert not {"cdk_nag", "cfnlint", "aws_cdk.aws_bedrock_alpha"} & imported


def test_the_license_is_an_spdx_expression_with_its_text() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT-0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT No Attribution\n") and "WITHOUT WARRANTY OF ANY KIND" in text
