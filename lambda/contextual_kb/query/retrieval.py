"""Retrieve wide, then rerank: the query side of contextual retrieval.

A query goes to the Knowledge Base's Retrieve API for up to ``candidates`` chunks (HYBRID search where the
vector store supports it: vectors + BM25 over the contextualized text), optionally filtered on metadata;
then the Rerank API orders them by relevance, reading each candidate's context and original text, and the
top ``k`` come back. Each result carries the original chunk, its context (split using the context metadata
key the transformation writes), its source, its metadata and both scores.

Rerank takes at most ``RERANK_TEXT_MAX_CHARS`` characters a document (API reference, RerankTextDocument;
botocore's model: text 1-32,000), and one document over it fails the whole call with ValidationException.
A chunk may be longer (``chunkMaxTokens`` and hierarchical parents up to 8,192 tokens): what Rerank reads is
cut to the limit (context first, then the chunk's opening), said in a notice, and the result still carries
the whole chunk. The model reads less than that anyway (Cohere Rerank 3.5: a 4K-token window).

Retries with backoff on throttling are the SDK's (standard mode); an error that remains is raised as a
``RetrievalError`` whose message says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from contextual_kb.runtime.enrichment import BODY_SEPARATOR, ELLIPSIS

SearchType = Literal["HYBRID", "SEMANTIC"]
# knowledgeBaseConfiguration.type (bedrock-agent's KnowledgeBaseConfiguration). Retrieve takes a VECTOR or
# KENDRA Knowledge Base's settings in vectorSearchConfiguration (KENDRA: Kendra runs its own search, so no
# overrideSearchType), a MANAGED one's in managedSearchConfiguration (vectorSearchConfiguration refused); a
# SQL one answers with rows of a generated SQL query, not passages to rerank: refused here in one line.
KNOWLEDGE_BASE_TYPES = ("VECTOR", "MANAGED", "KENDRA", "SQL")
RERANKERS: dict[str, tuple[str, ...]] = {
    # Regions offering each reranker (../shared/notes/aws-facts.md).
    "cohere.rerank-v3-5:0": ("us-east-1", "us-west-2", "eu-central-1", "ap-northeast-1", "ca-central-1"),
    "amazon.rerank-v1:0": ("us-west-2", "eu-central-1", "ap-northeast-1", "ca-central-1"),
}
DEFAULT_RERANKER = "cohere.rerank-v3-5:0"
MAX_CANDIDATES = 100  # Retrieve's numberOfResults limit
RERANK_TEXT_MAX_CHARS = 32_000  # Rerank's textDocument.text and textQuery.text: 1-32,000 characters
CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 6}, connect_timeout=5, read_timeout=60)
_HINTS = {
    "AccessDeniedException": "check the caller's IAM permissions and the model access granted in the Bedrock "
    "console (and the Cohere Rerank Marketplace subscription for cohere.rerank-v3-5:0)",
    "ResourceNotFoundException": "check the knowledge base id and the region",
    "ThrottlingException": "Bedrock kept throttling after the SDK's retries; try again or raise the quota",
    "ValidationException": "the request was refused as invalid",
}


class RetrievalError(Exception):
    """A query failed; the message names the API, the error and what to do."""


@dataclass(frozen=True, slots=True)
class Result:
    text: str  # the original chunk
    context: str  # what the transformation put in front of it ("" when none)
    source: str  # the source document's URI
    metadata: dict[str, Any]
    retrieval_score: float
    rerank_score: float | None = None
    rank: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "source": self.source,
            "context": self.context,
            "text": self.text,
            "retrieval_score": self.retrieval_score,
            "rerank_score": self.rerank_score,
            "metadata": self.metadata,
        }


@dataclass
class Retriever:
    knowledge_base_id: str
    region: str
    reranker: str | None = DEFAULT_RERANKER  # None: retrieval order
    search_type: SearchType = "HYBRID"
    context_metadata_key: str = "ckb_context"
    client: Any = None  # bedrock-agent-runtime
    notices: list[str] = field(default_factory=list)  # said once per retriever, e.g. a search-type change
    kind: str = "VECTOR"  # the Knowledge Base's type (KNOWLEDGE_BASE_TYPES)
    user_id: str | None = None  # Retrieve's userContext: for data sources with per-document access control

    def __post_init__(self) -> None:
        if self.kind == "SQL":
            raise RetrievalError(
                f"knowledge base {self.knowledge_base_id} is a SQL (structured data) Knowledge Base: Bedrock "
                "answers it with rows of a SQL query it writes (RetrieveAndGenerate, GenerateQuery), not "
                "passages to rerank; query a VECTOR, MANAGED or KENDRA Knowledge Base"
            )
        if self.kind not in KNOWLEDGE_BASE_TYPES:
            raise RetrievalError(
                f"knowledge base {self.knowledge_base_id} is of type {self.kind}, which this version does "
                f"not know ({', '.join(KNOWLEDGE_BASE_TYPES)})"
            )
        if self.reranker is not None and self.reranker not in RERANKERS:
            raise RetrievalError(f"unknown reranker {self.reranker}; choose {', '.join(RERANKERS)} or none")
        if self.reranker is not None and self.region not in RERANKERS[self.reranker]:
            raise RetrievalError(
                f"reranker {self.reranker} is not offered in {self.region}; it is in "
                f"{', '.join(RERANKERS[self.reranker])} (or query without reranking)"
            )
        if self.client is None:
            self.client = boto3.client("bedrock-agent-runtime", region_name=self.region, config=CLIENT_CONFIG)

    @property
    def search_name(self) -> str:
        """What searched: hybrid or semantic (VECTOR), managed (MANAGED), kendra (KENDRA)."""
        return self.search_type.lower() if self.kind == "VECTOR" else self.kind.lower()

    def use_semantic_only(self, why: str) -> None:
        """The vector store has no lexical side (S3 Vectors): say so once, and ask for what it does."""
        if self.search_type == "HYBRID":
            self.search_type = "SEMANTIC"
            self.notices.append(f"semantic search only: {why}")

    def search(
        self,
        query: str,
        *,
        k: int = 20,
        candidates: int = MAX_CANDIDATES,
        filter: dict[str, Any] | None = None,
    ) -> list[Result]:
        if not query.strip():
            raise RetrievalError("the query is empty")
        if not 1 <= k <= MAX_CANDIDATES:
            raise RetrievalError(f"k must be between 1 and {MAX_CANDIDATES}")
        found = self._retrieve(query, max(k, min(candidates, MAX_CANDIDATES)), filter)
        if not found or self.reranker is None:
            return [_ranked(r, i) for i, r in enumerate(found[:k], 1)]
        return self._rerank(query, found, k)

    def _retrieve(self, query: str, count: int, filter: dict[str, Any] | None) -> list[Result]:
        search: dict[str, Any] = {"numberOfResults": count}
        if self.kind == "VECTOR":
            search["overrideSearchType"] = self.search_type
        if filter:
            search["filter"] = filter
        key = "managedSearchConfiguration" if self.kind == "MANAGED" else "vectorSearchConfiguration"
        request = {
            "knowledgeBaseId": self.knowledge_base_id,
            "retrievalQuery": {"text": query},
            "retrievalConfiguration": {key: search},
        }
        if self.user_id:
            request["userContext"] = {"userId": self.user_id}
        results: list[Result] = []
        skipped: list[str] = []
        while True:
            response = self._call("Retrieve", self.client.retrieve, **request)
            for item in response.get("retrievalResults", []):
                kind = str((item.get("content") or {}).get("type") or "TEXT")
                if kind != "TEXT":  # IMAGE, AUDIO, VIDEO, ROW: no text to read or rerank
                    skipped.append(kind)
                    continue
                results.append(self._result(item))
            token = response.get("nextToken")
            if not token or len(results) >= count:
                if skipped:
                    self.notices.append(
                        f"{len(skipped)} non-text results left out ({', '.join(sorted(set(skipped)))}): only "
                        "text is read and reranked"
                    )
                return results[:count]
            request["nextToken"] = token

    def _rerank(self, query: str, found: list[Result], k: int) -> list[Result]:
        model_arn = f"arn:aws:bedrock:{self.region}::foundation-model/{self.reranker}"
        texts = [rerank_text(_body(r)) for r in found]
        cut = sum(1 for r, text in zip(found, texts, strict=True) if text != _body(r) and _body(r))
        if cut:
            self.notices.append(
                f"{cut} of {len(found)} candidates were cut to Rerank's {RERANK_TEXT_MAX_CHARS:,} characters "
                "for reranking (the results carry them whole)"
            )
        request: dict[str, Any] = {
            "queries": [{"type": "TEXT", "textQuery": {"text": rerank_text(query)}}],
            "sources": [
                {
                    "type": "INLINE",
                    "inlineDocumentSource": {"type": "TEXT", "textDocument": {"text": text}},
                }
                for text in texts
            ],
            "rerankingConfiguration": {
                "type": "BEDROCK_RERANKING_MODEL",
                "bedrockRerankingConfiguration": {
                    "numberOfResults": min(k, len(found)),
                    "modelConfiguration": {"modelArn": model_arn},
                },
            },
        }
        ordered: list[tuple[int, float]] = []
        while True:
            response = self._call("Rerank", self.client.rerank, **request)
            ordered.extend(
                (item["index"], float(item["relevanceScore"])) for item in response.get("results", [])
            )
            token = response.get("nextToken")
            if not token:
                break
            request["nextToken"] = token
        out = []
        for rank, (index, score) in enumerate(ordered[:k], 1):
            base = found[index]
            out.append(
                Result(base.text, base.context, base.source, base.metadata, base.retrieval_score, score, rank)
            )
        return out

    def _call(self, api: str, method: Any, **request: Any) -> dict[str, Any]:
        try:
            return method(**request)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "Unknown")
            message = exc.response.get("Error", {}).get("Message", "")
            hint = _HINTS.get(code, "")
            raise RetrievalError(
                f"{api} failed: {code}: {message}" + (f" ({hint})" if hint else "")
            ) from None

    def _result(self, item: dict[str, Any]) -> Result:
        body = item.get("content", {}).get("text", "")
        metadata = dict(item.get("metadata") or {})
        context, text = split_context(body, metadata.get(self.context_metadata_key))
        return Result(
            text=text,
            context=context,
            source=_location(item.get("location") or {}),
            metadata=metadata,
            retrieval_score=float(item.get("score") or 0.0),
        )


def split_context(body: str, context: Any) -> tuple[str, str]:
    """(context, original chunk) from the indexed body = context + blank line + chunk."""
    if not isinstance(context, str) or not context:
        return "", body
    if body.startswith(context + BODY_SEPARATOR):
        return context, body[len(context) + len(BODY_SEPARATOR) :]
    if context.endswith(ELLIPSIS):  # the metadata copy was capped: the body has the whole context
        prefix = context[: -len(ELLIPSIS)]
        cut = body.find(BODY_SEPARATOR, len(prefix)) if body.startswith(prefix) else -1
        if cut >= 0:
            return body[:cut], body[cut + len(BODY_SEPARATOR) :]
    return "", body


def rerank_text(text: str, limit: int = RERANK_TEXT_MAX_CHARS) -> str:
    """``text`` as Rerank takes it: at most ``limit`` characters, counted as UTF-16 code units (the larger
    count: a character outside the BMP is two, and the service's own count is not documented), never a
    half surrogate pair; an empty text (Rerank refuses length 0) is one space. Pure."""
    if not text:
        return " "
    if len(text) <= limit // 2 or len(text.encode("utf-16-le")) // 2 <= limit:
        return text
    units = 0
    for i, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return text[:i]
    return text


def _body(result: Result) -> str:
    return f"{result.context}{BODY_SEPARATOR}{result.text}" if result.context else result.text


def _location(location: dict[str, Any]) -> str:
    for value in location.values():
        if isinstance(value, dict):
            uri = value.get("uri") or value.get("url")
            if isinstance(uri, str):
                return uri
    return str(location.get("type", ""))


def _ranked(result: Result, rank: int) -> Result:
    return Result(
        result.text, result.context, result.source, result.metadata, result.retrieval_score, None, rank
    )
