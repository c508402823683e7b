"""Retrieve and rerank against botocore's Stubber: the exact request shapes, pagination, errors."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import ANY, Stubber

from contextual_kb.query.retrieval import RetrievalError, Retriever, split_context

KB = "KBID123456"
REGION = "us-east-1"
ANYTHING = {"queries": ANY, "sources": ANY, "rerankingConfiguration": ANY}
COHERE_ARN = "arn:aws:bedrock:us-east-1::foundation-model/cohere.rerank-v3-5:0"


def runtime_client(max_attempts: int = 3) -> Any:
    config = Config(retries={"mode": "standard", "max_attempts": max_attempts})
    return boto3.client("bedrock-agent-runtime", region_name=REGION, config=config)


def hit(n: int, *, context: str = "") -> dict[str, Any]:
    body = f"{context}\n\nchunk {n} text" if context else f"chunk {n} text"
    metadata: dict[str, Any] = {"x-amz-bedrock-kb-source-uri": f"s3://src/doc{n}.md"}
    if context:
        metadata["ckb_context"] = context
    return {
        "content": {"text": body, "type": "TEXT"},
        "location": {"type": "S3", "s3Location": {"uri": f"s3://src/doc{n}.md"}},
        "score": 1.0 - n / 100,
        "metadata": metadata,
    }


def retrieve_request(count: int = 100, search: str = "HYBRID", filter: dict[str, Any] | None = None) -> dict:
    vector: dict[str, Any] = {"numberOfResults": count, "overrideSearchType": search}
    if filter:
        vector["filter"] = filter
    return {
        "knowledgeBaseId": KB,
        "retrievalQuery": {"text": "how do retries work"},
        "retrievalConfiguration": {"vectorSearchConfiguration": vector},
    }


def test_retrieve_wide_then_rerank_the_context_and_text_to_the_top_k() -> None:
    client = runtime_client()
    hits = [hit(i, context=f"Context {i}.") for i in range(5)]
    with Stubber(client) as stub:
        stub.add_response("retrieve", {"retrievalResults": hits}, retrieve_request())
        stub.add_response(
            "rerank",
            {"results": [{"index": 3, "relevanceScore": 0.9}, {"index": 0, "relevanceScore": 0.5}]},
            {
                "queries": [{"type": "TEXT", "textQuery": {"text": "how do retries work"}}],
                "sources": [
                    {
                        "type": "INLINE",
                        "inlineDocumentSource": {
                            "type": "TEXT",
                            "textDocument": {"text": f"Context {i}.\n\nchunk {i} text"},
                        },
                    }
                    for i in range(5)
                ],
                "rerankingConfiguration": {
                    "type": "BEDROCK_RERANKING_MODEL",
                    "bedrockRerankingConfiguration": {
                        "numberOfResults": 2,
                        "modelConfiguration": {"modelArn": COHERE_ARN},
                    },
                },
            },
        )
        results = Retriever(KB, REGION, client=client).search("how do retries work", k=2)
        stub.assert_no_pending_responses()
    assert [(r.rank, r.text, r.context, r.source, r.rerank_score) for r in results] == [
        (1, "chunk 3 text", "Context 3.", "s3://src/doc3.md", 0.9),
        (2, "chunk 0 text", "Context 0.", "s3://src/doc0.md", 0.5),
    ]
    assert results[0].retrieval_score == pytest.approx(0.97)
    assert results[0].metadata["ckb_context"] == "Context 3."


def test_rerank_pages_are_followed() -> None:
    client = runtime_client()
    with Stubber(client) as stub:
        stub.add_response("retrieve", {"retrievalResults": [hit(i) for i in range(3)]}, retrieve_request())
        first = {"results": [{"index": 2, "relevanceScore": 0.8}], "nextToken": "t1"}
        stub.add_response("rerank", first, ANYTHING)
        second = {"results": [{"index": 1, "relevanceScore": 0.4}]}
        stub.add_response("rerank", second, {"nextToken": "t1", **ANYTHING})
        results = Retriever(KB, REGION, client=client).search("how do retries work", k=3)
        stub.assert_no_pending_responses()
    assert [r.text for r in results] == ["chunk 2 text", "chunk 1 text"]


def test_no_results_and_no_rerank_call() -> None:
    client = runtime_client()
    with Stubber(client) as stub:
        stub.add_response("retrieve", {"retrievalResults": []}, retrieve_request())
        assert Retriever(KB, REGION, client=client).search("how do retries work") == []
        stub.assert_no_pending_responses()


def test_without_reranking_the_retrieval_order_is_kept_and_semantic_and_filter_are_sent() -> None:
    client = runtime_client()
    condition = {"equals": {"key": "team", "value": "payments"}}
    with Stubber(client) as stub:
        stub.add_response(
            "retrieve",
            {"retrievalResults": [hit(i) for i in range(4)]},
            retrieve_request(count=100, search="SEMANTIC", filter=condition),
        )
        retriever = Retriever(KB, REGION, reranker=None, client=client)
        retriever.use_semantic_only("S3 Vectors has no lexical index")
        retriever.use_semantic_only("said once")
        results = retriever.search("how do retries work", k=2, filter=condition)
    assert [r.text for r in results] == ["chunk 0 text", "chunk 1 text"]
    assert all(r.rerank_score is None for r in results)
    assert retriever.notices == ["semantic search only: S3 Vectors has no lexical index"]


def test_throttling_is_retried_by_the_sdk() -> None:
    """Over HTTP (Stubber answers before the SDK's retry logic): a 429, then an answer."""
    answers = [
        (429, {"x-amzn-ErrorType": "ThrottlingException"}, {"message": "slow down"}),
        (200, {}, {"retrievalResults": [hit(1)]}),
    ]
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(self.path)
            status, headers, body = answers.pop(0)
            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = boto3.client(
            "bedrock-agent-runtime",
            region_name=REGION,
            endpoint_url=f"http://127.0.0.1:{server.server_address[1]}",
            config=Config(retries={"mode": "standard", "max_attempts": 3}),
        )
        results = Retriever(KB, REGION, reranker=None, client=client).search("how do retries work")
    finally:
        server.shutdown()
        server.server_close()
    assert [r.text for r in results] == ["chunk 1 text"]
    assert seen == [f"/knowledgebases/{KB}/retrieve"] * 2


@pytest.mark.parametrize(
    ("code", "status", "hint"),
    [
        ("AccessDeniedException", 403, "Cohere Rerank Marketplace subscription"),
        ("ResourceNotFoundException", 404, "check the knowledge base id"),
        ("ValidationException", 400, "refused as invalid"),
    ],
)
def test_errors_say_what_to_do(code: str, status: int, hint: str) -> None:
    client = runtime_client(max_attempts=1)
    with Stubber(client) as stub:
        stub.add_client_error("retrieve", code, "the service says no", status)
        with pytest.raises(RetrievalError, match=f"Retrieve failed: {code}: the service says no.*{hint}"):
            Retriever(KB, REGION, client=client).search("how do retries work")


def test_a_reranker_not_offered_in_the_region_names_the_regions_that_have_it() -> None:
    with pytest.raises(
        RetrievalError, match=r"amazon.rerank-v1:0 is not offered in us-east-1; it is in us-west-2"
    ):
        Retriever(KB, "us-east-1", reranker="amazon.rerank-v1:0", client=object())
    with pytest.raises(RetrievalError, match="unknown reranker"):
        Retriever(KB, "us-east-1", reranker="acme.rerank", client=object())


def test_bad_queries_are_refused_before_any_call() -> None:
    retriever = Retriever(KB, REGION, client=object())
    with pytest.raises(RetrievalError, match="empty"):
        retriever.search("  ")
    with pytest.raises(RetrievalError, match="k must be"):
        retriever.search("q", k=0)


@pytest.mark.parametrize(
    ("body", "context", "expected"),
    [
        ("Ctx.\n\nchunk", "Ctx.", ("Ctx.", "chunk")),
        ("chunk only", None, ("", "chunk only")),
        ("A long context here.\n\nchunk", "A long…", ("A long context here.", "chunk")),
        ("unrelated body", "Ctx.", ("", "unrelated body")),
    ],
)
def test_split_context(body: str, context: str | None, expected: tuple[str, str]) -> None:
    assert split_context(body, context) == expected


def test_non_text_results_are_left_out_and_named_by_their_type() -> None:
    """A multimodal Knowledge Base answers with IMAGE, AUDIO and VIDEO results too: none is text to read or
    rerank, so each is left out, and the notice names the types (it said "images" for audio and video)."""
    client = runtime_client()
    audio = {
        **hit(8),
        "content": {"type": "AUDIO", "audio": {"s3Uri": "s3://m/a.mp3", "transcription": "hello"}},
    }
    image = {**hit(9), "content": {"type": "IMAGE", "byteContent": "data:image/png;base64,AA=="}}
    with Stubber(client) as stub:
        found = {"retrievalResults": [image, hit(0), audio, hit(1)]}
        stub.add_response("retrieve", found, retrieve_request())
        retriever = Retriever(KB, REGION, reranker=None, client=client)
        results = retriever.search("how do retries work", k=5)
    assert [r.text for r in results] == ["chunk 0 text", "chunk 1 text"]
    assert retriever.notices == ["2 non-text results left out (AUDIO, IMAGE): only text is read and reranked"]
