"""`ckb eval` against a deployed Knowledge Base (stubbed): upload once, sync, query, score, resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from typer.testing import CliRunner

from contextual_kb.cli.main import app
from contextual_kb.evaluation.metrics import mostly_within
from tests.integration.test_kb_cli import (
    ANY_LIST_REQUEST,
    ANY_RERANK,
    ANY_RETRIEVE,
    BUCKET,
    DS,
    GET_REQUEST,
    KB,
    REGION,
    Clients,
    aws,  # noqa: F401 - the fixture
    job,
    outputs,
)

runner = CliRunner()
GOLDEN = {
    "u0": "def refill(self, now): elapsed = now - self.updated_at; self.tokens += elapsed * self.rate",
    "u1": "Retry provider calls at most three times with exponential backoff and jitter between attempts.",
}


def corpus_files(tmp_path: Path) -> tuple[Path, Path]:
    documents = [
        {"doc_id": d, "original_uuid": d, "content": text, "chunks": [{"original_index": 0, "content": text}]}
        for d, text in GOLDEN.items()
    ]
    corpus, queries = tmp_path / "corpus.json", tmp_path / "queries.jsonl"
    corpus.write_text(json.dumps(documents))
    queries.write_text(
        "\n".join(
            json.dumps({"query": q, "golden_chunk_uuids": [[d, 0]]})
            for q, d in (("how are tokens refilled", "u0"), ("how many retries", "u1"))
        )
    )
    return corpus, queries


def other(doc: str) -> str:
    return "u1" if doc == "u0" else "u0"


def kb_hit(text: str) -> dict[str, Any]:
    return {
        "content": {"text": f"Some context.\n\nIntro line. {text} Trailing line.", "type": "TEXT"},
        "location": {"type": "S3", "s3Location": {"uri": "s3://b/x.txt"}},
        "score": 0.5,
        "metadata": {"ckb_context": "Some context."},
    }


def test_mostly_within_matches_a_golden_chunk_inside_a_larger_kb_chunk() -> None:
    assert mostly_within(GOLDEN["u0"], f"before {GOLDEN['u0']} after")
    assert not mostly_within(GOLDEN["u0"], GOLDEN["u1"])
    assert mostly_within("short one", "a short one here") and not mostly_within("short one", "other")


def test_eval_against_the_deployed_kb_uploads_once_scores_and_resumes(
    aws: Clients,  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    corpus, queries = corpus_files(tmp_path)
    state = tmp_path / "state.jsonl"
    agent, runtime = aws.stubs["bedrock-agent"], aws.stubs["bedrock-agent-runtime"]
    agent.add_response("list_ingestion_jobs", {"ingestionJobSummaries": []}, ANY_LIST_REQUEST)
    agent.add_response("start_ingestion_job", job("STARTING"), {"knowledgeBaseId": KB, "dataSourceId": DS})
    agent.add_response("get_ingestion_job", job("COMPLETE", numberOfDocumentsScanned=2), GET_REQUEST)
    for golden in ("u0", "u1"):  # with the reranker
        hits = {
            "retrievalResults": [kb_hit(GOLDEN["u1" if golden == "u0" else "u0"]), kb_hit(GOLDEN[golden])]
        }
        runtime.add_response("retrieve", hits, ANY_RETRIEVE)
        runtime.add_response(
            "rerank",
            {"results": [{"index": 1, "relevanceScore": 0.9}, {"index": 0, "relevanceScore": 0.1}]},
            ANY_RERANK,
        )
    for golden in ("u0", "u1"):  # without: the golden chunk second
        hits = {
            "retrievalResults": [kb_hit(GOLDEN["u1" if golden == "u0" else "u0"]), kb_hit(GOLDEN[golden])]
        }
        runtime.add_response("retrieve", hits, ANY_RETRIEVE)
    args = ["eval", "--corpus", str(corpus), "--queries", str(queries), "--k", "1,2", "--region", REGION]
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        # Paid work: the estimate first; no terminal to ask on and no --yes: nothing uploaded, nothing synced.
        refused = runner.invoke(app, [*args, "--state", str(state), "--json"])
        assert refused.exit_code == 1, refused.output
        said = " ".join(refused.stderr.split())
        assert (
            said.startswith("paid: 2 chunk contexts by ")
            and "plus the embeddings of the corpus and 4 " in said
        )
        assert "Pass --yes to go on" in said and "Contents" not in s3.list_objects_v2(Bucket=BUCKET)
        aws.stubs["cloudformation"].add_response("describe_stacks", outputs(), {"StackName": "ContextualKb"})
        result = runner.invoke(app, [*args, "--state", str(state), "--json", "--yes"])
        assert result.exit_code == 0, result.output
        assert sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]) == [
            "ckb-eval/u0.txt",
            "ckb-eval/u1.txt",
        ]
        rows = json.loads(result.stdout[result.stdout.index("[") :])
        reranked, plain = rows
        assert (reranked["retrieval"], reranked["pass@1"], reranked["mrr"]) == (
            "hybrid + rerank",
            100.0,
            100.0,
        )
        assert (plain["retrieval"], plain["pass@1"], plain["pass@2"]) == ("hybrid + no rerank", 0.0, 100.0)
        assert plain["mrr"] == 50.0
        for stub in aws.stubs.values():
            stub.assert_no_pending_responses()
        # A rerun: nothing uploaded again, no query sent again (the state file answers), no sync.
        aws.stubs["cloudformation"].add_response("describe_stacks", outputs(), {"StackName": "ContextualKb"})
        again = runner.invoke(app, [*args, "--state", str(state), "--skip-sync", "--json", "--yes"])
        assert again.exit_code == 0, again.output
        assert "0 of 2 document(s) uploaded" in again.stdout
        assert json.loads(again.stdout[again.stdout.index("[") :]) == rows


def test_eval_reports_an_upload_failure_in_one_line(
    aws: Clients,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    corpus, queries = corpus_files(tmp_path)
    args = ["eval", "--corpus", str(corpus), "--queries", str(queries), "--region", REGION]
    with mock_aws():  # the source bucket does not exist: S3 answers NoSuchBucket
        result = runner.invoke(app, [*args, "--state", str(tmp_path / "state.jsonl"), "--yes"])
    assert result.exit_code == 1
    line = " ".join(result.output.split())
    assert "error: PutObject failed: NoSuchBucket" in line and f"(bucket {BUCKET})" in line
    assert "NoSuchBucket" in result.output and "Traceback" not in result.output
