"""`ckb transform` and `ckb demo` end to end: each starts its own local S3 on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from contextual_kb.cli.main import app
from tests.conftest import EVENTS, ROOT

runner = CliRunner()


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    # The commands set CONTEXT_STRATEGY in the process environment: restore it after each test.
    monkeypatch.setenv("CONTEXT_STRATEGY", "structural")
    monkeypatch.chdir(ROOT)


def test_transform_prints_a_summary_and_the_response() -> None:
    result = runner.invoke(app, ["transform", str(EVENTS / "multi-batch" / "event.json"), "--show", "1"])
    assert result.exit_code == 0, result.output
    assert "Transformation summary" in result.output
    assert "Document contracts/northwind-msa.txt: MASTER SERVICES AGREEMENT" in result.output
    as_json = runner.invoke(app, ["transform", str(EVENTS / "markdown" / "event.json"), "--json"])
    assert as_json.exit_code == 0, as_json.output
    response = json.loads(as_json.stdout)
    assert response["outputFiles"][0]["fileMetadata"] == {"team": "payments", "doc_type": "runbook"}


def test_transform_reports_a_malformed_event_and_exits_non_zero() -> None:
    result = runner.invoke(app, ["transform", str(EVENTS / "malformed-event" / "event.json")])
    assert result.exit_code == 1
    assert "inputFiles[1].contentBatches: Field required" in result.output.replace("\n", "")


def test_demo_runs_offline_and_checks_every_chunk() -> None:
    result = runner.invoke(
        app, ["demo", "--show", "1", "--max-tokens", "90", "--overlap", "25", "--strategy", "structural"]
    )
    assert result.exit_code == 0, result.output
    assert "every chunk back exactly once, in order, original text intact: yes" in result.output
    assert "Within: class TokenBucket" in result.output or "Declares: RateLimitExceeded" in result.output


def test_demo_uses_the_standin_even_with_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo never makes a paid call unless asked (--bedrock): AWS credentials are present here
    (conftest), and the calls still go to the stand-in; it says what they would cost on Bedrock."""
    monkeypatch.delenv("ANTHROPIC_BEDROCK_BASE_URL")
    monkeypatch.delenv("AWS_DEFAULT_REGION")  # the stand-in needs none from the user either
    monkeypatch.delenv("CONTEXT_STRATEGY")
    result = runner.invoke(app, ["demo", "--show", "1", "--no-eval"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "the local Bedrock stand-in at http://127.0.0.1:" in text and "no paid call" in text
    assert "Amazon Bedrock (" not in text
    assert "strategy claude" in text
    assert "every chunk back exactly once, in order, original text intact: yes" in text
    assert "This chunk is from" in text  # the stand-in's contexts, in front of the chunks
    assert ".." not in text.replace("...", "")  # its sentences end once
    assert "model calls 18 (stand-in)" in text
    assert "would cost about $" in text and "Claude Haiku 4.5" in text
    # These documents are below Haiku 4.5's cacheable minimum: the demo says why nothing was cached.
    assert "under Claude Haiku 4.5's 4,096-token cacheable minimum" in text
    # The context is labelled in text, not only in colour.
    assert "context: This chunk is from" in text and "chunk: " in text


def test_demo_with_bedrock_and_no_credentials_says_how_to_configure_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    for name in (
        "ANTHROPIC_BEDROCK_BASE_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", f"{tmp_path}/none")
    monkeypatch.setenv("AWS_CONFIG_FILE", f"{tmp_path}/none")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result = runner.invoke(app, ["demo", "--bedrock", "--strategy", "claude", "--no-eval"])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: no AWS credentials") and "aws configure" in line


def test_demo_eval_table_includes_its_own_strategy_labelled_with_its_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from contextual_kb.cli.datasets import DATASET

    if not (DATASET / "codebase_chunks.json").exists():
        pytest.skip("the codebase benchmark is not beside the repository")
    monkeypatch.delenv("ANTHROPIC_BEDROCK_BASE_URL")
    monkeypatch.delenv("CONTEXT_STRATEGY")
    result = runner.invoke(app, ["demo", "--show", "0"])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines() if "bm25 index" in line]
    assert [row[0] for row in rows[:3]] == ["raw", "structural", "claude"]
    assert "claude (stand-in)" in result.output
    assert "737 model calls to the local Bedrock stand-in" in " ".join(result.output.split())


def test_transform_with_claude_against_a_given_endpoint(standin: object) -> None:
    result = runner.invoke(
        app, ["transform", str(EVENTS / "markdown" / "event.json"), "--strategy", "claude"]
    )
    assert result.exit_code == 0, result.output
    assert "Transformation summary" in result.output
    assert standin.stats.answered > 0  # type: ignore[attr-defined]


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("transform", "demo", "upload", "sync", "query", "ask"):
        assert command in result.output
    for command in ("upload", "sync", "query", "ask"):
        helped = runner.invoke(app, [command, "--help"])
        assert helped.exit_code == 0 and "--stack" in helped.output and "--region" in helped.output


def test_transform_shows_hostile_names_and_text_literally(tmp_path: object) -> None:
    """A source URI or a chunk holding Rich markup or terminal escapes is shown as text (it used to crash
    the command with MarkupError) and without the escapes."""
    import shutil
    from pathlib import Path

    folder = Path(str(tmp_path)) / "hostile"
    shutil.copytree(EVENTS / "multi-batch", folder)
    event_path = folder / "event.json"
    event = json.loads(event_path.read_text())
    uri = event["inputFiles"][0]["originalFileLocation"]["s3_location"]["uri"]
    event["inputFiles"][0]["originalFileLocation"]["s3_location"]["uri"] = uri + "[/docs]\x1b]0;pwned\x07"
    event_path.write_text(json.dumps(event))
    result = runner.invoke(app, ["transform", str(event_path), "--show", "1"])
    assert result.exit_code == 0, result.output
    assert "[/docs]" in result.output and "pwned" in result.output
    assert "\x1b]" not in result.output and "\x07" not in result.output


def test_terminal_text_is_cleaned_of_control_characters_only() -> None:
    from contextual_kb.cli.terminal import clean, plain

    assert clean("a\x1b[2Jb\x07c\r\n\td\x9b") == "a[2Jbc\n\td"
    assert clean("invoice \u202egnp.exe\u202c ok \u200d") == "invoice gnp.exe ok \u200d"
    assert plain("[bold]x[/bold]").plain == "[bold]x[/bold]"
