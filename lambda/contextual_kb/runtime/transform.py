"""The transformation: batch objects in, contextualized batch objects out, one response.

1. Every batch object of every file is read and validated before anything is written: a bad object fails
   the call with an error naming it, and no output exists for any file of that call.
2. File by file: the batches are put in document order, the text chunks joined into the whole document,
   the strategy gives one context per chunk, and each input batch becomes one output batch (same items,
   same order), or several parts when it grows past ``OUTPUT_PART_MAX_BYTES``. Output keys are the input
   keys moved under ``OUTPUT_PREFIX`` inside the directory the event's keys share (``output_keys``), so a
   retried call overwrites its own output.

With ``CHUNKING=structure`` the document is chunked again by its own structure (``chunking``): each new
chunk takes the place of the KB's text item it starts in (its metadata copied, plus its section and span),
non-text items stay where they were.

Files are loaded as the strategy asks for them: one at a time for the structural strategy; for the claude
strategy, the documents it has open side by side (one at least, more only within its 2M-character budget).
Validated batches from step 1 are kept within ``PREFETCH_MAX_BYTES`` (the rest are read again, pinned to
the validated version by ETag).

The whole invocation is budgeted, not only the model: what is left once the model stops (the structural
pass, batch objects read again, outputs written) is estimated from the event and the S3 latency measured so
far (``budget.WorkLeft``), and taken off the model's time. Reads and writes run ``S3_MAX_CONCURRENCY`` at a
time. If the call fails, the outputs it wrote are left at their keys (a concurrent call of the same event may
name them); a retry overwrites them.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from contextual_kb.runtime.budget import WorkLeft
from contextual_kb.runtime.chunking import Chunk, chunk_document
from contextual_kb.runtime.context.base import ChunkContext, ContextStrategy, Invocation, SourceDocument
from contextual_kb.runtime.context.claude.accounting import ModelAccounting
from contextual_kb.runtime.deadline import Deadline
from contextual_kb.runtime.documents import Document, Span, assemble
from contextual_kb.runtime.enrichment import Enriched, MetadataLimit, add_within, enrich, metadata_limit
from contextual_kb.runtime.models import (
    BatchObject,
    ContentBatchRef,
    ContentItem,
    InputFile,
    OutputFile,
    TransformationEvent,
    TransformationResponse,
    batch_json,
    parse_batch,
)
from contextual_kb.runtime.observability import logger, tracer
from contextual_kb.runtime.output_keys import output_key, shared_directory
from contextual_kb.runtime.outputs import OutputWriter
from contextual_kb.runtime.settings import Settings
from contextual_kb.runtime.storage import StoredObject

# Bodies read ahead while validating, in bytes (about): memory must follow the largest file, not their number.
READ_WINDOW_BYTES = 1024 * 1024
# An output batch larger than this (about, in bytes of JSON) is written in parts: a whole document chunked
# here (50 MB at most) would otherwise be one object of its size and more, held in memory whole to be written.
OUTPUT_PART_MAX_BYTES = 4 * 1024 * 1024
# Metadata keys of a chunk made here: its section path and its span in the document (characters).
SECTION_KEY, START_KEY, END_KEY = "ckb_section", "ckb_start", "ckb_end"


class BatchStore(Protocol):
    def read(self, bucket: str, key: str, *, if_match: str | None = None) -> StoredObject: ...

    def write(self, bucket: str, key: str, body: bytes) -> None: ...

    def delete(self, bucket: str, keys: list[str]) -> None: ...


# A document's output, by the index of the KB's text items in document order: the items written in its
# place, each with its context (none for an item left out: its chunk dropped, or merged into an earlier one).
Placed = dict[int, list[tuple[ContentItem, ChunkContext | None]]]


class Steps(Protocol):
    """The user's own steps around the context step (``contextual_kb.runtime.sdk.Pipeline``).

    ``before`` is given the document as the strategy would see it and its text chunks as items, each with
    the index of the KB text item it stands for; it returns the document the strategy is given instead,
    and a state ``after`` takes back with the strategy's contexts (one per chunk of that document).
    """

    # Seconds the steps after the context step take on one document, as declared: until the first is
    # measured, the deadline's tail counts them for every document not written yet.
    seconds_per_document: float

    def before(
        self,
        document: SourceDocument,
        chunks: Sequence[tuple[int, ContentItem]],
        deadline: Deadline,
        stats: RunStats,
    ) -> tuple[SourceDocument, object]: ...

    def after(
        self,
        state: object,
        contexts: tuple[ChunkContext | None, ...],
        deadline: Deadline,
        stats: RunStats,
        limit: MetadataLimit,
    ) -> Placed: ...


@dataclass
class RunStats:
    """What one invocation did; emitted as metrics and one summary log line."""

    files: int = 0
    batches_in: int = 0
    batches_out: int = 0
    chunks_in: int = 0  # the KB's text items
    chunks_out: int = 0  # chunks written: the KB's, or ours with CHUNKING=structure
    chunks_contextualized: int = 0
    chunks_passed_through: int = 0
    non_text_items: int = 0
    empty_documents: int = 0
    documents_chunked: int = 0  # CHUNKING=structure: documents chunked here
    chunked_without_outline: int = 0  # of those, chunked with no time left to read their outline
    metadata_truncated: int = 0
    context_errors: int = 0  # chunks whose context could not be put on them: passed through, logged
    # The user's steps (runtime.sdk): chunks they dropped (by reason), chunks whose text they replaced,
    # keys they added that the store's metadata limit left no room for.
    chunks_dropped: int = 0
    chunks_rewritten: int = 0
    step_metadata_left_out: int = 0
    dropped_by_reason: Counter[str] = field(default_factory=Counter)
    contexts_by_source: Counter[str] = field(default_factory=Counter)
    model: ModelAccounting = field(default_factory=ModelAccounting)

    def as_log(self) -> dict[str, object]:
        out: dict[str, object] = {
            k: v
            for k, v in vars(self).items()
            if k not in {"contexts_by_source", "model", "dropped_by_reason"}
        }
        out["contexts_by_source"] = dict(self.contexts_by_source)
        if self.dropped_by_reason:
            out["dropped_by_reason"] = dict(self.dropped_by_reason)
        if self.model.used:
            out["model"] = self.model.as_log()
        return out


@dataclass(frozen=True, slots=True)
class _Rechunked:
    """CHUNKING=structure: the document's new chunks, and for each of the KB's text items (in document
    order) the first of the chunks that start in it (``first[i]:first[i + 1]`` replace item ``i``)."""

    chunks: tuple[Chunk, ...]
    first: tuple[int, ...]
    without_outline: bool


@dataclass(frozen=True, slots=True)
class _LoadedFile:
    file: InputFile
    batches: dict[str, BatchObject]  # by key
    document: SourceDocument
    size: int  # bytes of its batch objects, as validated
    rechunked: _Rechunked | None = None
    stepped: object = None  # the user's steps' state (Steps.before), when they ran on this document


class Transformation:
    def __init__(
        self, settings: Settings, strategy: ContextStrategy, store: BatchStore, steps: Steps | None = None
    ) -> None:
        self.settings = settings
        self.strategy = strategy
        self.store = store
        self.steps = steps

    @tracer.capture_method(capture_response=False)
    def run(
        self, event: TransformationEvent, deadline: Deadline | None = None
    ) -> tuple[TransformationResponse, RunStats]:
        stats = RunStats()
        work = WorkLeft(parallelism=self.settings.s3_max_concurrency)
        invocation = Invocation(
            bucket=event.bucket_name,
            deadline=(deadline or Deadline.unlimited()).budgeted(work),
            accounting=stats.model,
            ids={
                "knowledge_base_id": event.knowledge_base_id,
                "data_source_id": event.data_source_id,
                "ingestion_job_id": event.ingestion_job_id,
            },
        )
        bucket = event.bucket_name
        work.expect(files=len(event.input_files))
        if self.steps is not None:
            work.after_steps_per_file = self.steps.seconds_per_document
        validated = self._validate_all(event, work)
        directory = shared_directory(ref.key for file in event.input_files for ref in file.content_batches)
        writer = OutputWriter(self.store, bucket, parallelism=self.settings.s3_max_concurrency, work=work)
        loaded: deque[_LoadedFile] = deque()
        outputs: list[OutputFile] = []
        deadline = invocation.deadline

        def documents() -> Iterator[SourceDocument]:
            for file in event.input_files:
                batches = {
                    ref.key: self._load(bucket, ref, file, validated, work) for ref in file.content_batches
                }
                document = _source_document(file, batches, self.settings.min_overlap_chars)
                rechunked = None
                if self.settings.chunking == "structure" and document.document.text:
                    document, rechunked = self._rechunk(document, deadline)
                size = sum(validated.sizes[ref.key] for ref in file.content_batches)
                stepped = None
                if self.steps is not None and document.chunk_count:
                    chunks = self._step_chunks(file, batches, document, rechunked, stats)
                    document, stepped = self.steps.before(document, chunks, deadline, stats)
                work.file_loaded(size)
                loaded.append(_LoadedFile(file, batches, document, size, rechunked, stepped))
                yield document

        try:
            for result in self.strategy.contextualize(documents(), invocation):
                current = loaded.popleft()
                if result.document is not current.document:  # results must come back in order
                    raise RuntimeError("strategy returned documents out of order")
                placed = None
                if self.steps is not None and current.stepped is not None:
                    limit = metadata_limit(self.settings.vector_store)
                    placed = self.steps.after(current.stepped, result.contexts, deadline, stats, limit)
                outputs.append(self._write_file(current, result.contexts, stats, writer, directory, placed))
                work.file_done(current.size)
            if loaded:
                raise RuntimeError(f"strategy returned no result for {len(loaded)} file(s)")
            writer.finish()
        except BaseException:
            writer.abandon()
            raise
        return TransformationResponse(outputFiles=outputs), stats

    def _validate_all(self, event: TransformationEvent, work: WorkLeft) -> _Validated:
        """Read and validate every batch, several at a time; keep parsed ones within the prefetch budget; tell
        ``work`` what is ahead (writes, re-reads, characters) and how fast S3 answers."""
        validated = _Validated()
        budget = self.settings.prefetch_max_bytes
        refs = [(file, ref) for file in event.input_files for ref in file.content_batches]
        bucket = event.bucket_name
        for (file, ref), stored in self._read_in_order(bucket, refs, work):
            batch = parse_batch(stored.body, where=f"s3://{bucket}/{ref.key}", file=file.source)
            keep = len(stored.body) <= budget
            budget -= len(stored.body) if keep else 0
            validated.batches[ref.key] = (stored.etag, batch if keep else None)
            validated.sizes[ref.key] = len(stored.body)
            work.expect(writes=1, rereads=int(not keep), chars=len(stored.body))
        return validated

    def _read_in_order(
        self, bucket: str, refs: list[tuple[InputFile, ContentBatchRef]], work: WorkLeft
    ) -> Iterator[tuple[tuple[InputFile, ContentBatchRef], StoredObject]]:
        """The objects of ``refs`` in order, read ``S3_MAX_CONCURRENCY`` at a time (so few bodies wait)."""

        def read(key: str) -> StoredObject:
            started = time.perf_counter()
            stored = self.store.read(bucket, key)
            work.read(time.perf_counter() - started)
            return stored

        window: deque[tuple[tuple[InputFile, ContentBatchRef], Future[StoredObject]]] = deque()
        pool = ThreadPoolExecutor(max_workers=self.settings.s3_max_concurrency, thread_name_prefix="ckb-read")
        seen = [0, 0]  # objects read, bytes: the window holds about READ_WINDOW_BYTES of bodies

        def full() -> bool:
            typical = seen[1] // seen[0] if seen[0] else 0
            room = READ_WINDOW_BYTES // typical if typical else self.settings.s3_max_concurrency
            return len(window) >= max(1, min(self.settings.s3_max_concurrency, room))

        try:
            for pair in refs:
                window.append((pair, pool.submit(read, pair[1].key)))
                while window and full():
                    done, future = window.popleft()
                    stored = future.result()
                    seen[0] += 1
                    seen[1] += len(stored.body)
                    yield done, stored
            while window:
                done, future = window.popleft()
                yield done, future.result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _load(
        self,
        bucket: str,
        ref: ContentBatchRef,
        file: InputFile,
        validated: _Validated,
        work: WorkLeft,
    ) -> BatchObject:
        etag, batch = validated.batches.pop(ref.key)
        if batch is not None:
            return batch
        started = time.perf_counter()
        stored = self.store.read(bucket, ref.key, if_match=etag or None)
        work.read(time.perf_counter() - started, reread=True)
        return parse_batch(stored.body, where=f"s3://{bucket}/{ref.key}", file=file.source)

    def _rechunk(self, document: SourceDocument, deadline: Deadline) -> tuple[SourceDocument, _Rechunked]:
        """The document with our chunks in place of the KB's: ``document.document.spans`` are now ours."""
        settings = self.settings
        text = document.document.text
        started = time.perf_counter()
        chunked = chunk_document(
            text,
            max_tokens=settings.chunk_max_tokens,
            overlap_tokens=settings.chunk_overlap_tokens,
            path=document.path,
            expired=lambda: deadline.compute_remaining() <= 0,
        )
        chunks = chunked.chunks
        item_starts = [span.start for span in document.document.spans]
        first = first_chunks(item_starts, [chunk.start for chunk in chunks])
        per_item = [first[i + 1] - first[i] for i in range(len(item_starts))]
        sizes: list[int] = []
        position = 0
        for count in document.batch_sizes:
            sizes.append(sum(per_item[position : position + count]))
            position += count
        logger.debug(
            "document chunked by structure",
            extra={
                "file": document.source,
                "chars": len(text),
                "chunks_in": len(item_starts),
                "chunks_out": len(chunks),
                "outline": chunked.outline is not None,
                "seconds": round(time.perf_counter() - started, 3),
            },
        )
        rechunked = SourceDocument(
            source=document.source,
            path=document.path,
            metadata=document.metadata,
            document=Document(text, tuple(Span(c.start, c.end) for c in chunks)),
            keys=document.keys,
            batch_sizes=tuple(sizes),
            outline=chunked.outline,
        )
        return rechunked, _Rechunked(chunks, first, chunked.outline is None)

    def _step_chunks(
        self,
        file: InputFile,
        batches: dict[str, BatchObject],
        document: SourceDocument,
        rechunked: _Rechunked | None,
        stats: RunStats,
    ) -> list[tuple[int, ContentItem]]:
        """The document's text chunks as the user's steps are given them, each with the index of the KB
        text item it stands for: the KB's items, or ours in their place with ``CHUNKING=structure``."""
        items = [
            item
            for ref in file.batches_in_document_order()
            for item in batches[ref.key].file_contents
            if item.is_text
        ]
        if rechunked is None:
            return list(enumerate(items))
        limit = metadata_limit(self.settings.vector_store)
        chunks: list[tuple[int, ContentItem]] = []
        for owner, item in enumerate(items):
            for index in range(rechunked.first[owner], rechunked.first[owner + 1]):
                chunk_item, left_out = _chunk_item(
                    item,
                    rechunked.chunks[index],
                    document.document.text,
                    limit=limit,
                    file_metadata=file.file_metadata,
                )
                stats.metadata_truncated += int(left_out)
                chunks.append((owner, chunk_item))
        return chunks

    def _write_file(
        self,
        loaded: _LoadedFile,
        contexts: tuple[ChunkContext | None, ...],
        stats: RunStats,
        writer: OutputWriter,
        directory: str,
        placed: Placed | None = None,
    ) -> OutputFile:
        file = loaded.file
        chunk_count = loaded.document.chunk_count
        if chunk_count != len(contexts):
            raise RuntimeError(
                f"strategy gave {len(contexts)} contexts for {chunk_count} chunks of {file.source}"
            )
        # Text item i of the document is the i-th text item over the batches in document order.
        first_item: dict[str, int] = {}
        count = 0
        for ref in file.batches_in_document_order():
            first_item[ref.key] = count
            count += sum(1 for item in loaded.batches[ref.key].file_contents if item.is_text)

        settings = self.settings
        limit = metadata_limit(settings.vector_store)
        rechunked = loaded.rechunked
        text = loaded.document.document.text
        out_refs: list[ContentBatchRef] = []
        file_stats = Counter[str]()

        def contextualized(item: ContentItem, context: ChunkContext | None, index: int) -> ContentItem:
            try:
                done = enrich(
                    item,
                    context,
                    metadata_key=settings.context_metadata_key,
                    max_bytes=settings.context_metadata_max_bytes,
                    file_metadata=file.file_metadata,
                    limit=limit,
                )
            except Exception:  # this chunk's context, not the call: the chunk goes back as it came
                logger.exception(
                    "a context could not be put on its chunk; the chunk passes through unchanged",
                    extra={"file": file.source, "chunk_index": index},
                )
                file_stats["context_errors"] += 1
                done = Enriched(item, contextualized=False)
            file_stats["chunks_out"] += 1
            if done.contextualized and context is not None:
                file_stats["chunks_contextualized"] += 1
                stats.contexts_by_source[context.source] += 1
            else:
                file_stats["chunks_passed_through"] += 1
            file_stats["metadata_truncated"] += int(done.metadata_truncated)
            return done.item

        for ref in file.content_batches:  # the response keeps the event's batch order
            batch = loaded.batches[ref.key]
            text_index = first_item[ref.key]
            items: list[ContentItem] = []
            for item in batch.file_contents:
                if not item.is_text:
                    items.append(item)
                    file_stats["non_text_items"] += 1
                    continue
                file_stats["chunks_in"] += 1
                if placed is not None:  # the user's steps shaped the document's chunks (runtime.sdk)
                    for number, (chunk_item, context) in enumerate(placed.get(text_index, ())):
                        items.append(contextualized(chunk_item, context, number))
                elif rechunked is None:
                    items.append(contextualized(item, contexts[text_index], text_index))
                else:
                    for index in range(rechunked.first[text_index], rechunked.first[text_index + 1]):
                        chunk_item, left_out = _chunk_item(
                            item, rechunked.chunks[index], text, limit=limit, file_metadata=file.file_metadata
                        )
                        file_stats["metadata_truncated"] += int(left_out)
                        items.append(contextualized(chunk_item, contexts[index], index))
                text_index += 1
            for part, part_items in enumerate(_parts(items), 1):
                key = output_key(ref.key, directory=directory, prefix=settings.output_prefix, part=part)
                # A copy, not a new object: fields of the batch object we do not know travel through.
                writer.write(key, batch_json(batch.model_copy(update={"file_contents": part_items})))
                out_refs.append(ContentBatchRef(key=key))

        _count_file(stats, loaded, file_stats, len(out_refs), empty=count == 0)
        return OutputFile.model_validate(
            {
                "originalFileLocation": file.original_file_location.dump(),
                # On every file, as AWS's documented output has it: {} when the input had none.
                "fileMetadata": file.file_metadata if file.file_metadata is not None else {},
                "contentBatches": [r.dump() for r in out_refs],
            }
        )


def _count_file(
    stats: RunStats, loaded: _LoadedFile, counts: Counter[str], outputs: int, *, empty: bool
) -> None:
    file = loaded.file
    stats.files += 1
    stats.batches_in += len(file.content_batches)
    stats.batches_out += outputs
    if loaded.rechunked is not None:
        stats.documents_chunked += 1
        stats.chunked_without_outline += int(loaded.rechunked.without_outline)
    for name, value in counts.items():
        setattr(stats, name, getattr(stats, name) + value)
    stats.empty_documents += int(empty)
    logger.info(
        "file transformed",
        extra={
            "file": file.source,
            "batch_keys": [ref.key for ref in file.content_batches],
            "batches": outputs,
            **dict(counts),
        },
    )


def first_chunks(item_starts: list[int], chunk_starts: list[int]) -> tuple[int, ...]:
    """For each item (by its start in the document), the index of the first chunk that starts in it, and
    the number of chunks last: a chunk belongs to the last item that starts at or before it (the first item
    when it starts before them all). Both lists are in document order. Pure."""
    owners = [max(0, bisect.bisect_right(item_starts, start) - 1) for start in chunk_starts]
    first = [bisect.bisect_left(owners, item) for item in range(len(item_starts))]
    return (*first, len(chunk_starts))


def _chunk_item(
    item: ContentItem,
    chunk: Chunk,
    text: str,
    *,
    limit: MetadataLimit,
    file_metadata: Mapping[str, Any] | None,
) -> tuple[ContentItem, bool]:
    """One of our chunks in place of the KB's ``item``: its text, the item's type and metadata (the user's
    keys win), its span and section as far as they fit the store's metadata limit (and whether one did
    not); unknown fields of the item travel too."""
    ours: dict[str, object] = {START_KEY: chunk.start, END_KEY: chunk.end}
    if chunk.section:
        ours[SECTION_KEY] = chunk.section
    metadata, left_out = add_within(
        item.content_metadata or {}, ours, limit=limit, file_metadata=file_metadata
    )
    return item.model_copy(
        update={"content_body": text[chunk.start : chunk.end], "content_metadata": metadata}
    ), left_out


def _parts(items: list[ContentItem]) -> Iterator[list[ContentItem]]:
    """``items`` in runs of about ``OUTPUT_PART_MAX_BYTES`` of JSON (at least one item each, and one run when
    there are none: an empty batch is written back empty)."""
    part: list[ContentItem] = []
    size = 0
    for item in items:
        # The body's UTF-8 bytes count twice (a context of its size at most, and escapes); metadata ~2 KB.
        weight = 2 * len(item.content_body.encode("utf-8", "surrogatepass")) + 2048
        if part and size + weight > OUTPUT_PART_MAX_BYTES:
            yield part
            part, size = [], 0
        part.append(item)
        size += weight
    yield part


@dataclass
class _Validated:
    batches: dict[str, tuple[str, BatchObject | None]] = field(default_factory=dict)  # key -> (etag, kept)
    sizes: dict[str, int] = field(default_factory=dict)  # key -> bytes


def _s3_path(file: InputFile) -> str | None:
    """The object key of the source file within its bucket (``s3://bucket/a/b.md`` -> ``a/b.md``)."""
    uri = file.original_file_location.uri
    if not uri or not uri.startswith("s3://"):
        return None
    _, _, path = uri[len("s3://") :].partition("/")
    return path or None


def _source_document(file: InputFile, batches: dict[str, BatchObject], min_overlap: int) -> SourceDocument:
    order = file.batches_in_document_order()
    per_batch = [
        [item.content_body for item in batches[ref.key].file_contents if item.is_text] for ref in order
    ]
    return SourceDocument(
        source=file.source,
        path=_s3_path(file),
        metadata=file.file_metadata or {},
        document=assemble([chunk for texts in per_batch for chunk in texts], min_overlap=min_overlap),
        keys=tuple(ref.key for ref in order),
        batch_sizes=tuple(len(texts) for texts in per_batch),
    )
