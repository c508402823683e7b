"""`ckb transform` and `ckb demo` end to end: each starts its own local S3 on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from contextual_kb.cli import app
from tests.conftest import EVENTS, ROOT

runner = CliRunner()


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
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
    result = runner.invoke(app, ["demo", "--show", "1", "--max-tokens", "90", "--overlap", "25"])
    assert result.exit_code == 0, result.output
    assert "every chunk back exactly once, in order, original text intact: yes" in result.output
    assert "Within: class TokenBucket" in result.output or "Declares: RateLimitExceeded" in result.output


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "transform" in result.output and "demo" in result.output
