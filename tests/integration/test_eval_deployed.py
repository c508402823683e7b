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
        rows = json.loads(result.stdout)  # JSON alone: the upload line is on stderr
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
        assert "0 of 2 document(s) uploaded (2 already there" in again.stderr
        assert json.loads(again.stdout) == rows


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


def stub_queries(aws: Clients, *, reranked: bool = True, plain: bool = True) -> None:  # noqa: F811
    """Both queries answered with the reranker and without, the golden chunk first."""
    runtime = aws.stubs["bedrock-agent-runtime"]
    for golden in ("u0", "u1") if reranked else ():
        runtime.add_response("retrieve", {"retrievalResults": [kb_hit(GOLDEN[golden])]}, ANY_RETRIEVE)
        runtime.add_response("rerank", {"results": [{"index": 0, "relevanceScore": 0.9}]}, ANY_RERANK)
    for golden in ("u0", "u1") if plain else ():
        runtime.add_response("retrieve", {"retrievalResults": [kb_hit(GOLDEN[golden])]}, ANY_RETRIEVE)


FUNCTION = "ContextualKb-TransformFunction-abc"


def with_function(aws: Clients, environment: dict[str, str] | None) -> None:  # noqa: F811
    """The stack names its function; GetFunctionConfiguration answers ``environment`` (None: denied)."""
    from botocore.stub import Stubber

    described = outputs()
    described["Stacks"][0]["Outputs"].append({"OutputKey": "TransformFunctionName", "OutputValue": FUNCTION})
    aws.stubs["cloudformation"].add_response("describe_stacks", described, {"StackName": "ContextualKb"})
    if "lambda" not in aws.clients:
        aws.clients["lambda"] = boto3.client("lambda", region_name=REGION)
        aws.stubs["lambda"] = Stubber(aws.clients["lambda"])
        aws.stubs["lambda"].activate()
    if environment is None:
        aws.stubs["lambda"].add_client_error("get_function_configuration", "AccessDeniedException", "no", 403)
    else:
        aws.stubs["lambda"].add_response(
            "get_function_configuration",
            {"FunctionName": FUNCTION, "Environment": {"Variables": environment}},
            {"FunctionName": FUNCTION},
        )


def scores(result: Any) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_eval_resumes_past_cut_off_and_malformed_state_lines(
    aws: Clients,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    """A state line cut off by a kill, one not UTF-8, one not an object and malformed entries are skipped and
    counted, never fatal and never scored: their queries are asked again; the entry after a cut-off line is
    written on a line of its own."""
    corpus, queries = corpus_files(tmp_path)
    state = tmp_path / "state.jsonl"
    stub_queries(aws)  # the stack's outputs: the fixture's
    args = ["eval", "--corpus", str(corpus), "--queries", str(queries), "--k", "1,2", "--region", REGION]
    with mock_aws():
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        first = scores(runner.invoke(app, [*args, "--state", str(state), "--skip-sync", "--json", "--yes"]))
        lines = state.read_text().splitlines()
        assert len(lines) == 4
        good = json.loads(lines[0])  # u0's query, reranked
        forged = {**good, "retrieved": GOLDEN["u1"]}  # a string, not a list: would be scored as characters
        state.write_bytes(
            b"\n".join(
                [
                    json.dumps(forged).encode(),
                    b"\xff\xfe not utf-8",
                    b"[1, 2]",
                    json.dumps({**json.loads(lines[1]), "depth": "2"}).encode(),
                    lines[2].encode(),
                    lines[3].encode(),
                    lines[0][: len(lines[0]) // 2].encode(),  # cut off mid-write, no newline
                ]
            )
        )
        aws.stubs["cloudformation"].add_response("describe_stacks", outputs(), {"StackName": "ContextualKb"})
        stub_queries(aws, plain=False)  # both reranked queries asked again; the unreranked ones are kept
        rerun = runner.invoke(app, [*args, "--state", str(state), "--skip-sync", "--json", "--yes"])
        assert scores(rerun) == first
        note = " ".join(rerun.stderr.split())
        assert (
            f"note: 5 line(s) of {state} skipped (cut off, or not a state entry: line(s) 1, 2, 3, 4, 7)"
            in note
        )
        for stub in aws.stubs.values():
            stub.assert_no_pending_responses()
        written = state.read_bytes().split(b"\n")
        assert written[6] == lines[0][: len(lines[0]) // 2].encode()  # the cut line left alone
        assert all(json.loads(line) for line in written[7:] if line)  # the new entries whole


def test_eval_state_is_keyed_by_the_corpus_and_the_functions_settings(
    aws: Clients,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    corpus, queries = corpus_files(tmp_path)
    state = tmp_path / "state.jsonl"
    args = ["eval", "--corpus", str(corpus), "--queries", str(queries), "--k", "1,2", "--region", REGION]
    args += ["--state", str(state), "--skip-sync", "--json", "--yes"]
    aws.stubs["cloudformation"].deactivate()  # with_function queues its own answers
    aws.stubs["cloudformation"] = stubber = type(aws.stubs["cloudformation"])(aws.clients["cloudformation"])
    stubber.activate()
    with mock_aws():
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        structural = {"CONTEXT_STRATEGY": "structural"}
        with_function(aws, structural)
        stub_queries(aws)
        scores(runner.invoke(app, args))
        with_function(aws, structural)  # the same: nothing asked again
        scores(runner.invoke(app, args))
        with_function(aws, {"CONTEXT_STRATEGY": "claude"})  # another strategy: all asked again
        stub_queries(aws)
        scores(runner.invoke(app, args))
        documents = json.loads(corpus.read_text())
        documents[0]["content"] += "\n# edited"
        corpus.write_text(json.dumps(documents))
        with_function(aws, {"CONTEXT_STRATEGY": "claude"})  # another corpus: all asked again
        stub_queries(aws)
        scores(runner.invoke(app, args))
        with_function(aws, None)  # unknown settings: said, and kept apart from known ones
        stub_queries(aws)
        unknown = runner.invoke(app, args)
        scores(unknown)
        assert "the function's settings are not known" in " ".join(unknown.stderr.split())
        for stub in aws.stubs.values():
            stub.assert_no_pending_responses()
