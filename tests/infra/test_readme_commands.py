"""Every stack command the README gives, run as a user runs it: through `make` and the pinned CDK CLI, with
the shipped cdk.json (which the CLI always merges into the context), the stack bundled as for a deploy.

`make deploy` and `make destroy` cannot reach AWS here; they synthesize the app first exactly as `make synth`
does (the same app, cdk.json and `-c` values), so each is run with its subcommand made `synth`: a setting the
stack refuses, or a wrong stack name, shows there. Each template passes cdk-nag (a finding fails synth) and
cfn-lint. A README command that no test runs fails here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.infra.conftest import cfn_lint

ROOT = Path(__file__).resolve().parents[2]
STACK_TARGETS = {"synth", "deploy", "destroy"}
# The Makefile's other targets that the README names, and what runs them in CI.
OTHER_TARGETS = {
    "demo": "tests/integration/test_cli.py (ckb demo, what make demo runs)",
    "test": ".ci/run",
    "test-long": ".ci/run",
    "test-lifecycle": ".ci/run (ministack)",
    "bench": "bench/ (docs/BENCHMARKS.md)",
    "eval-dense": "docs/BENCHMARKS.md",
}
FULL, ATTACHED = "ContextualKb", "ContextualKbAttached"
K = TypeVar("K")
# The hang guard (pyproject: 600 s a test) for a module whose first test's setup is all its synths through
# the CDK CLI: 3 min one after another at load 1-2, over 10 at load 9 (issue 54's busy runs).
SYNTHS_HANG_GUARD = pytest.mark.timeout(1800)
pytestmark = SYNTHS_HANG_GUARD


def fenced_lines(text: str) -> list[list[str]]:
    """The README's fenced blocks, each as its logical lines (continuations joined, comments dropped)."""
    blocks: list[list[str]] = []
    inside = False
    for raw in text.splitlines():
        if raw.startswith("```"):
            inside = not inside
            if inside:
                blocks.append([])
            continue
        if not inside:
            continue
        block = blocks[-1]
        if block and block[-1].endswith("\\"):
            block[-1] = block[-1][:-1].rstrip() + " " + raw.strip()
        else:
            block.append(raw.strip())
    return [[_uncommented(line) for line in block if line.strip()] for block in blocks]


def _uncommented(line: str) -> str:
    """A shell line without its comment; other text (sample output in a block) as it is."""
    try:
        return shlex.join(shlex.split(line, comments=True))
    except ValueError:
        return line


def readme_make_commands() -> list[tuple[list[str], dict[str, str]]]:
    """Each `make ...` line of the README with the variables `export`ed before it in its block."""
    found = []
    for block in fenced_lines((ROOT / "README.md").read_text()):
        exported: dict[str, str] = {}
        for line in block:
            words = shlex.split(line) if line.startswith(("make ", "export ")) else []
            if not words:
                continue
            if words[0] == "export":
                exported.update(dict(w.split("=", 1) for w in words[1:]))
            elif words[0] == "make":
                found.append((words[1:], dict(exported)))
    return found


def test_every_readme_command_that_touches_the_stack_is_run_here() -> None:
    """A `cdk`/`npx` line, or a make target no test runs, is a README command nobody checks."""
    lines = [line for block in fenced_lines((ROOT / "README.md").read_text()) for line in block]
    unchecked = [line for line in lines if re.match(r"(npx |cdk |\S*/cdk )", line)]
    assert not unchecked, f"README commands no test runs: {unchecked}"
    targets = [next((w for w in args if "=" not in w), "") for args, _ in readme_make_commands()]
    assert set(targets) >= STACK_TARGETS
    unknown = [t for t in targets if t not in STACK_TARGETS and t not in OTHER_TARGETS]
    assert not unknown, f"make targets in the README that no test runs: {unknown}"


def cdk_commands(args: list[str], exported: dict[str, str]) -> list[list[str]]:
    """What `make` runs for ``args`` (its own dry run, with this interpreter's venv), CDK CLI calls only."""
    venv = Path(sys.prefix).relative_to(ROOT) if Path(sys.prefix).is_relative_to(ROOT) else Path(sys.prefix)
    shown = subprocess.run(
        ["make", "-n", "--no-print-directory", *args, f"VENV={venv}"],
        cwd=ROOT,
        env={**_environment(), **exported},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [shlex.split(line) for line in shown.splitlines() if "aws-cdk@" in line]


def as_synth(command: list[str], out: Path) -> list[str]:
    """``command`` with deploy or destroy made synth (same app, context and cdk.json), into ``out``."""
    words = list(command)
    for verb in ("deploy", "destroy"):
        if verb in words:
            words[words.index(verb)] = "synth"
    for flag in ("--require-approval", "-o", "--output"):
        while flag in words:
            at = words.index(flag)
            del words[at : at + 2]
    for flag in ("--force", "-q"):
        while flag in words:
            words.remove(flag)
    return [*words, "-q", "-o", str(out)]


def _environment() -> dict[str, str]:
    """The user's environment less their AWS settings: synth is offline and reads none of them."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    return {
        **kept,
        "AWS_EC2_METADATA_DISABLED": "true",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }


def _context(command: list[str]) -> tuple[str, ...]:
    return tuple(sorted(command[i + 1] for i, w in enumerate(command) if w == "-c"))


def synth(command: list[str], out: Path) -> subprocess.CompletedProcess[str]:
    """One CDK CLI call, made synth into ``out``, as the user's shell runs it (offline, from the checkout)."""
    return subprocess.run(
        as_synth(command, out), cwd=ROOT, env=_environment(), capture_output=True, text=True, check=False
    )


def synthesize_each(calls: Mapping[K, tuple[list[str], Path]]) -> dict[K, subprocess.CompletedProcess[str]]:
    """Each CDK CLI call (``command``, made synth into ``out``), one after another. Not at once: all of a
    module's synths together (each a node CLI, a Python app, jsii and a pip bundling) took the machine from
    the other pytest-xdist worker (with three runs side by side the load reached 38) and saved little.
    SYNTHS_HANG_GUARD covers their time on a loaded machine."""
    return {key: synth(command, out) for key, (command, out) in calls.items()}


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], dict[str, Any]]:
    """Each distinct CDK CLI call the README's make commands make, synthesized once."""
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    calls: dict[tuple[str, ...], tuple[list[str], Path]] = {}
    folder = tmp_path_factory.mktemp("readme")
    for args, exported in readme_make_commands():
        if not STACK_TARGETS & set(args):
            continue
        for command in cdk_commands(args, exported):
            key = _context(command)
            if key in out:
                out[key]["commands"].append(" ".join(["make", *args]))
                continue
            target = folder / f"assembly-{len(out)}"
            calls[key] = (command, target)
            out[key] = {"commands": [" ".join(["make", *args])], "out": target}
    for key, ran in synthesize_each(calls).items():
        out[key]["run"] = ran
    return out


def test_each_readme_stack_command_synthesizes_through_the_cdk_cli(
    synthesized: dict[tuple[str, ...], dict[str, Any]],
) -> None:
    assert len(synthesized) >= 4  # opensearch, s3vectors, chunking none, attach
    for context, case in synthesized.items():
        ran = case["run"]
        assert ran.returncode == 0, f"{case['commands']}: {ran.stderr[-2000:]}"
        manifest = json.loads((case["out"] / "manifest.json").read_text())
        stacks = [
            artifact.get("displayName", name)
            for name, artifact in manifest["artifacts"].items()
            if artifact["type"] == "aws:cloudformation:stack"
        ]
        attach = any(c.startswith("knowledgeBaseId=") for c in context)
        # Attach mode's stack is never the full stack's (an update would delete its Knowledge Base).
        assert stacks == [ATTACHED if attach else FULL], (case["commands"], stacks)


def test_each_readme_stack_template_passes_cfn_lint(
    synthesized: dict[tuple[str, ...], dict[str, Any]],
) -> None:
    templates = [path for case in synthesized.values() for path in case["out"].glob("*.template.json")]
    assert len(templates) == len(synthesized)
    result = cfn_lint(templates)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_variants_are_the_ones_asked_for(
    synthesized: dict[tuple[str, ...], dict[str, Any]],
) -> None:
    contexts = {" ".join(c) for c in synthesized}
    assert "vectorStore=opensearch" in contexts and "vectorStore=s3vectors" in contexts
    assert any("chunking=none" in c for c in contexts)
    assert any("knowledgeBaseId=ABCDEFGHIJ" in c for c in contexts)


def test_the_shipped_cdk_json_holds_the_cdks_flags_and_no_setting() -> None:
    """Defaults live in the settings model (cdk/config.py): a setting in cdk.json is one the user set,
    which attach mode would refuse."""
    from contextual_kb.cdk.config import StackConfig

    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    settings = {f.alias for f in StackConfig.model_fields.values()}
    assert not settings & set(context)
    assert all(name.startswith("@aws-cdk") for name in context)


def test_a_misspelt_setting_fails_synth_in_one_line(tmp_path: Path) -> None:
    """`-c vectorstore=s3vectors` would deploy OpenSearch Serverless (hundreds of dollars a month): an unknown
    key fails synth, through the CLI as users run it, naming the closest setting."""
    (command, *_) = cdk_commands(["deploy", "CDK_CONTEXT=-c vectorstore=s3vectors"], {})
    ran = synth(command, tmp_path / "out")
    assert ran.returncode != 0
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: CDK context vectorstore: not a setting of this stack (did you mean vectorStore?)"
    ]
