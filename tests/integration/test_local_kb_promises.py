"""Where the local Knowledge Base used to differ silently from Bedrock's (issue 50): typed metadata files,
files Bedrock refuses, the API's length limits, Retrieve's reranking option, one ingestion job per
Knowledge Base. Each through boto3 over HTTP, as a user's code meets ``ckb local``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from contextual_kb.evaluation.lexical import ANALYZERS
from contextual_kb.local import stack as local
from contextual_kb.local.knowledge_base import DataSourceSpec, KnowledgeBaseSpec, LocalKnowledgeBase, running

KB, DS = local.KNOWLEDGE_BASE_ID, local.DATA_SOURCE_ID
# What another SDK (or botocore with validation off) sends: botocore checks no maximum before sending.
UNCHECKED = Config(parameter_validation=False)


@pytest.fixture(scope="module")
def stack() -> Iterator[local.LocalStack]:
    with local.local_stack(analyzer=ANALYZERS["index"], invoke=None) as running_stack:
        yield running_stack


def sync() -> dict[str, Any]:
    agent = boto3.client("bedrock-agent")
    job = agent.start_ingestion_job(knowledgeBaseId=KB, dataSourceId=DS)["ingestionJob"]
    for _ in range(600):
        job = agent.get_ingestion_job(
            knowledgeBaseId=KB, dataSourceId=DS, ingestionJobId=job["ingestionJobId"]
        )["ingestionJob"]
        if job["status"] in {"COMPLETE", "FAILED", "STOPPED"}:
            return job
        time.sleep(0.05)
    raise AssertionError("the job did not end")


def documents() -> dict[str, dict[str, Any]]:
    agent = boto3.client("bedrock-agent")
    details = agent.list_knowledge_base_documents(knowledgeBaseId=KB, dataSourceId=DS)["documentDetails"]
    return {d["identifier"]["s3"]["uri"].rsplit("/", 1)[-1]: d for d in details}


def retrieve(text: str, *, client: Any = None, **vector: Any) -> list[dict[str, Any]]:
    runtime = client or boto3.client("bedrock-agent-runtime")
    config = {"vectorSearchConfiguration": {"numberOfResults": 10, **vector}}
    found = runtime.retrieve(knowledgeBaseId=KB, retrievalQuery={"text": text}, retrievalConfiguration=config)
    return found["retrievalResults"]


def put(key: str, body: bytes | str) -> None:
    boto3.client("s3").put_object(
        Bucket=local.SOURCE_BUCKET, Key=key, Body=body.encode() if isinstance(body, str) else body
    )


def test_a_typed_metadata_file_is_indexed_by_its_values(stack: local.LocalStack) -> None:
    put("typed/ledger.md", "# Ledger\n\nThe ledger reconciles card payments nightly.")
    typed = {
        "team": {"value": {"type": "STRING", "stringValue": "payments"}, "includeForEmbedding": True},
        "year": {"value": {"type": "NUMBER", "numberValue": 2026}, "includeForEmbedding": False},
        "live": {"value": {"type": "BOOLEAN", "booleanValue": True}},
        "tags": {"value": {"type": "STRING_LIST", "stringListValue": ["ledger", "cards"]}},
        "plain": "kept as it is",
    }
    put("typed/ledger.md.metadata.json", json.dumps({"metadataAttributes": typed}))
    put("typed/broken.md", "# Broken\n\nA ledger page whose metadata file names no value.")
    put(
        "typed/broken.md.metadata.json",
        json.dumps({"metadataAttributes": {"team": {"value": {"type": "STRING"}}}}),
    )
    job = sync()
    assert job["status"] == "COMPLETE"
    assert documents()["broken.md"]["status"] == "FAILED"
    assert "stringValue" in documents()["broken.md"]["statusReason"]
    for spec in (
        {"equals": {"key": "team", "value": "payments"}},
        {"greaterThan": {"key": "year", "value": 2025}},
        {"equals": {"key": "live", "value": True}},
        {"listContains": {"key": "tags", "value": "cards"}},
        {"equals": {"key": "plain", "value": "kept as it is"}},
    ):
        found = retrieve("ledger", filter=spec)
        assert [r["location"]["s3Location"]["uri"].rsplit("/", 1)[-1] for r in found] == ["ledger.md"], spec
    (hit,) = retrieve("ledger", filter={"equals": {"key": "team", "value": "payments"}})
    assert hit["metadata"]["team"] == "payments" and hit["metadata"]["tags"] == ["ledger", "cards"]


def test_files_bedrock_refuses_fail_with_the_reason_and_are_not_retrievable(stack: local.LocalStack) -> None:
    put("refused/ratelimit.py", "def refill_the_zebra_bucket():\n    return 'zebra'\n")
    put("refused/big.md", "# Zebra\n\nA zebra page with a large metadata file.")
    put("refused/big.md.metadata.json", json.dumps({"metadataAttributes": {"notes": "z" * 12_000}}))
    put("refused/small.md", "# Zebra crossing\n\nA zebra page with a small metadata file.")
    put("refused/small.md.metadata.json", json.dumps({"metadataAttributes": {"notes": "fine"}}))
    put("refused/", b"")  # a folder's marker, as the S3 console makes one: no document at all
    job = sync()
    assert job["status"] == "COMPLETE"
    listed = documents()
    assert listed["ratelimit.py"]["status"] == "FAILED" and listed["big.md"]["status"] == "FAILED"
    assert (
        ".py" in listed["ratelimit.py"]["statusReason"] and ".txt" in listed["ratelimit.py"]["statusReason"]
    )
    assert "10 KB" in listed["big.md"]["statusReason"]
    assert "" not in listed  # the folder's marker is no document
    assert any("ratelimit.py" in reason for reason in job["failureReasons"]), job["failureReasons"]
    assert any("big.md.metadata.json" in reason for reason in job["failureReasons"]), job["failureReasons"]
    sources = {r["location"]["s3Location"]["uri"].rsplit("/", 1)[-1] for r in retrieve("zebra")}
    assert sources == {"small.md"}


@pytest.mark.parametrize(
    ("call", "where"),
    [
        (lambda rt: retrieve("x" * 20_001, client=rt), "retrievalQuery.text"),
        (lambda rt: retrieve("zebra", client=rt, numberOfResults=101), "numberOfResults"),
        (lambda rt: retrieve("zebra", client=rt, numberOfResults=0), "numberOfResults"),
        (
            lambda rt: retrieve("zebra", client=rt, filter={"equals": {"key": "k" * 101, "value": "v"}}),
            "filter.equals.key",
        ),
        (
            lambda rt: retrieve(
                "zebra",
                client=rt,
                filter={
                    "andAll": [{"equals": {"key": "a", "value": 1}}, {"notIn": {"key": "", "value": [1]}}]
                },
            ),
            "notIn.key",
        ),
        (lambda rt: rerank(rt, ["y" * 32_001]), "textDocument.text"),
        (lambda rt: rerank(rt, ["fine"], query="q" * 32_001), "textQuery.text"),
        (lambda rt: rerank(rt, ["fine"], wanted=1001), "numberOfResults"),
        # A model id where the model's ARN goes: botocore checks no pattern, the service does.
        (
            lambda rt: retrieve(
                "zebra",
                client=rt,
                rerankingConfiguration={
                    "type": "BEDROCK_RERANKING_MODEL",
                    "bedrockRerankingConfiguration": {
                        "modelConfiguration": {"modelArn": "cohere.rerank-v3-5:0"}
                    },
                },
            ),
            "modelConfiguration.modelArn",
        ),
    ],
)
def test_the_api_length_limits_are_validation_errors(stack: local.LocalStack, call: Any, where: str) -> None:
    runtime = boto3.client("bedrock-agent-runtime", config=UNCHECKED)
    with pytest.raises(runtime.exceptions.ValidationException) as refused:  # the class boto3 raises
        call(runtime)
    error = refused.value.response["Error"]
    assert error["Code"] == "ValidationException" and where in error["Message"], error
    assert "failed to satisfy constraint" in error["Message"]


def rerank(runtime: Any, texts: list[str], *, query: str = "zebra", wanted: int | None = None) -> Any:
    config: dict[str, Any] = {
        "modelConfiguration": {"modelArn": "arn:aws:bedrock:us-east-1::foundation-model/cohere.rerank-v3-5:0"}
    }
    if wanted is not None:
        config["numberOfResults"] = wanted
    return runtime.rerank(
        queries=[{"type": "TEXT", "textQuery": {"text": query}}],
        sources=[
            {"type": "INLINE", "inlineDocumentSource": {"type": "TEXT", "textDocument": {"text": t}}}
            for t in texts
        ],
        rerankingConfiguration={"type": "BEDROCK_RERANKING_MODEL", "bedrockRerankingConfiguration": config},
    )


def reranking(model: str, results: int) -> dict[str, Any]:
    return {
        "type": "BEDROCK_RERANKING_MODEL",
        "bedrockRerankingConfiguration": {
            "modelConfiguration": {"modelArn": f"arn:aws:bedrock:us-east-1::foundation-model/{model}"},
            "numberOfRerankedResults": results,
        },
    }


def test_retrieve_applies_its_reranking_configuration(stack: local.LocalStack) -> None:
    put("rerank/a.md", "zebra zebra zebra stripes")
    put("rerank/b.md", "zebra crossing at the corner, a zebra")
    put("rerank/c.md", "a zebra")
    put("rerank/d.md", "zebra herd on the plain")
    assert sync()["status"] == "COMPLETE"
    plain = retrieve("zebra stripes", numberOfResults=4)
    assert len(plain) == 4
    (one,) = retrieve(
        "zebra stripes", numberOfResults=4, rerankingConfiguration=reranking("cohere.rerank-v3-5:0", 1)
    )
    assert one["location"] == plain[0]["location"] and 0 < one["score"] < 1  # the reranker's relevance score
    # amazon.rerank-v1:0 is not offered in us-east-1 (aws-facts.md): refused, as Bedrock refuses it.
    runtime = boto3.client("bedrock-agent-runtime")
    with pytest.raises(runtime.exceptions.ValidationException) as refused:
        retrieve("zebra", client=runtime, rerankingConfiguration=reranking("amazon.rerank-v1:0", 2))
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "us-east-1" in refused.value.response["Error"]["Message"]


def test_one_ingestion_job_at_a_time_per_knowledge_base(stack: local.LocalStack) -> None:
    """A second data source of the same Knowledge Base may not start a job while the first one runs."""
    release = threading.Event()

    def slow(event: dict[str, Any]) -> dict[str, Any]:
        release.wait(timeout=30)
        raise RuntimeError("released")

    s3 = boto3.client("s3")
    for bucket in ("two-sources-a", "two-sources-b", "two-sources-staging"):
        s3.create_bucket(Bucket=bucket)
        if bucket != "two-sources-staging":
            s3.put_object(Bucket=bucket, Key="a.md", Body=b"# A\n\ntext")
    spec = KnowledgeBaseSpec(
        "TWOSOURCES",
        [
            DataSourceSpec("DSA0000001", "two-sources-a", "two-sources-staging"),
            DataSourceSpec("DSB0000001", "two-sources-b", "two-sources-staging"),
        ],
    )
    service = LocalKnowledgeBase(
        [spec], analyzer=ANALYZERS["index"], s3=lambda: boto3.client("s3"), invoke=slow
    )
    with running(service) as kb:
        agent = boto3.client("bedrock-agent", endpoint_url=kb.url)
        agent.start_ingestion_job(knowledgeBaseId="TWOSOURCES", dataSourceId="DSA0000001")
        try:
            with pytest.raises(agent.exceptions.ConflictException) as refused:
                agent.start_ingestion_job(knowledgeBaseId="TWOSOURCES", dataSourceId="DSB0000001")
            assert refused.value.response["Error"]["Code"] == "ConflictException"
            assert "TWOSOURCES" in refused.value.response["Error"]["Message"]
        finally:
            release.set()
        kb.wait_for_jobs()
        agent.start_ingestion_job(knowledgeBaseId="TWOSOURCES", dataSourceId="DSB0000001")  # now it may
        kb.wait_for_jobs()


def test_the_refusals_are_the_ones_ckb_upload_warns_about() -> None:
    from contextual_kb.local import kb_model
    from contextual_kb.query import reprocess, uploads

    assert kb_model.SUPPORTED_SUFFIXES == uploads.SUPPORTED_SUFFIXES
    assert kb_model.METADATA_MAX_BYTES == reprocess.METADATA_MAX_BYTES


def sized(size: int) -> bytes:
    """A valid metadata file of exactly ``size`` bytes."""
    shell = b'{"metadataAttributes": {"n": "%s"}}'
    return shell % (b"q" * (size - len(shell) + 2))


def test_a_metadata_file_it_cannot_read_fails_its_document_not_the_job(stack: local.LocalStack) -> None:
    """Attacks on the metadata file: not JSON, JSON but no object, no metadataAttributes, a NUMBER given a
    string, nested deeper than a parser recurses (under 10 KB: it was a RecursionError that failed the
    whole job, every other document with it), and the 10 KB edge (10,240 bytes read, 10,241 refused). Each
    bad file fails its own document, named in the job's failureReasons; the rest is indexed."""
    bad = {
        "text.md": b"not json at all",
        "list.md": b'[{"metadataAttributes": {}}]',
        "missing.md": b'{"attributes": {"team": "payments"}}',
        "number.md": json.dumps(
            {"metadataAttributes": {"year": {"value": {"type": "NUMBER", "numberValue": "2026"}}}}
        ).encode(),
        "deep.md": b'{"metadataAttributes": {"x": ' + b"[" * 5_000 + b"]" * 5_000 + b"}}",
        "over.md": sized(10_241),
        # A value is a string, number, boolean or list of strings (knowledge-base-ds): no object, no null.
        "object.md": b'{"metadataAttributes": {"x": {"a": [[[[1]]]]}}}',
        "null.md": b'{"metadataAttributes": {"x": null}}',
    }
    edge = sized(10_240)
    assert len(edge) == 10_240 and len(bad["over.md"]) == 10_241 and len(bad["deep.md"]) < 10_240
    for name, sidecar in {**bad, "edge.md": edge}.items():
        put(f"sidecars/{name}", f"# {name}\n\nA quokka page, {name}.")
        put(f"sidecars/{name}.metadata.json", sidecar)
    put("sidecars/fine.md", "# Fine\n\nA quokka page with no metadata file.")
    job = sync()
    assert job["status"] == "COMPLETE", job
    listed = documents()
    for name in bad:
        assert listed[name]["status"] == "FAILED", (name, listed[name])
        assert f"{name}.metadata.json" in listed[name]["statusReason"], listed[name]
        assert any(f"{name}.metadata.json" in reason for reason in job["failureReasons"]), (name, job)
    assert listed["edge.md"]["status"] == "INDEXED" and listed["fine.md"]["status"] == "INDEXED"
    found = {r["location"]["s3Location"]["uri"].rsplit("/", 1)[-1] for r in retrieve("quokka")}
    assert found == {"edge.md", "fine.md"}


def test_a_boolean_and_a_number_are_never_equal(stack: local.LocalStack) -> None:
    """A typed index holds true and 1 in fields of different types: Python's True == 1 matched them."""
    put("kinds/one.md", "# One\n\nA wombat page.")
    typed = {
        "n": {"value": {"type": "NUMBER", "numberValue": 1}},
        "b": {"value": {"type": "BOOLEAN", "booleanValue": True}},
    }
    put("kinds/one.md.metadata.json", json.dumps({"metadataAttributes": typed}))
    assert sync()["status"] == "COMPLETE"
    for spec, hits in (
        ({"equals": {"key": "n", "value": True}}, 0),
        ({"equals": {"key": "b", "value": 1}}, 0),
        ({"in": {"key": "n", "value": [True, "1"]}}, 0),
        ({"notEquals": {"key": "n", "value": True}}, 1),
        ({"notIn": {"key": "b", "value": [1]}}, 1),
        ({"equals": {"key": "n", "value": 1.0}}, 1),  # numbers compare as numbers
        ({"in": {"key": "b", "value": [True]}}, 1),
    ):
        assert len(retrieve("wombat", filter=spec)) == hits, spec


def test_string_contains_finds_a_substring_of_a_list_member(stack: local.LocalStack) -> None:
    """RetrievalFilter's reference (botocore's model): stringContains matches "a list with a member that
    contains the value as a substring"; the stand-in matched a whole member only."""
    put("lists/one.md", "# One\n\nA numbat page.")
    tags = {"tags": {"value": {"type": "STRING_LIST", "stringListValue": ["dog", "cat"]}}}
    put("lists/one.md.metadata.json", json.dumps({"metadataAttributes": tags}))
    assert sync()["status"] == "COMPLETE"
    for spec, hits in (
        ({"stringContains": {"key": "tags", "value": "at"}}, 1),
        ({"stringContains": {"key": "tags", "value": "cow"}}, 0),
        ({"listContains": {"key": "tags", "value": "at"}}, 0),  # listContains: a whole member
        ({"listContains": {"key": "tags", "value": "cat"}}, 1),
    ):
        assert len(retrieve("numbat", filter=spec)) == hits, spec


def test_starts_with_is_refused_on_a_store_other_than_opensearch_serverless() -> None:
    """RetrievalFilter's reference: startsWith "is currently only supported for Amazon OpenSearch Serverless
    vector stores"; an S3 Vectors Knowledge Base took it."""
    spec = KnowledgeBaseSpec("S3VECTORS1", [DataSourceSpec("DSV0000001", "b", "i")], storage="S3_VECTORS")
    service = LocalKnowledgeBase([spec], analyzer=ANALYZERS["index"], s3=lambda: None, invoke=None)
    with running(service) as kb:
        runtime = boto3.client("bedrock-agent-runtime", endpoint_url=kb.url)
        nested = {"orAll": [{"equals": {"key": "a", "value": 1}}, {"startsWith": {"key": "a", "value": "c"}}]}
        with pytest.raises(runtime.exceptions.ValidationException) as refused:
            runtime.retrieve(
                knowledgeBaseId="S3VECTORS1",
                retrievalQuery={"text": "zebra"},
                retrievalConfiguration={"vectorSearchConfiguration": {"filter": nested}},
            )
        assert "startsWith" in refused.value.response["Error"]["Message"]


@pytest.mark.parametrize("token", ["-1", "abc", "1_0"])
def test_a_next_token_it_did_not_give_is_refused(stack: local.LocalStack, token: str) -> None:
    """A token of "-1" was read as a position from the end: a page again, as if it were a real token."""
    agent = boto3.client("bedrock-agent")
    with pytest.raises(agent.exceptions.ValidationException):
        agent.list_knowledge_base_documents(knowledgeBaseId=KB, dataSourceId=DS, nextToken=token)
