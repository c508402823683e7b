"""``ckb eval --local``: retrieval quality on a labelled set with no AWS at all.

Each context strategy runs through the real handler (moto S3 in process; the claude strategy against the
Bedrock stand-in unless ``ANTHROPIC_BEDROCK_BASE_URL`` is set or ``bedrock`` asks for Amazon Bedrock), then
BM25 (bm25s, k1=1.5, b=0.75) indexes the bodies it wrote, with the analysis of the deployed index's text
field (``opensearch-builtin``) or ours (``code-aware``); optionally a local dense model (``dense``) and
hybrid retrieval, the reciprocal rank fusion of the two. Every query is scored against the original chunks.

Input format (the codebase benchmark's): a corpus JSON ``[{doc_id, original_uuid, content, chunks: [{chunk_id,
original_index, content}]}]`` and queries JSONL ``{query, golden_chunk_uuids: [[doc_uuid, chunk_index]]}``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextual_kb.evaluation.metrics import (
    RRF_K,
    Difference,
    Scores,
    paired_difference,
    reciprocal_rank_fusion,
    score,
)
from contextual_kb.evaluation.naming import DocumentNameError, document_keys, source_uri
from contextual_kb.local.inputs import InputFileError, read_json, read_jsonl

if TYPE_CHECKING:
    from contextual_kb.local.model_endpoint import ModelEndpoint

BUCKET = "ckb-eval-intermediate"
CHUNKS_PER_BATCH = 8
ChunkId = tuple[str, int]


CORPUS = (
    "a corpus: [{original_uuid, content, chunks: [{original_index, content}]}] (the codebase benchmark's)"
)
QUERIES = "labelled queries, one JSON object a line: {query, golden_chunk_uuids: [[doc_uuid, index]]}"


def load_corpus(path: Path) -> list[dict[str, Any]]:
    documents = read_json(path, CORPUS)
    if not isinstance(documents, list) or not all(
        isinstance(d, dict) and "chunks" in d and "original_uuid" in d for d in documents
    ):
        raise InputFileError(f"{path}: not the expected shape; expected {CORPUS}")
    try:
        document_keys(documents)  # both eval paths name each document so: said here, before any work
    except DocumentNameError as exc:
        raise InputFileError(f"{path}: {exc}") from None
    return documents


def load_queries(path: Path) -> list[dict[str, Any]]:
    queries = read_jsonl(path, QUERIES)
    for number, query in enumerate(queries, 1):
        if not isinstance(query, dict) or "query" not in query or "golden_chunk_uuids" not in query:
            raise InputFileError(f"{path}:{number}: not the expected shape; expected {QUERIES}")
    return queries


def stage_corpus(s3: Any, bucket: str, documents: Sequence[dict[str, Any]]) -> list[Any]:
    """Each document as one file whose chunks sit in batch objects, as the KB would stage them; each under
    the key ``ckb eval --stack`` uploads it as (``naming.document_key``), so the handler reads the same path
    on both paths."""
    from contextual_kb.local.kb_staging import stage_file

    return [
        stage_file(
            s3,
            bucket,
            source_uri(key),
            [c["content"] for c in doc["chunks"]],
            chunks_per_batch=CHUNKS_PER_BATCH,
        )
        for doc, key in zip(documents, document_keys(documents), strict=True)
    ]


@dataclass(frozen=True, slots=True)
class ModelUse:
    """What a model-backed row really measured: where its calls went, and how many chunks fell back."""

    endpoint: str  # "stand-in", "custom endpoint" or "Bedrock"
    calls: int
    chunks: int
    fallbacks: dict[str, int]

    @property
    def fell_back(self) -> int:
        return sum(self.fallbacks.values())

    @property
    def mostly_fallback(self) -> bool:
        """Most chunks got the structural context: the row measures that, not the model's contexts."""
        return 2 * self.fell_back > self.chunks

    def as_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "model_calls": self.calls,
            "fallbacks": dict(self.fallbacks),
            "mostly_fallback": self.mostly_fallback,
        }


def contextualized_bodies(
    documents: list[dict[str, Any]], strategy: str, endpoint: ModelEndpoint | None = None
) -> tuple[dict[ChunkId, str], ModelUse | None]:
    """(doc uuid, chunk index) -> the body the real handler wrote, with ``strategy``; and, for a model-backed
    strategy, what the model did (from the handler's summary line)."""
    import boto3
    from moto import mock_aws

    from contextual_kb.local import runner
    from contextual_kb.local.environment import handler_environment
    from contextual_kb.local.kb_staging import build_event

    bodies: dict[ChunkId, str] = {}
    with handler_environment(CONTEXT_STRATEGY=strategy), mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        staged = stage_corpus(s3, BUCKET, documents)
        # runner.invoke keeps the handler's logs and metrics off our stdout, and reads the outputs back.
        result = runner.invoke(build_event(BUCKET, staged))
        model = result.summary().get("model")
        use = (
            ModelUse(
                endpoint.kind if endpoint is not None else "Bedrock",
                int(model.get("calls", 0)),
                int(result.summary().get("chunks_in", 0)),
                {str(k): int(v) for k, v in (model.get("fallbacks") or {}).items()},
            )
            if strategy == "claude" and isinstance(model, dict)
            else None
        )
        for doc, produced in zip(documents, result.response["outputFiles"], strict=True):
            refs = produced["contentBatches"]
            items = [item for ref in refs for item in result.after[ref["key"]].file_contents]
            for chunk, item in zip(doc["chunks"], items, strict=True):
                bodies[(doc["original_uuid"], chunk["original_index"])] = item.content_body
    return bodies, use


@dataclass(frozen=True, slots=True)
class Row:
    chunks: str  # raw, or the strategy's name
    retrieval: str  # e.g. "bm25 opensearch-builtin", "dense minilm", "hybrid code-aware+minilm"
    scores: Scores
    model: ModelUse | None = None  # for a model-backed strategy: what its contexts really were

    def as_dict(self) -> dict[str, Any]:
        out = {"chunks": self.chunks, "retrieval": self.retrieval, **self.scores.as_dict()}
        return out | (self.model.as_dict() if self.model is not None else {})


def versus_raw(rows: Sequence[Row], k: int) -> list[Difference | None]:
    """Per row, its Pass@k minus that of the raw chunks under the same retrieval (None for raw rows, or
    where no raw row has that retrieval): what the context bought, with its 95% interval. Pure."""
    raw = {row.retrieval: row.scores for row in rows if row.chunks == "raw"}
    return [
        paired_difference(raw[row.retrieval], row.scores, k)
        if row.chunks != "raw" and row.retrieval in raw
        else None
        for row in rows
    ]


RETRIEVALS = ("bm25", "dense", "hybrid")
FUSION_DEPTH = 100  # each side of a hybrid ranks this many; the KB's hybrid search also fuses a top 100


def _ids(documents: list[dict[str, Any]]) -> list[ChunkId]:
    return [(d["original_uuid"], c["original_index"]) for d in documents for c in d["chunks"]]


def _originals(documents: list[dict[str, Any]]) -> dict[ChunkId, str]:
    return {(d["original_uuid"], c["original_index"]): c["content"] for d in documents for c in d["chunks"]}


def bm25_rankings(
    documents: list[dict[str, Any]],
    queries: list[dict[str, Any]],
    bodies: dict[ChunkId, str],
    analyzer: str,
    depth: int,
) -> list[list[int]]:
    """Per query, the indices (in corpus order) of the ``depth`` best chunks by BM25 (k1=1.5, b=0.75)."""
    texts = [bodies[i] for i in _ids(documents)]
    return rank_bm25(texts, [q["query"] for q in queries], analyzer, depth)


def rank_bm25(texts: Sequence[str], queries: Sequence[str], analyzer: str, depth: int) -> list[list[int]]:
    """Per query, the indices of the ``depth`` best ``texts`` by BM25 (k1=1.5, b=0.75) with ``analyzer``."""
    import bm25s

    from contextual_kb.evaluation.lexical import ANALYZERS

    tokenize = ANALYZERS[analyzer]
    retriever = bm25s.BM25(k1=1.5, b=0.75)
    retriever.index([tokenize(text) for text in texts], show_progress=False)
    vocabulary = retriever.vocab_dict
    depth = min(depth, len(texts))
    rankings = []
    for query in queries:
        tokens = [t for t in tokenize(query) if t in vocabulary] or [next(iter(vocabulary))]
        found, _ = retriever.retrieve([tokens], k=depth, show_progress=False)
        rankings.append([int(i) for i in found[0]])
    return rankings


def dense_rankings(
    documents: list[dict[str, Any]], queries: list[dict[str, Any]], bodies: dict[ChunkId, str], depth: int
) -> list[list[int]]:
    from contextual_kb.evaluation.dense import MiniLm, rank

    original = _originals(documents)
    pairs = []
    for i in _ids(documents):
        body, chunk = bodies[i], original[i]
        # The handler writes the context, then the chunk unchanged; the context is what comes before it.
        context = body[: len(body) - len(chunk)].strip() if body.endswith(chunk) else ""
        pairs.append((context, chunk))
    return rank(MiniLm(), pairs, [q["query"] for q in queries], min(depth, len(pairs)))


def scored(
    documents: list[dict[str, Any]],
    queries: list[dict[str, Any]],
    rankings: Sequence[Sequence[int]],
    ks: Sequence[int],
) -> Scores:
    ids, original = _ids(documents), _originals(documents)
    runs = []
    for query, ranking in zip(queries, rankings, strict=True):
        retrieved = [original[ids[i]] for i in ranking[: max(ks)]]
        golden = [original[(uuid, index)] for uuid, index in query["golden_chunk_uuids"]]
        runs.append((golden, retrieved))
    return score(runs, ks)


def bm25_scores(
    documents: list[dict[str, Any]],
    queries: list[dict[str, Any]],
    bodies: dict[ChunkId, str],
    analyzer: str,
    ks: Sequence[int],
) -> Scores:
    rankings = bm25_rankings(documents, queries, bodies, analyzer, max(ks))
    return scored(documents, queries, rankings, ks)


def evaluate(
    documents: list[dict[str, Any]],
    queries: list[dict[str, Any]],
    *,
    strategies: Sequence[str],
    analyzers: Sequence[str],
    ks: Sequence[int],
    retrievals: Sequence[str] = ("bm25",),
    rrf_k: int = RRF_K,
    endpoint: ModelEndpoint | None = None,
    bedrock: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Row]:
    """One row per (strategy, retrieval): BM25 once per analyzer, dense once, hybrid (RRF of BM25 and dense)
    once per analyzer. The claude strategy calls ``endpoint`` when given, else what ``model_endpoint`` picks
    (the local stand-in unless ``bedrock`` or ANTHROPIC_BEDROCK_BASE_URL)."""
    unknown = set(retrievals) - set(RETRIEVALS)
    if unknown:
        raise ValueError(f"unknown retrieval {sorted(unknown)}; choose from {', '.join(RETRIEVALS)}")
    if "claude" in strategies and endpoint is None:
        from contextual_kb.local.model_endpoint import model_endpoint

        with model_endpoint(bedrock=bedrock) as started:
            return evaluate(
                documents,
                queries,
                strategies=strategies,
                analyzers=analyzers,
                ks=ks,
                retrievals=retrievals,
                rrf_k=rrf_k,
                endpoint=started,
                progress=progress,
            )
    depth = max(*ks, FUSION_DEPTH if "hybrid" in retrievals else 0)
    wants_lexical, wants_dense = (
        bool({"bm25", "hybrid"} & set(retrievals)),
        bool({"dense", "hybrid"} & set(retrievals)),
    )
    rows = []
    chunks = sum(len(d["chunks"]) for d in documents)
    for strategy in strategies:
        name = "raw" if strategy == "none" else strategy
        progress(f"{name}: the handler over {len(documents):,} documents ({chunks:,} chunks)")
        bodies, model = contextualized_bodies(documents, strategy, endpoint)
        lexical = {}
        for analyzer in analyzers if wants_lexical else ():
            progress(f"{name}: BM25 with the {analyzer} analysis, {len(queries):,} queries")
            lexical[analyzer] = bm25_rankings(documents, queries, bodies, analyzer, depth)
        if wants_dense:
            progress(f"{name}: dense embeddings")
        dense = dense_rankings(documents, queries, bodies, depth) if wants_dense else []
        if "bm25" in retrievals:
            for analyzer, rankings in lexical.items():
                rows.append(Row(name, f"bm25 {analyzer}", scored(documents, queries, rankings, ks), model))
        if "dense" in retrievals:
            rows.append(Row(name, "dense minilm", scored(documents, queries, dense, ks), model))
        if "hybrid" in retrievals:
            for analyzer, rankings in lexical.items():
                fused = [reciprocal_rank_fusion(pair, rrf_k) for pair in zip(rankings, dense, strict=True)]
                rows.append(
                    Row(name, f"hybrid {analyzer}+minilm", scored(documents, queries, fused, ks), model)
                )
    return rows
