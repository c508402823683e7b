"""``ckb eval --local --chunkers``: chunker against chunker, whatever chunks each makes.

Pass@k needs the dataset's own chunks; another chunker's chunks never equal them. So each corpus document is
ingested whole, as a data source with chunking NONE hands it over, chunked by the chunker under test, given
structural contexts by the real handler, and indexed with BM25. A query's golden chunk counts as found at k
by the share of its non-blank characters that the top-k chunks cover (in its document); a query scores the
mean over its golden chunks. Reported: that share averaged over queries (Cov@k), and the share of queries
covered at least half (Half@k), x100.

Chunkers: ``fixed``, the KB's fixed-size chunking with 20% overlap (``local.kb_chunking``), and
``structure``, ours (``CHUNKING=structure``). Bigger chunks cover more text by themselves, so chunkers are
compared at the same average chunk length: the fixed size is chosen so that its chunks' average length is
the closest to ours (and within 10% of it, or the table says so).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from contextual_kb.evaluation.metrics import Difference, Scores, paired_difference
from contextual_kb.evaluation.naming import document_keys, source_uri
from contextual_kb.local.environment import handler_environment
from contextual_kb.local.kb_chunking import fixed_size_spans

CHUNKERS = ("fixed", "structure")
FIXED_OVERLAP_PERCENTAGE = 20
LENGTH_TOLERANCE = 0.10  # chunkers compared at average chunk lengths within 10% of each other
BUCKET = "ckb-eval-chunkers"
ChunkId = tuple[str, int]
Span = tuple[str, int, int]  # (document uuid, start, end)


@dataclass(frozen=True, slots=True)
class Chunked:
    """One chunker's chunks over the corpus: where each lies, and what was indexed (context + chunk)."""

    chunker: str
    setting: str
    spans: list[Span]
    bodies: list[str]

    @property
    def average_chars(self) -> float:
        return sum(end - start for _, start, end in self.spans) / max(1, len(self.spans))


@dataclass(frozen=True, slots=True)
class Coverage:
    coverage_at: dict[int, float]  # x100: the covered share of golden chunks, averaged over queries
    half_at: dict[int, float]  # x100: queries whose golden chunks are covered at least half
    queries: int
    # Each query's covered share (0-1) at each k, in the order scored: what a paired comparison reads.
    per_query: dict[int, tuple[float, ...]] = field(default_factory=dict, repr=False, compare=False)

    def as_scores(self) -> Scores:
        """As retrieval scores (coverage in the place of Pass@k), for ``metrics.paired_difference``."""
        return Scores(self.coverage_at, self.half_at, 0.0, self.queries, self.per_query)


@dataclass(frozen=True, slots=True)
class ChunkerRow:
    chunker: str
    setting: str
    chunks: int
    average_chars: float
    retrieval: str
    scores: Coverage
    matched: bool = True  # the average length is within LENGTH_TOLERANCE of the reference chunker's

    def as_dict(self) -> dict[str, Any]:
        return {
            "chunker": self.chunker,
            "setting": self.setting,
            "chunks": self.chunks,
            "average_chars": round(self.average_chars, 1),
            "length_matched": self.matched,
            "retrieval": self.retrieval,
            **{f"coverage@{k}": round(v, 2) for k, v in self.scores.coverage_at.items()},
            **{f"half@{k}": round(v, 2) for k, v in self.scores.half_at.items()},
            "queries": self.scores.queries,
        }


# --- scoring (pure) ---------------------------------------------------------------------------------------


def golden_spans(documents: Sequence[dict[str, Any]]) -> dict[ChunkId, Span]:
    """Where each of the dataset's chunks lies in its document (the content is its chunks joined)."""
    spans: dict[ChunkId, Span] = {}
    for doc in documents:
        content, position = doc["content"], 0
        for chunk in doc["chunks"]:
            text = chunk["content"]
            start = content.find(text, position) if text else position
            if start < 0:  # not where the join would put it: anywhere (whitespace normalised upstream)
                start = max(0, content.find(text))
            spans[(doc["original_uuid"], chunk["original_index"])] = (
                doc["original_uuid"],
                start,
                start + len(text),
            )
            position = start + len(text)
    return spans


class NonBlank:
    """Non-blank characters of a document's ranges, by prefix sums."""

    def __init__(self, documents: Sequence[dict[str, Any]]) -> None:
        self._sums: dict[str, list[int]] = {}
        for doc in documents:
            sums = [0]
            for character in doc["content"]:
                sums.append(sums[-1] + (not character.isspace()))
            self._sums[doc["original_uuid"]] = sums

    def count(self, uuid: str, start: int, end: int) -> int:
        sums = self._sums[uuid]
        return sums[min(end, len(sums) - 1)] - sums[max(0, min(start, len(sums) - 1))]


def covered_share(golden: Span, retrieved: Sequence[Span], blank: NonBlank) -> float:
    """The share of ``golden``'s non-blank characters inside the union of the ``retrieved`` spans."""
    uuid, start, end = golden
    total = blank.count(uuid, start, end)
    if total == 0:
        return 0.0
    pieces = sorted(
        (max(s, start), min(e, end)) for u, s, e in retrieved if u == uuid and s < end and e > start
    )
    covered, reach = 0, start
    for piece_start, piece_end in pieces:
        begin = max(piece_start, reach)
        if piece_end > begin:
            covered += blank.count(uuid, begin, piece_end)
            reach = piece_end
    return covered / total


def score_coverage(
    golden: Sequence[Sequence[Span]],
    rankings: Sequence[Sequence[int]],
    spans: Sequence[Span],
    blank: NonBlank,
    ks: Sequence[int],
) -> Coverage:
    """Per query: its golden spans, and the indices into ``spans`` of the chunks retrieved, best first."""
    shares: dict[int, list[float]] = {k: [] for k in ks}
    for wanted, ranking in zip(golden, rankings, strict=True):
        for k in ks:
            top = [spans[i] for i in ranking[:k]]
            per_chunk = [covered_share(g, top, blank) for g in wanted]
            shares[k].append(sum(per_chunk) / len(per_chunk) if per_chunk else 0.0)
    count = len(golden)
    return Coverage(
        {k: 100 * sum(v) / max(1, count) for k, v in shares.items()},
        {k: 100 * sum(1 for s in v if s >= 0.5) / max(1, count) for k, v in shares.items()},
        count,
        {k: tuple(v) for k, v in shares.items()},
    )


def versus_fixed(rows: Sequence[ChunkerRow], k: int) -> list[Difference | None]:
    """Per row of ours, its Cov@k minus the fixed-size row's under the same retrieval, paired over queries
    (None for the fixed rows, or without one). Pure."""
    fixed = {row.retrieval: row.scores.as_scores() for row in rows if row.chunker == "fixed"}
    return [
        paired_difference(fixed[row.retrieval], row.scores.as_scores(), k)
        if row.chunker != "fixed" and row.retrieval in fixed
        else None
        for row in rows
    ]


def matching_fixed_size(documents: Sequence[dict[str, Any]], target_chars: float) -> int:
    """The fixed size (tokens, 20% overlap) whose chunks' average length is the closest to ``target_chars``:
    the average grows with the size, so a bisection over sizes finds it."""

    def average(size: int) -> float:
        lengths = [
            end - start
            for doc in documents
            for start, end in fixed_size_spans(
                doc["content"], max_tokens=size, overlap_percentage=FIXED_OVERLAP_PERCENTAGE
            )
        ]
        return sum(lengths) / max(1, len(lengths))

    low, high = 5, 8192
    while low < high:
        middle = (low + high) // 2
        if average(middle) < target_chars:
            low = middle + 1
        else:
            high = middle
    candidates = [size for size in (low - 1, low) if size >= 5]
    return min(candidates, key=lambda size: abs(average(size) - target_chars))


# --- chunking through the real handler --------------------------------------------------------------------


def chunk_by_structure(
    documents: Sequence[dict[str, Any]], *, max_tokens: int, overlap_tokens: int
) -> Chunked:
    """Each document whole (one item, as chunking NONE gives it), through the handler with CHUNKING=structure
    and structural contexts; the spans from each chunk's ``ckb_start`` and ``ckb_end``."""
    import boto3
    from moto import mock_aws

    from contextual_kb.local import runner
    from contextual_kb.local.kb_staging import build_event, stage_file
    from contextual_kb.runtime.transform import END_KEY, START_KEY

    spans: list[Span] = []
    bodies: list[str] = []
    settings = {
        "CONTEXT_STRATEGY": "structural",
        "CHUNKING": "structure",
        "CHUNK_MAX_TOKENS": str(max_tokens),
        "CHUNK_OVERLAP_TOKENS": str(overlap_tokens),
    }
    with handler_environment(**settings), mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        # Each document under the key eval --stack would upload it as (the context names it).
        staged = [
            stage_file(s3, BUCKET, source_uri(key), [doc["content"]], chunks_per_batch=1)
            for doc, key in zip(documents, document_keys(documents), strict=True)
        ]
        result = runner.invoke(build_event(BUCKET, staged))
        for doc, produced in zip(documents, result.response["outputFiles"], strict=True):
            for ref in produced["contentBatches"]:
                for item in result.after[ref["key"]].file_contents:
                    metadata = item.content_metadata or {}
                    start, end = (
                        int(metadata.get(START_KEY, 0)),
                        int(metadata.get(END_KEY, len(doc["content"]))),
                    )
                    spans.append((doc["original_uuid"], start, end))
                    bodies.append(item.content_body)
    setting = f"max {max_tokens} tokens" + (f", overlap {overlap_tokens}" if overlap_tokens else "")
    return Chunked("structure", setting, spans, bodies)


def chunk_fixed(documents: Sequence[dict[str, Any]], *, max_tokens: int) -> Chunked:
    """The KB's fixed-size chunks (20% overlap), staged as the KB would, through the handler with structural
    contexts (CHUNKING=kb)."""
    import boto3
    from moto import mock_aws

    from contextual_kb.local import runner
    from contextual_kb.local.kb_staging import build_event, stage_file

    spans: list[Span] = []
    per_document: list[list[tuple[int, int]]] = []
    with handler_environment(CONTEXT_STRATEGY="structural", CHUNKING="kb"), mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        staged = []
        for doc, key in zip(documents, document_keys(documents), strict=True):
            found = fixed_size_spans(
                doc["content"], max_tokens=max_tokens, overlap_percentage=FIXED_OVERLAP_PERCENTAGE
            )
            per_document.append(found)
            texts = [doc["content"][start:end] for start, end in found]
            staged.append(stage_file(s3, BUCKET, source_uri(key), texts, chunks_per_batch=8))
        result = runner.invoke(build_event(BUCKET, staged))
        bodies: list[str] = []
        for doc, found, produced in zip(documents, per_document, result.response["outputFiles"], strict=True):
            items = [
                item for ref in produced["contentBatches"] for item in result.after[ref["key"]].file_contents
            ]
            for (start, end), item in zip(found, items, strict=True):
                spans.append((doc["original_uuid"], start, end))
                bodies.append(item.content_body)
    return Chunked("fixed", f"max {max_tokens} tokens, {FIXED_OVERLAP_PERCENTAGE}% overlap", spans, bodies)


def compare_chunkers(
    documents: list[dict[str, Any]],
    queries: list[dict[str, Any]],
    *,
    chunkers: Sequence[str],
    max_tokens: int,
    overlap_tokens: int,
    analyzers: Sequence[str],
    ks: Sequence[int],
) -> list[ChunkerRow]:
    """One row per (chunker, analyzer). Ours is chunked first, at ``max_tokens``; the fixed size is then
    matched to its average length (or, without ours, ``max_tokens`` itself)."""
    from contextual_kb.evaluation.offline import rank_bm25

    made: list[Chunked] = []
    reference: float | None = None
    if "structure" in chunkers:
        ours = chunk_by_structure(documents, max_tokens=max_tokens, overlap_tokens=overlap_tokens)
        reference = ours.average_chars
        made.append(ours)
    if "fixed" in chunkers:
        size = matching_fixed_size(documents, reference) if reference is not None else max_tokens
        made.insert(0, chunk_fixed(documents, max_tokens=size))
    gold = golden_spans(documents)
    wanted = [[gold[(uuid, index)] for uuid, index in q["golden_chunk_uuids"]] for q in queries]
    blank = NonBlank(documents)
    rows = []
    for chunked in made:
        matched = reference is None or abs(chunked.average_chars - reference) <= LENGTH_TOLERANCE * reference
        for analyzer in analyzers:
            rankings = rank_bm25(chunked.bodies, [q["query"] for q in queries], analyzer, max(ks))
            rows.append(
                ChunkerRow(
                    chunked.chunker,
                    chunked.setting,
                    len(chunked.spans),
                    chunked.average_chars,
                    f"bm25 {analyzer}",
                    score_coverage(wanted, rankings, chunked.spans, blank, ks),
                    matched,
                )
            )
    return rows
