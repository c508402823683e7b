"""Paid work asks first: its estimate, then a yes (``--yes``, or a person at a terminal); with neither, it
stops in one line before any paid call. Also what a user checks first: ``ckb --version``; ``--logs``'s
metrics."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextual_kb.cli import paid
from contextual_kb.cli.main import app
from tests.conftest import EVENTS, ROOT
from tests.support import corpus

runner = CliRunner()
HAIKU_45 = "anthropic.claude-haiku-4-5-20251001-v1:0"  # $1 in, $5 out, $1.25 cache write, $0.10 read


@pytest.fixture(autouse=True)
def _here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.delenv("CKB_DEBUG", raising=False)
    monkeypatch.chdir(ROOT)


@pytest.fixture
def bedrock_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """What --bedrock needs to start: credentials and a region (fake: no call may be made with them)."""
    monkeypatch.delenv("ANTHROPIC_BEDROCK_BASE_URL", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    monkeypatch.setenv("CONTEXT_STRATEGY", "claude")


def test_the_estimate_caches_long_documents_and_bounds_the_rest() -> None:
    cached = paid.estimate_contexts([(10_000, 10)], HAIKU_45, min_cache_tokens=4096, max_output_tokens=160)
    # 10 calls of (1,000 chunk + 180 prompt) tokens and 74 out, the document written once and read 9 times.
    assert cached.usd == pytest.approx((10 * (1180 + 74 * 5) + 10_000 * 1.25 + 9 * 10_000 * 0.1) / 1e6)
    assert cached.most_usd == pytest.approx(10 * (1180 + 10_000 + 160 * 5) / 1e6)
    short = paid.estimate_contexts([(1_000, 4)], HAIKU_45, min_cache_tokens=4096, max_output_tokens=160)
    assert short.usd == pytest.approx(4 * (250 + 180 + 74 * 5 + 1_000) / 1e6) and short.calls == 4
    assert paid.estimate_contexts([], HAIKU_45, min_cache_tokens=4096, max_output_tokens=160).calls == 0


@pytest.mark.benchmark
def test_the_estimate_is_near_what_the_codebase_corpus_cost(codebase: tuple[Path, Path]) -> None:
    """docs/BENCHMARKS.md: the codebase corpus's per-chunk contexts cost $1.75 (737 calls, Haiku 4.5's list
    prices, the stand-in's token counts). The estimate is made before any call, from sizes alone."""
    from contextual_kb.cli.main import _benchmark_sizes

    sizes = _benchmark_sizes(codebase)
    estimate = paid.estimate_contexts(sizes, HAIKU_45, min_cache_tokens=4096, max_output_tokens=160)
    assert estimate.calls == 737
    assert 1.75 * 0.8 <= estimate.usd <= 1.75 * 1.25 and estimate.most_usd > estimate.usd


def test_transform_with_bedrock_shows_the_estimate_and_stops_without_a_yes(bedrock_credentials: None) -> None:
    result = runner.invoke(app, ["transform", str(EVENTS / "markdown" / "event.json"), "--bedrock"])
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert lines[0].startswith("paid: 5 chunk contexts by ") and "on Amazon Bedrock: about $0.0" in lines[0]
    assert lines[1] == (
        "error: paid work not started: standard input is not a terminal to ask for a yes. Pass --yes to go "
        "on (the estimate is above)"
    )
    assert "Transformation summary" not in result.output  # nothing ran


@pytest.mark.benchmark
def test_demo_with_bedrock_counts_the_benchmark_table_too(bedrock_credentials: None) -> None:
    result = runner.invoke(app, ["demo", "--bedrock"])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("paid: 755 chunk contexts by ")  # 18 of the demo, 737 of the benchmark
    alone = runner.invoke(app, ["demo", "--bedrock", "--no-eval"])
    assert alone.stderr.startswith("paid: 18 chunk contexts by ")


def test_a_person_at_a_terminal_is_asked_and_no_stops(
    bedrock_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paid, "_interactive", lambda: True)
    result = runner.invoke(
        app, ["transform", str(EVENTS / "markdown" / "event.json"), "--bedrock"], input="n\n"
    )
    assert result.exit_code == 1 and "Go on? [y/N]" in result.stderr and "aborted" in result.stderr
    assert "Transformation summary" not in result.output


def test_yes_goes_on_after_the_estimate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(paid, "_interactive", lambda: False)
    paid.confirm("something paid", "about $1.00", yes=True)  # no question, no refusal
    monkeypatch.setattr(paid, "_interactive", lambda: True)
    monkeypatch.setattr("typer.confirm", lambda *_a, **_k: True)
    paid.confirm("something paid", "about $1.00", yes=False)
    assert capsys.readouterr().err.count("paid: something paid: about $1.00") == 2


def test_version() -> None:
    """The installed distribution's version, which pyproject.toml and the CHANGELOG state."""
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"ckb {version}"
    assert f"## [{version}]" in (ROOT / "CHANGELOG.md").read_text()


def test_logs_show_the_functions_metrics(tmp_path: Path) -> None:
    """As a user runs it (its own process, the ``ckb`` entry point): every metric the function sends to
    CloudWatch, not only the cold start."""
    ckb = Path(sys.executable).parent / "ckb"
    event = EVENTS / "markdown" / "event.json"
    done = subprocess.run(
        [str(ckb), "transform", str(event), "--strategy", "structural", "--logs"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    names = {
        metric["Name"]
        for line in done.stderr.splitlines()
        if line.startswith('{"_aws"')
        for block in json.loads(line)["_aws"]["CloudWatchMetrics"]
        for metric in block["Metrics"]
    }
    assert {"ChunksIn", "ChunksOut"} <= names, names


@pytest.mark.benchmark
def test_eval_local_with_bedrock_and_claude_asks_first(bedrock_credentials: None) -> None:
    result = runner.invoke(app, ["eval", "--local", "--bedrock", "--strategies", "none,claude"])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("paid: 737 chunk contexts by ")
    assert "Pass --yes to go on" in result.stderr and "P@10" not in result.output
    free = runner.invoke(app, ["eval", "--local", "--bedrock", "--strategies", "none", "--k", "10"])
    assert free.exit_code == 0 and "paid:" not in free.stderr  # no model asked: nothing to pay


def test_a_long_evaluation_reports_its_progress() -> None:
    from contextual_kb.evaluation.offline import evaluate

    said: list[str] = []
    documents = corpus(documents=3)
    queries = [
        {"query": "when is the valve 0-1-0 inspected", "golden_chunk_uuids": [["u0", 1]]},
        {"query": "which pump starts after guide 2", "golden_chunk_uuids": [["u2", 0]]},
    ]
    evaluate(
        documents,
        queries,
        strategies=["none", "structural"],
        analyzers=["index"],
        ks=[5],
        progress=said.append,
    )
    chunks = sum(len(d["chunks"]) for d in documents)
    assert said == [
        f"raw: the handler over 3 documents ({chunks} chunks)",
        "raw: BM25 with the index analysis, 2 queries",
        f"structural: the handler over 3 documents ({chunks} chunks)",
        "structural: BM25 with the index analysis, 2 queries",
    ]
