"""`ckb transform` and `ckb demo` end to end: each starts its own local S3 on 127.0.0.1."""

from __future__ import annotations

import json
import re

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
    # Each `ckb transform` process starts an empty local S3; in one process moto's state outlives a run, so
    # whatever test file ran before this one on the same pytest-xdist worker could leave contexts to
    # remember, and the model would not be asked (a busy run, issue 54). Empty, as a process starts.
    from moto.core.base_backend import BackendDict

    BackendDict.reset()


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
    # The context is labelled in text, not only in colour, and as the stand-in's: a newcomer must not take
    # a context made by rule for Claude's.
    assert "context (the stand-in's, made by rule: not a model's): This chunk is from" in text
    assert "chunk: " in text


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


@pytest.mark.benchmark
def test_demo_eval_table_includes_its_own_strategy_labelled_with_its_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_BEDROCK_BASE_URL")
    monkeypatch.delenv("CONTEXT_STRATEGY")
    result = runner.invoke(app, ["demo", "--show", "0"])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines() if "bm25 index" in line]
    assert [row[0] for row in rows[:3]] == ["raw", "structural", "claude"]
    assert "claude (stand-in)" in result.output
    said = " ".join(result.output.split())
    assert "737 model calls to the local Bedrock stand-in" in said
    # A newcomer reads why the stand-in's row is no better than raw chunks, and how to measure Claude's.
    assert "This row measures the plumbing, not Claude: the stand-in's contexts are made by rule" in said
    assert "--bedrock measures them here (paid)" in said


def test_transform_with_claude_against_a_given_endpoint(standin: object) -> None:
    result = runner.invoke(
        app, ["transform", str(EVENTS / "markdown" / "event.json"), "--strategy", "claude"]
    )
    assert result.exit_code == 0, result.output
    assert "Transformation summary" in result.output
    assert standin.stats.answered > 0  # type: ignore[attr-defined]


def test_transform_says_where_the_model_calls_went_and_what_they_cost(standin: object) -> None:
    result = runner.invoke(
        app, ["transform", str(EVENTS / "markdown" / "event.json"), "--strategy", "claude"]
    )
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    url = standin.url  # type: ignore[attr-defined]
    # Contexts remembered from an earlier run would be counted, not called (each test starts an empty S3).
    assert re.search(
        rf"model calls: \d+ to the model endpoint {url} \(ANTHROPIC_BEDROCK_BASE_URL\)"
        r"(; \d+ chunk\(s\) took the context remembered from an earlier run)? tokens:",
        said,
    ), said
    assert "cost $0.0" in said and "fallbacks" not in said


def _refuse_every_call(standin: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bad credentials, as Bedrock answers them: every call refused (403 is not retried). Contexts an
    earlier test left in this process's local S3 are not remembered: each ckb run is a process of its own."""
    standin.config.fault_for = lambda seen: 403  # type: ignore[attr-defined]
    monkeypatch.setenv("CONTEXT_MEMORY_PREFIX", "")


def test_transform_fails_when_no_chunk_got_the_models_context(
    standin: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    _refuse_every_call(standin, monkeypatch)
    event = str(EVENTS / "markdown" / "event.json")
    result = runner.invoke(app, ["transform", event, "--strategy", "claude"])
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "fallbacks: 5 chunk(s) got a structural context instead of the model's (model_unavail" in said
    assert result.stderr.startswith("error: no chunk got the model's context: every context is a structural")
    assert "--allow-fallback" in result.stderr and "Traceback" not in result.output
    # --json keeps standard output for the response; the account of the model calls goes to stderr.
    as_json = runner.invoke(app, ["transform", event, "--strategy", "claude", "--json"])
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["outputFiles"]
    assert "fallbacks: 5 chunk(s)" in " ".join(as_json.stderr.split())
    accepted = runner.invoke(app, ["transform", event, "--strategy", "claude", "--allow-fallback"])
    assert accepted.exit_code == 0, accepted.output
    assert "fallbacks: 5 chunk(s)" in " ".join(accepted.output.split())


def test_transform_with_some_fallbacks_says_so_and_succeeds(
    standin: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXT_MEMORY_PREFIX", "")
    refusals = [400]  # the first call is refused (400 is not retried), the others answered
    standin.config.fault_for = lambda seen: refusals.pop() if refusals else None  # type: ignore[attr-defined]
    event = str(EVENTS / "multi-batch" / "event.json")
    result = runner.invoke(app, ["transform", event, "--strategy", "claude"])
    said = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert "fallbacks: 1 chunk(s) got a structural context instead of the model's (model_rejected 1)" in said


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
