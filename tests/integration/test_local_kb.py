"""The query side end to end, offline, over real HTTP: the local Knowledge Base (local/knowledge_base.py) in a
local stack (local/stack.py: moto's S3 and CloudFormation, the Bedrock stand-in), reached by ``ckb`` through
the SDK's endpoint variables alone. Ingestion runs the real handler; nothing is stubbed."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from contextual_kb.cli.main import app
from contextual_kb.evaluation.lexical import ANALYZERS
from contextual_kb.local import stack as local
from contextual_kb.local.environment import environment
from contextual_kb.local.knowledge_base import ApiError, compile_filter
from contextual_kb.query import ingestion
from tests.conftest import EVENTS

runner = CliRunner()
KB, DS = local.KNOWLEDGE_BASE_ID, local.DATA_SOURCE_ID


@pytest.fixture(scope="module")
def stack() -> Iterator[local.LocalStack]:
    with (
        environment(CONTEXT_STRATEGY="claude", POWERTOOLS_METRICS_DISABLED="true"),
        local.local_stack(analyzer=ANALYZERS["index"], max_tokens=120) as running,
    ):
        yield running


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ckb sync`` and ``eval --stack`` poll every 5 s; here every 50 ms (the jobs take about a second)."""
    real = time.sleep
    monkeypatch.setattr(ingestion.time, "sleep", lambda seconds: real(min(seconds, 0.05)))


def ckb(*args: str) -> Any:
    return runner.invoke(app, list(args))


def sync_ok() -> Any:
    result = ckb("sync", "--interval", "0.05")
    assert result.exit_code == 0, result.output + result.stderr
    return result


def code_as_text(folder: Path) -> Path:
    """The sample documents with the code file named .txt: a Knowledge Base refuses .py (its supported
    formats), so code goes up as text, as ``ckb eval`` names it."""
    shutil.copytree(EVENTS / "documents", folder)
    (folder / "token_bucket.py").rename(folder / "token_bucket.py.txt")
    return folder


def test_upload_sync_query_ask_through_the_local_knowledge_base(
    stack: local.LocalStack, quick: None, tmp_path: Path
) -> None:
    uploaded = ckb("upload", str(code_as_text(tmp_path / "documents")), "--prefix", "docs/")
    assert uploaded.exit_code == 0, uploaded.output + uploaded.stderr
    assert "uploaded 3 file(s)" in uploaded.output

    synced = sync_ok()
    assert "started ingestion job" in synced.output and "COMPLETE" in synced.output
    stats = latest_job()["statistics"]
    assert stats["numberOfDocumentsScanned"] == 3 and stats["numberOfNewDocumentsIndexed"] == 3

    found = ckb("query", "how does the token bucket refill", "--k", "3", "--json")
    assert found.exit_code == 0, found.output + found.stderr
    results = json.loads(found.output)
    assert (
        len(results) == 3 and results[0]["source"] == f"s3://{local.SOURCE_BUCKET}/docs/token_bucket.py.txt"
    )
    top = results[0]
    # The context the handler wrote (the stand-in model's) and the original chunk, apart.
    assert top["context"].startswith("This chunk is from") and top["context"] not in top["text"]
    assert top["text"] in (EVENTS / "documents" / "token_bucket.py").read_text()
    assert top["rerank_score"] is not None and top["metadata"]["x-amz-bedrock-kb-data-source-id"] == DS

    table = ckb("query", "service availability each calendar month", "--k", "2")
    assert table.exit_code == 0, table.output + table.stderr
    assert "context" in table.output and "chunk" in table.output and "Services" in table.output

    asked = ckb("ask", "how does the token bucket refill?", "--k", "3")
    assert asked.exit_code == 0, asked.output + asked.stderr
    assert "[1] s3://contextual-kb-local-source/docs/token_bucket.py.txt" in asked.output
    assert "(An answer by the Bedrock stand-in's rule, not a model's.)" in asked.output
    assert "[1]" in asked.output.split("\n\n")[0]  # the answer cites its source
    assert stack.knowledge_base.requests["Retrieve"] >= 3 and stack.knowledge_base.requests["Rerank"] >= 3


def test_a_second_sync_skips_what_did_not_change_and_reports_each_failed_document(
    stack: local.LocalStack, quick: None
) -> None:
    s3 = boto3.client("s3")
    s3.put_object(Bucket=local.SOURCE_BUCKET, Key="docs/scan.pdf", Body=b"%PDF-1.7\x00\x01binary")
    s3.put_object(
        Bucket=local.SOURCE_BUCKET, Key="other/notes.md", Body=b"# Notes\n\nOn-call: payments team."
    )
    s3.put_object(
        Bucket=local.SOURCE_BUCKET,
        Key="other/notes.md.metadata.json",
        Body=json.dumps({"metadataAttributes": {"team": "payments", "year": 2026}}).encode(),
    )
    result = ckb("sync", "--interval", "0.05")
    assert result.exit_code == 1  # a document failed
    said = " ".join(result.stderr.split())
    assert "failed: 1 document(s): unsupported file format" in said
    assert "s3://contextual-kb-local-source/docs/scan.pdf" in said
    stats = latest_job()["statistics"]
    assert stats["numberOfNewDocumentsIndexed"] == 1 and stats["numberOfDocumentsFailed"] == 1
    assert stats["numberOfModifiedDocumentsIndexed"] == 0  # the three from before were unchanged

    only = json.dumps(
        {
            "andAll": [
                {"equals": {"key": "team", "value": "payments"}},
                {"greaterThan": {"key": "year", "value": 2025}},
            ]
        }
    )
    filtered = ckb("query", "on-call payments", "--filter", only, "--json")
    assert filtered.exit_code == 0, filtered.output + filtered.stderr
    assert [r["source"] for r in json.loads(filtered.output)] == [
        f"s3://{local.SOURCE_BUCKET}/other/notes.md"
    ]

    s3.delete_object(Bucket=local.SOURCE_BUCKET, Key="docs/scan.pdf")
    s3.delete_object(Bucket=local.SOURCE_BUCKET, Key="other/notes.md")
    sync_ok()
    assert latest_job()["statistics"]["numberOfDocumentsDeleted"] == 2
    gone = ckb("query", "on-call payments", "--filter", only, "--json")
    assert json.loads(gone.output) == []


def test_a_transformation_that_fails_fails_its_document_named(
    stack: local.LocalStack, quick: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXT_STRATEGY", "no-such-strategy")  # the handler refuses its settings
    s3 = boto3.client("s3")
    s3.put_object(Bucket=local.SOURCE_BUCKET, Key="docs/new.md", Body=b"# New\n\nA new page.")
    result = ckb("sync", "--interval", "0.05")
    assert result.exit_code == 1
    said = " ".join(result.stderr.split())
    assert "failed: 1 document(s): the transformation failed" in said
    assert "s3://contextual-kb-local-source/docs/new.md" in said
    monkeypatch.setenv("CONTEXT_STRATEGY", "claude")
    sync_ok()  # the failed document is ingested again, now that the function works
    assert latest_job()["statistics"]["numberOfModifiedDocumentsIndexed"] == 1


def test_errors_are_the_services_own_in_one_line(stack: local.LocalStack) -> None:
    bad = ckb("query", "x", "--filter", '{"in": {"key": "team", "value": "payments"}}')
    assert bad.exit_code == 1
    assert bad.stderr.strip() == (
        "error: Retrieve failed: ValidationException: in takes a list of values (the request was refused as "
        "invalid)"
    )
    # botocore refuses an unknown operator before sending; its message spans lines, ckb's stays one.
    unknown = ckb("query", "x", "--filter", '{"fuzzy": {"key": "a", "value": 1}}')
    assert unknown.exit_code == 1 and len(unknown.stderr.strip().splitlines()) == 1, unknown.stderr
    assert (
        'Unknown parameter in retrievalConfiguration.vectorSearchConfiguration.filter: "fuzzy"'
        in unknown.stderr
    )
    semantic = ckb("query", "x", "--search", "semantic")
    assert "no embedding model" in semantic.stderr and semantic.exit_code == 1
    client = boto3.client("bedrock-agent")
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.get_data_source(knowledgeBaseId="NOSUCHKB00", dataSourceId=DS)


def test_doctor_reads_the_local_stack(stack: local.LocalStack) -> None:
    result = ckb("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(result.output)}
    assert checks["transformation"]["status"] == "ok", checks
    assert checks["function settings"]["status"] == "ok", checks
    assert checks["model"]["status"] == "ok", checks
    assert checks["embedding model"]["status"] == "ok" and checks["reranker"]["status"] == "ok"
    assert checks["intermediate bucket"]["status"] == "ok", checks
    assert checks["quotas"]["status"] == "warn"  # no quota is made up locally: said, not passed
    assert result.exit_code == 0


def test_eval_on_the_stack_runs_offline(stack: local.LocalStack, quick: None, tmp_path: Path) -> None:
    corpus = [
        {
            "original_uuid": f"doc{n}",
            "doc_id": f"doc{n}",
            "content": text,
            "chunks": [{"original_index": 0, "content": text}],
        }
        for n, text in enumerate(
            [
                "The token bucket refills tokens at a steady rate.",
                "Refunds take five business days to reach the card.",
            ]
        )
    ]
    queries = [
        {"query": "how fast does the bucket refill tokens", "golden_chunk_uuids": [["doc0", 0]]},
        {"query": "how long do refunds take", "golden_chunk_uuids": [["doc1", 0]]},
    ]
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries))
    result = ckb(
        "eval",
        "--corpus", str(tmp_path / "corpus.json"),
        "--queries", str(tmp_path / "queries.jsonl"),
        "--state", str(tmp_path / "state.jsonl"),
        "--k", "1,5",
        "--json",
        "--yes",
    )  # fmt: skip
    assert result.exit_code == 0, result.output + result.stderr
    rows = json.loads(result.output[result.output.index("[") :])
    assert {row["retrieval"] for row in rows} == {"hybrid + rerank", "hybrid + no rerank"}
    assert all(row["pass@1"] == 100.0 for row in rows), rows


def test_the_filter_operators(stack: local.LocalStack) -> None:
    metadata = {"team": "payments", "year": 2024, "tags": ["a", "b"], "path": "docs/runbook.md"}
    cases = {
        '{"equals": {"key": "team", "value": "payments"}}': True,
        '{"notEquals": {"key": "team", "value": "payments"}}': False,
        '{"notEquals": {"key": "missing", "value": 1}}': True,
        '{"notIn": {"key": "missing", "value": [1]}}': True,  # as docs/CLI.md says: AWS does not document it
        '{"equals": {"key": "missing", "value": 1}}': False,
        '{"in": {"key": "team", "value": ["search", "payments"]}}': True,
        '{"notIn": {"key": "team", "value": ["search"]}}': True,
        '{"startsWith": {"key": "path", "value": "docs/"}}': True,
        '{"stringContains": {"key": "path", "value": "runbook"}}': True,
        '{"listContains": {"key": "tags", "value": "b"}}': True,
        '{"greaterThan": {"key": "year", "value": 2024}}': False,
        '{"greaterThanOrEquals": {"key": "year", "value": 2024}}': True,
        '{"lessThan": {"key": "team", "value": 3}}': False,  # a string is no number: no match
        json.dumps(
            {
                "orAll": [
                    {"equals": {"key": "team", "value": "x"}},
                    {"lessThanOrEquals": {"key": "year", "value": 2024}},
                ]
            }
        ): True,
    }
    for spec, expected in cases.items():
        assert compile_filter(json.loads(spec))(metadata) is expected, spec
    with pytest.raises(ApiError, match="at least two"):
        compile_filter({"andAll": [{"equals": {"key": "a", "value": 1}}]})


def latest_job() -> dict[str, Any]:
    client = boto3.client("bedrock-agent")
    jobs = client.list_ingestion_jobs(knowledgeBaseId=KB, dataSourceId=DS)["ingestionJobSummaries"]
    return client.get_ingestion_job(
        knowledgeBaseId=KB, dataSourceId=DS, ingestionJobId=jobs[0]["ingestionJobId"]
    )["ingestionJob"]


def test_ckb_local_serves_a_stack_other_processes_use(tmp_path: Path) -> None:
    """``ckb local`` in a child process: the variables it prints are all another process needs."""
    import os
    import subprocess
    import sys

    ckb_path = shutil.which("ckb", path=str(Path(sys.executable).parent))
    assert ckb_path is not None
    child = subprocess.Popen(
        [ckb_path, "local", "--strategy", "structural", "--until-stdin-closes"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        variables = {}
        while "CKB_STACK" not in variables:
            line = child.stdout.readline()
            assert line, child.stderr.read() if child.stderr else "no output"
            name, value = line.removeprefix("export ").strip().split("=", 1)
            variables[name] = value
        assert all(v.startswith("http://127.0.0.1:") for k, v in variables.items() if "ENDPOINT" in k)
        documents = tmp_path / "docs"
        documents.mkdir()
        (documents / "a.md").write_text("# Limits\n\nThe token bucket refills at ten tokens a second.")
        env = {**os.environ, **variables}
        for command in (["upload", str(documents)], ["sync", "--interval", "0.1"]):
            done = subprocess.run(
                [ckb_path, *command], check=False, env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stdout + done.stderr
        done = subprocess.run(
            [ckb_path, "query", "token refill", "--json"],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        (top,) = json.loads(done.stdout)
        assert top["context"].startswith("Document a.md") and top["text"].startswith("# Limits")
    finally:
        from contextual_kb.local.s3server import stop_child

        stop_child(child)


def test_the_demo_ends_with_a_query_through_a_local_knowledge_base(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_BEDROCK_BASE_URL")  # the demo's own stand-in
    result = runner.invoke(app, ["demo", "--show", "0", "--no-eval", "--strategy", "claude"])
    assert result.exit_code == 0, result.output + result.stderr
    query = result.output[result.output.index("query: a local Knowledge Base over HTTP") :]
    # The sync ran the real handler again, which found every context remembered: no second model call.
    assert "COMPLETE: 3 scanned, 3 indexed, 0 failed" in query
    assert "made 0 model calls and found" in " ".join(query.split())
    first = query[query.index("#1 · rerank") :]
    assert "token_bucket.py" in first.splitlines()[0]
    assert "context (the stand-in's" in first and "chunk:" in first


def test_the_demo_never_pays_twice_for_its_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint that may bill (here a custom one) and remembering off: the query's sync would pay for every
    context again, so the demo says so and ends without it."""
    from contextual_kb.local.bedrock_standin import running_standin

    with running_standin() as endpoint:
        monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", endpoint.url)
        monkeypatch.setenv("CONTEXT_MEMORY_PREFIX", "")
        result = runner.invoke(app, ["demo", "--show", "0", "--no-eval", "--strategy", "claude"])
        calls = endpoint.stats.requests
    assert result.exit_code == 0, result.output + result.stderr
    assert "no query at the end: remembering is off" in " ".join(result.output.split())
    assert "query: a local Knowledge Base" not in result.output
    assert calls == 18  # the demo's own contexts, once
