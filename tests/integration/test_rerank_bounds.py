"""One long chunk must not fail a query: Rerank takes at most 32,000 characters a document (API reference,
RerankTextDocument; botocore's model) and refuses the whole call over it. A 34,000-character candidate
(context + chunk, reachable with chunks of 8,192 tokens) goes through ``ckb query``, ``ckb ask`` and the MCP
server's ``query`` and ``ask`` (the ``mcp`` SDK's client over stdio) against the local Knowledge Base, whose
Rerank here refuses as Bedrock does; each answers, and the result carries the whole chunk."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from mcp import Client
from typer.testing import CliRunner

from contextual_kb.cli.main import app
from contextual_kb.evaluation.lexical import ANALYZERS
from contextual_kb.local import knowledge_base as local_kb
from contextual_kb.local import stack as local
from contextual_kb.local.environment import environment
from contextual_kb.query.ingestion import Ingestion
from contextual_kb.query.retrieval import RERANK_TEXT_MAX_CHARS, rerank_text
from tests.integration.test_mcp import server, text_of

QUESTION = "how does the token bucket refill"
WORDS = "the token bucket refills at a steady rate and each call takes one token from it".split()


def long_document() -> str:
    # About 7,700 words: one chunk of 8,192 tokens, over 32,000 characters.
    return "# Rate limits\n\n" + " ".join(f"{WORDS[i % len(WORDS)]}{i % 7}" for i in range(7_700)) + "\n"


def refusing_rerank(original: Any) -> Any:
    """The local Rerank, refusing a document over Bedrock's limit with Bedrock's error."""

    def rerank(self: Any, body: dict[str, Any], region: str) -> dict[str, Any]:
        for n, source in enumerate(body.get("sources") or [], 1):
            text = source["inlineDocumentSource"]["textDocument"]["text"]
            if not 1 <= len(text) <= RERANK_TEXT_MAX_CHARS:
                raise local_kb.ApiError(
                    400,
                    "ValidationException",
                    f"1 validation error detected: Value at 'sources.{n}.member.inlineDocumentSource."
                    "textDocument.text' failed to satisfy constraint: Member must have length less than or "
                    f"equal to {RERANK_TEXT_MAX_CHARS}",
                )
        return original(self, body, region)

    return rerank


@pytest.fixture(scope="module")
def stack() -> Iterator[local.LocalStack]:
    with (
        pytest.MonkeyPatch.context() as patch,
        environment(CONTEXT_STRATEGY="claude", POWERTOOLS_METRICS_DISABLED="true"),
        local.local_stack(analyzer=ANALYZERS["index"], max_tokens=8192, overlap_percentage=0) as running,
    ):
        patch.setattr(
            local_kb.LocalKnowledgeBase, "rerank", refusing_rerank(local_kb.LocalKnowledgeBase.rerank)
        )
        s3 = boto3.client("s3")
        s3.put_object(Bucket=local.SOURCE_BUCKET, Key="docs/limits.md", Body=long_document().encode())
        s3.put_object(
            Bucket=local.SOURCE_BUCKET,
            Key="docs/short.md",
            Body=b"# Buckets\n\nA token bucket refills over time; a leaky bucket drains.\n",
        )
        ingestion = Ingestion(local.KNOWLEDGE_BASE_ID, local.DATA_SOURCE_ID, local.REGION)
        job = list(ingestion.follow(ingestion.start(), interval=0.05))[-1]
        assert job.status == "COMPLETE" and job.statistics["numberOfNewDocumentsIndexed"] == 2
        yield running


def whole(result: dict[str, Any]) -> bool:
    return result["source"].endswith("docs/limits.md") and len(result["text"]) > RERANK_TEXT_MAX_CHARS


def test_ckb_query_and_ask_answer_over_a_long_candidate(stack: local.LocalStack) -> None:
    runner = CliRunner()
    queried = runner.invoke(app, ["query", QUESTION, "--k", "2", "--json"])
    assert queried.exit_code == 0, queried.stderr
    results = json.loads(queried.stdout)
    (long,) = [r for r in results if r["source"].endswith("docs/limits.md")]
    assert whole(long) and long["context"] and len(long["context"]) + len(long["text"]) > 34_000
    assert long["rerank_score"] is not None
    assert "1 of 2 candidates were cut to Rerank's 32,000 characters" in queried.stderr

    asked = runner.invoke(app, ["ask", QUESTION, "--k", "2"])
    assert asked.exit_code == 0, asked.stderr
    assert "[1]" in asked.stdout and "docs/limits.md" in asked.stdout


def test_the_mcp_tools_answer_over_a_long_candidate(stack: local.LocalStack) -> None:
    async def session() -> tuple[Any, Any]:
        async with Client(server(stack)) as client:
            return (
                await client.call_tool("query", {"query": QUESTION, "k": 2}),
                await client.call_tool("ask", {"question": QUESTION, "k": 2}),
            )

    queried, asked = asyncio.run(session())
    assert not queried.is_error and not asked.is_error, (text_of(queried), text_of(asked))
    found = queried.structured_content
    assert any(whole(r) for r in found["results"])
    assert any("cut to Rerank's" in n for n in found["notices"])
    assert any(s["source"].endswith("docs/limits.md") for s in asked.structured_content["sources"])
    assert any("cut to Rerank's" in n for n in asked.structured_content["notices"])


def test_rerank_text_counts_as_bedrock_may_and_never_splits_a_pair() -> None:
    assert rerank_text("") == " "
    assert rerank_text("a" * 32_000) == "a" * 32_000
    assert rerank_text("a" * 34_898) == "a" * 32_000
    emoji = "\U0001f600" * 20_000  # 40,000 UTF-16 code units
    cut = rerank_text(emoji)
    assert cut == "\U0001f600" * 16_000 and len(cut.encode("utf-16-le")) // 2 == 32_000
    assert rerank_text("a" + emoji)[-1] == "\U0001f600" and len(rerank_text("a" + emoji)) == 16_000
