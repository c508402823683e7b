"""docs/ says what the code does, and the code's pointers lead where the text is: every pointer to a section
of the README or of a page of docs/ (in the code's messages, comments and --help, the Makefile, the README
and docs/) names a section that exists; every `ckb` command docs/ shows parses as written; the layout and the
stack outputs docs/ lists are the code's. The figures docs/ quotes are checked by running their commands:
tests/integration/test_docs_figures.py."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from tests.unit.test_readme import fenced

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
# Where the code points readers: the package, the stack, the benchmarks, the Makefile, and the pages.
POINTING = sorted(
    {
        *(ROOT / "lambda" / "contextual_kb").rglob("*.py"),
        *(ROOT / "stacks").rglob("*.py"),
        *(ROOT / "bench").glob("*.py"),
        ROOT / "app.py",
        ROOT / "Makefile",
        ROOT / "README.md",
        *DOCS,
    }
)
# `README, "What destroy keeps"`, `docs/OPERATIONS.md, Before the first deploy)`, `docs/CLI.md#measuring...`:
# a quoted section, an unquoted one (a capital, up to the punctuation that ends it), or an anchor.
POINTER = re.compile(
    r"(?P<file>README(?:\.md)?|docs/[A-Z][A-Z-]*\.md)(?:'s)?"
    r"(?:#(?P<anchor>[\w-]+)|[,:]\s+(?:\"(?P<quoted>[^\"]+)\"|(?P<bare>[A-Z][^,;:().\"]*)))"
)


def _joined(text: str) -> str:
    """Source text with a string literal's continuation and a comment's next line joined, spaces collapsed,
    so a pointer split over lines reads whole."""
    text = re.sub(r"\"\s*\n\s*f?\"", "", text)
    text = re.sub(r"\n\s*#+\s*", " ", text)
    return re.sub(r"\s+", " ", text.replace("│", " "))


def _sections(page: Path) -> list[str]:
    """A page's headings and bold run-in labels (`**At scale.**`), lower case, without markup."""
    text, inside, found = page.read_text(), False, []
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside and line.startswith("#"):
            found.append(line.lstrip("#").strip())
    found += re.findall(r"\*\*([^*]+)\*\*", text)
    return [title.replace("`", "").lower() for title in found]


def _anchors(page: Path) -> set[str]:
    from tests.unit.test_readme import _anchors as anchors

    return anchors(page.read_text())


def broken_pointers(text: str) -> list[str]:
    """The pointers in ``text`` whose page, section or anchor does not exist."""
    broken = []
    for match in POINTER.finditer(_joined(text)):
        name = match["file"]
        page = ROOT / (name if name.endswith(".md") else f"{name}.md")
        if not page.exists():
            broken.append(match[0])
        elif match["anchor"]:
            if match["anchor"] not in _anchors(page):
                broken.append(match[0])
        else:
            section = (match["quoted"] or match["bare"]).strip().replace("`", "").lower()
            if not any(title.startswith(section) for title in _sections(page)):
                broken.append(match[0])
    return broken


@pytest.mark.parametrize("path", POINTING, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_pointer_to_a_section_leads_to_it(path: Path) -> None:
    broken = broken_pointers(path.read_text())
    assert not broken, f"{path.relative_to(ROOT)} points to sections that do not exist: {broken}"


def test_the_pointer_check_finds_a_moved_section_and_passes_one_that_is_there() -> None:
    assert broken_pointers('(README, "Settings")') == ['README, "Settings"']
    assert broken_pointers("and ViewSubscriptions (README, Before the first deploy)") == [
        "README, Before the first deploy"
    ]
    assert broken_pointers('(docs/BENCHMARKS.md, "Many invocations,\n# one quota")') == [
        'docs/BENCHMARKS.md, "Many invocations, one quota"'
    ]
    assert broken_pointers("see docs/CLI.md#no-such-anchor") == ["docs/CLI.md#no-such-anchor"]
    assert not broken_pointers('(README, "What destroy keeps"; docs/SETTINGS.md, Models and prices)')
    assert not broken_pointers("docs/OPERATIONS.md#many-invocations-one-quota, docs/ATTACH.md, What")


def _help_texts() -> dict[str, str]:
    """`ckb --help` and every command's (and sub-command's), as printed."""
    from contextual_kb.cli.main import app

    runner, texts = CliRunner(), {}
    group = typer.main.get_command(app)
    click = importlib.import_module("typer._click")  # the click typer vendors

    def walk(command: object, words: list[str]) -> None:
        printed = runner.invoke(app, [*words, "--help"], env={"COLUMNS": "200"})
        assert printed.exit_code == 0, (words, printed.output)
        texts[" ".join(["ckb", *words])] = printed.output
        for name in getattr(command, "commands", {}):
            walk(command.get_command(click.Context(command), name), [*words, name])  # type: ignore[attr-defined]

    walk(group, [])
    return texts


def test_every_pointer_in_ckb_help_leads_to_it() -> None:
    texts = _help_texts()
    assert {"ckb", "ckb sync", "ckb eval", "ckb contextualize"} <= set(texts)
    broken = {name: found for name, text in texts.items() if (found := broken_pointers(text))}
    assert not broken, broken
    # The detail of --reprocess moved to docs/ATTACH.md with the rest of attach mode.
    assert "docs/ATTACH.md" in " ".join(texts["ckb sync"].split())


def _commands(page: Path) -> list[str]:
    """The `ckb` commands a page's fenced blocks show, as typed (`$ `, `.venv/bin/`, an env prefix dropped;
    an optional `[--flag value]` taken as given)."""
    found = []
    for shown in fenced(page.read_text()):
        line = re.sub(r"^\$ |^(?:[A-Z_][A-Z0-9_]*=\S+ )+", "", shown).removeprefix(".venv/bin/")
        if line.startswith("ckb "):
            found.append(re.sub(r" \[(--[^\]]+)\]", r" \1", line))
    return found


DOC_COMMANDS = [(page.name, line) for page in DOCS for line in _commands(page)]


@pytest.mark.parametrize(("page", "line"), DOC_COMMANDS, ids=[f"{p}:{c[:40]}" for p, c in DOC_COMMANDS])
def test_each_ckb_command_in_docs_parses_as_written(page: str, line: str) -> None:
    from contextual_kb.cli.main import app

    words = shlex.split(line, comments=True)[1:]
    group = typer.main.get_command(app)
    click = importlib.import_module("typer._click")
    name, *args = words
    command = group.get_command(click.Context(group), name)  # type: ignore[attr-defined]
    assert command is not None, f"{page}: ckb has no command {name!r}"
    try:
        command.make_context(name, list(args))
    except importlib.import_module("typer._click.exceptions").BadParameter as exc:
        assert "does not exist" in str(exc), exc  # a placeholder path of the example


def test_docs_show_ckb_commands_to_check() -> None:
    pages = {page for page, _ in DOC_COMMANDS}
    assert {"CLI.md", "BENCHMARKS.md", "DEFERRED.md", "ATTACH.md"} <= pages


def _layout() -> str:
    text = (ROOT / "docs" / "CLI.md").read_text()
    return text[text.index("```\nlambda/contextual_kb/") :].split("```\n", 2)[1]


def test_the_layout_names_every_module_the_lambda_runs() -> None:
    """docs/CLI.md's layout lists the runtime's modules one by one (the other parts are summarised)."""
    layout = set(re.findall(r"[\w.]+", _layout()))
    runtime = ROOT / "lambda" / "contextual_kb" / "runtime"
    missing = [
        str(path.relative_to(runtime))
        for path in runtime.rglob("*.py")
        if path.stem != "__init__" and path.name not in layout and path.stem not in layout
    ]
    assert not missing, f"modules of runtime/ docs/CLI.md's layout leaves out: {missing}"


def _outputs(source: str) -> list[str]:
    """The names a stack module gives CfnOutput (the loop over (name, value) pairs before it)."""
    text = (ROOT / "stacks" / source).read_text()
    block = text[: text.index("CfnOutput(self, name")]
    block = block[block.rindex("for name, value in (") :]
    return re.findall(r'\("([A-Z]\w+)",', block)


def test_operations_lists_every_output_of_the_full_stack() -> None:
    names = _outputs("stack.py")
    assert {"KnowledgeBaseId", "BatchRoleArn", "VectorStoreType"} <= set(names)
    text = " ".join((ROOT / "docs" / "OPERATIONS.md").read_text().split())
    listed = text[text.index("Outputs: ") :].split(".", 1)[0]
    assert sorted(re.findall(r"`(\w+)`", listed)) == sorted(names)


def test_the_retry_counts_docs_give_are_the_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """HOW-IT-WORKS and OPERATIONS count a call's tries as the engine makes them: a call that keeps failing
    (5xx, after the SDK's retries) is sent MAX_JOB_ATTEMPTS times in all; one that stays throttled is sent
    MAX_THROTTLED_CALLS times, that is after one fewer waits."""
    from contextual_kb.runtime.context.claude import engine
    from tests.unit.test_claude_engine import FakeClient, chunk_of, document, error, reply, run, strategy

    monkeypatch.setattr(engine, "_THROTTLE_PAUSE", 0.001)
    monkeypatch.setattr(engine, "_MAX_THROTTLE_PAUSE", 0.002)
    monkeypatch.setattr(engine, "_WAIT_SLICE", 0.01)

    def script(request: dict[str, object], number: int) -> object:
        chunk = chunk_of(request)
        if chunk == "always throttled":
            raise error("throttled", 429)
        if chunk == "always failing":
            raise error("transient", 503)
        return reply()

    client = FakeClient(script)  # type: ignore[arg-type]
    documents = [document(f"{name}.md", [name]) for name in ("always throttled", "always failing", "fine")]
    results, invocation = run(strategy(client, BREAKER_THRESHOLD="100"), documents, seconds=60.0)
    assert results[2] == ["A context."] and all(results[:2])  # the other two: the structural context
    sent = [chunk_of(request) for request in client.requests]
    tries, waits = sent.count("always failing"), sent.count("always throttled") - 1
    assert (tries, waits + 1) == (engine.MAX_JOB_ATTEMPTS, engine.MAX_THROTTLED_CALLS)
    assert dict(invocation.accounting.fallbacks) == {"model_error": 1, "model_throttled": 1}
    how = " ".join((ROOT / "docs" / "HOW-IT-WORKS.md").read_text().split())
    assert f"at most {waits} times ({waits + 1} throttled tries in all)" in how
    assert f"tried again up to {tries - 1} more times ({tries} tries in all)" in how
    operations = " ".join((ROOT / "docs" / "OPERATIONS.md").read_text().split())
    assert f"still throttled after {waits} waits ({waits + 1} tries)" in operations
    assert f"then up to {tries - 1} more tries ({tries} in all)" in operations
