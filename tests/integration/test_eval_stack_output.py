"""``ckb eval`` against a stack says exactly what it measured: its ``--json`` is JSON alone on stdout (run
as a user runs it, against ``ckb local`` in another process), an option it cannot apply is refused in one
line, and the legend and notes name only what the table shows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextual_kb.cli.main import app
from contextual_kb.evaluation.metrics import score
from contextual_kb.evaluation.offline import Row

runner = CliRunner()
DOCUMENTS = {
    "limits/bucket.py": "# Token bucket\n\nThe token bucket refills at ten tokens a second, to its capacity.",
    "ops/retries.md": "# Retries\n\nRetry provider calls at most three times with exponential backoff.",
}


def ckb_path() -> str:
    found = shutil.which("ckb", path=str(Path(sys.executable).parent))
    assert found is not None
    return found


@pytest.fixture
def ckb_local() -> Iterator[dict[str, str]]:
    """``ckb local`` in a child process; the environment that points a client at it."""
    from contextual_kb.local.s3server import stop_child

    child = subprocess.Popen(
        [ckb_path(), "local", "--strategy", "structural", "--until-stdin-closes"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        variables: dict[str, str] = {}
        while "CKB_STACK" not in variables:
            line = child.stdout.readline()
            assert line, child.stderr.read() if child.stderr else "no output"
            if line.startswith("export "):
                name, value = line.removeprefix("export ").strip().split("=", 1)
                variables[name] = value
        yield {**os.environ, **variables}
    finally:
        stop_child(child)


def corpus_files(tmp_path: Path) -> list[str]:
    documents = [
        {
            "doc_id": name,
            "original_uuid": f"u{n}",
            "content": text,
            "chunks": [{"original_index": 0, "content": text}],
        }
        for n, (name, text) in enumerate(DOCUMENTS.items())
    ]
    (tmp_path / "corpus.json").write_text(json.dumps(documents))
    (tmp_path / "queries.jsonl").write_text(
        "\n".join(
            json.dumps({"query": q, "golden_chunk_uuids": [[u, 0]]})
            for q, u in (("token bucket refill rate", "u0"), ("exponential backoff retries", "u1"))
        )
    )
    return ["--corpus", str(tmp_path / "corpus.json"), "--queries", str(tmp_path / "queries.jsonl")]


def test_eval_stack_json_is_json_alone_against_ckb_local(ckb_local: dict[str, str], tmp_path: Path) -> None:
    state = str(tmp_path / "state.jsonl")
    args = [ckb_path(), "eval", *corpus_files(tmp_path), "--k", "1,2", "--yes", "--state", state]
    done = subprocess.run(
        [*args, "--json"], env=ckb_local, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(done.stdout)  # the whole of stdout: no human line before or after the rows
    assert [row["retrieval"] for row in rows] == ["hybrid + rerank", "hybrid + no rerank"]
    assert all(row["pass@2"] == 100.0 for row in rows), rows
    said = " ".join(done.stderr.split())
    assert "2 document(s) uploaded" in said and "already there" not in said and "the rest" not in said
    # What the rows measured, on stderr: the KB's own chunks as its data source made them, how a golden
    # chunk is matched, and what ckb local's search and rerank are.
    assert "deployed KB: the Knowledge Base's own chunks (fixed-size, 300 tokens, 20% overlap)" in said
    assert "at least half of its word 5-grams" in said
    assert "ckb local: its HYBRID search is BM25 alone" in said
    # Every object went up as .txt (what Bedrock parses as plain text), the name kept for matching.
    listed = subprocess.run(
        [ckb_path(), "eval", *corpus_files(tmp_path), "--k", "1,2", "--yes", "--skip-sync", "--state", state],
        env={**ckb_local, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    table = " ".join(listed.stdout.split())
    assert "0 of 2 document(s) uploaded (2 already there with the same content)" in table
    assert "rerank: its Rerank of the top candidates" in table
    assert "index:" not in table and "builtin:" not in table  # no legend for rows not shown
    assert "ckb local: its HYBRID search is BM25 alone" in table


def test_the_upload_goes_as_text_objects_a_knowledge_base_parses(tmp_path: Path) -> None:
    """Code documents (``.py``) go up as ``.txt`` (Bedrock refuses ``.py``), the name kept in the key."""
    import boto3
    from moto import mock_aws

    from contextual_kb.evaluation.deployed import upload_corpus

    documents = json.loads(Path(corpus_files(tmp_path)[1]).read_text())
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="eval-source")
        assert upload_corpus(s3, "eval-source", documents) == 2
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="eval-source")["Contents"])
    assert keys == ["ckb-eval/limits_bucket.py.txt", "ckb-eval/ops_retries.md.txt"]


@pytest.mark.parametrize(
    ("given", "named"),
    [
        (
            ["--strategies", "none", "--analyzers", "plain", "--retrieval", "dense"],
            "--strategies, --analyzers, --retrieval",
        ),
        (["--engine", "python"], "--engine"),
        (["--rrf-k", "10", "--bedrock"], "--rrf-k, --bedrock"),
        (["--chunk-tokens", "200"], "--chunk-tokens"),
    ],
)
def test_offline_only_options_against_a_stack_are_refused_in_one_line(given: list[str], named: str) -> None:
    result = runner.invoke(app, ["eval", *given, "--yes"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {named}: offline only (ckb eval --local)"), line
    assert line.endswith("Add --local, or drop them")


def test_stack_options_with_local_are_refused_and_ckb_locals_variable_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = runner.invoke(app, ["eval", "--local", "--skip-sync", "--state", "x.jsonl"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line == "error: --state, --skip-sync: against a deployed stack only, not with --local. Drop them"
    monkeypatch.setenv("CKB_STACK", "ContextualKb")  # what ckb local exports: not the user's option
    given = corpus_files(tmp_path)
    fine = runner.invoke(app, ["eval", "--local", *given, "--strategies", "none", "--analyzers", "index"])
    assert fine.exit_code == 0, fine.output


def test_the_legend_names_only_what_the_table_shows() -> None:
    from contextual_kb.cli.evaluate import legend

    scores = score([(["a"], ["a"])], [1])
    deployed = [Row("deployed KB", f"hybrid + {name}", scores) for name in ("rerank", "no rerank")]
    text = legend(deployed)
    assert "rerank: its Rerank" in text and "index:" not in text and "builtin:" not in text
    offline = legend([Row("raw", "bm25 index", scores), Row("raw", "bm25 code-aware", scores)])
    assert "index: BM25 with the deployed index's analysis" in offline and "code-aware:" in offline
    assert "builtin:" not in offline and "minilm" not in offline and "rerank" not in offline
    assert "offline rows: the corpus's own chunks, a golden chunk found by its exact text" in offline
    assert "offline rows" not in text


def test_the_upload_line_and_the_notes_hold_for_every_count() -> None:
    from contextual_kb.cli.evaluate import deployed_notes, uploaded_line

    assert uploaded_line(90, 90) == "90 document(s) uploaded"
    assert uploaded_line(0, 90) == "0 of 90 document(s) uploaded (90 already there with the same content)"
    assert uploaded_line(30, 90) == "30 of 90 document(s) uploaded (60 already there with the same content)"
    on_aws = deployed_notes("fixed-size, 300 tokens, 20% overlap", local_stack=False)
    assert len(on_aws) == 1 and "ckb local" not in on_aws[0]
