"""The README says only what is true: the first screen leads to a deploy, every `ckb` command it gives
parses as written, every figure it quotes is measured in docs/BENCHMARKS.md (or is someone else's, named
here), and every link it and docs/ hold leads somewhere. Its `make` commands are run by
tests/infra/test_readme_commands.py."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest
import typer.main

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))
# Figures the README quotes that are not ours to measure, and where they come from.
EXTERNAL_FIGURES = {
    "35-49%": "Anthropic's contextual retrieval: fewer top-20 retrieval failures",
    "67%": "Anthropic's contextual retrieval, with reranking",
    "$350": "OpenSearch Serverless' idle OCUs at AWS's price (docs/SETTINGS.md)",
}


def fenced(text: str) -> list[str]:
    lines, inside = [], False
    for raw in text.splitlines():
        if raw.startswith("```"):
            inside = not inside
            continue
        if inside:
            if lines and lines[-1].endswith("\\"):
                lines[-1] = lines[-1][:-1] + " " + raw.strip()
            else:
                lines.append(raw.strip())
    return lines


def test_the_first_screen_leads_to_a_deploy_in_under_100_lines() -> None:
    lines = README.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("make deploy"))
    assert first < 100, first
    assert len(lines) < 200  # the detail lives in docs/


@pytest.mark.parametrize(
    "line", [line for line in fenced(README) if line.startswith("ckb ")], ids=lambda line: line[:40]
)
def test_each_ckb_command_in_the_readme_parses_as_written(line: str) -> None:
    """Options and arguments as the CLI defines them (a file the example names need not exist here)."""
    from contextual_kb.cli.main import app

    words = shlex.split(line, comments=True)[1:]
    group = typer.main.get_command(app)
    click = importlib.import_module("typer._click")  # the click typer vendors (its exceptions, Context)
    name, *args = words
    command = group.get_command(click.Context(group), name)  # type: ignore[attr-defined]
    assert command is not None, f"ckb has no command {name!r}"
    try:
        command.make_context(name, list(args))
    except importlib.import_module("typer._click.exceptions").BadParameter as exc:
        assert "does not exist" in str(exc), exc  # a placeholder path of the example


def test_every_figure_the_readme_quotes_is_measured_or_named() -> None:
    benchmarks = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    figures = re.findall(r"\$\d[\d,.]*|\b\d[\d.,-]*\d?(?:x|%)", README)
    unsourced = [f for f in figures if f not in EXTERNAL_FIGURES and f not in benchmarks]
    assert not unsourced, f"figures in the README that docs/BENCHMARKS.md does not hold: {unsourced}"


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    out, inside = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        if not inside and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_every_link_leads_somewhere(page: Path) -> None:
    text = page.read_text()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (
            anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text())
        ):
            broken.append(target)
    assert not broken, broken
