"""The transformation: batch objects in, contextualized batch objects out, one response.

1. Every batch object of every file is read and validated before anything is written: a bad object fails
   the call with an error naming it, and no output exists for any file of that call.
2. File by file: the batches are put in document order, the text chunks joined into the whole document,
   the strategy gives one context per chunk, and each input batch becomes one output batch (same items,
   same order) under ``OUTPUT_PREFIX`` + the input key, so a retried call overwrites its own output.

Files are loaded as the strategy asks for them: one at a time for the structural strategy; for the claude
strategy, the documents it has open side by side (one at least, more only within its 2M-character budget).
Validated batches from step 1 are kept within ``PREFETCH_MAX_BYTES`` (the rest are read again, pinned to
the validated version by ETag).

The whole invocation is budgeted, not only the model: what is left once the model stops (the structural
pass, batch objects read again, outputs written) is estimated from the event and the S3 latency measured so
far (``budget.WorkLeft``), and taken off the model's time. Reads and writes run ``S3_MAX_CONCURRENCY`` at a
time. If the call fails, the outputs it wrote are deleted: none is left that no response names.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from contextual_kb.runtime.budget import WorkLeft
from contextual_kb.runtime.context.base import ChunkContext, ContextStrategy, Invocation, SourceDocument
from contextual_kb.runtime.context.claude.accounting import ModelAccounting
from contextual_kb.runtime.deadline import Deadline
from contextual_kb.runtime.documents import assemble
from contextual_kb.runtime.enrichment import Enriched, enrich
from contextual_kb.runtime.errors import ContractError
from contextual_kb.runtime.models import (
    BatchObject,
    ContentBatchRef,
    InputFile,
    OutputFile,
    TransformationEvent,
    TransformationResponse,
    parse_batch,
)
from contextual_kb.runtime.observability import logger, tracer
from contextual_kb.runtime.outputs import OutputWriter
from contextual_kb.runtime.settings import Settings
from contextual_kb.runtime.storage import StoredObject

# Bodies read ahead while validating, in bytes (about): memory must follow the largest file, not their number.
READ_WINDOW_BYTES = 1024 * 1024
# S3 object keys are at most 1,024 bytes of UTF-8.
S3_MAX_KEY_BYTES = 1024


class BatchStore(Protocol):
    def read(self, bucket: str, key: str, *, if_match: str | None = None) -> StoredObject: ...

    def write(self, bucket: str, key: str, body: bytes) -> None: ...

    def delete(self, bucket: str, keys: list[str]) -> None: ...


@dataclass
class RunStats:
    """What one invocation did; emitted as metrics and one summary log line."""

    files: int = 0
    batches_in: int = 0
    batches_out: int = 0
    chunks_in: int = 0
    chunks_contextualized: int = 0
    chunks_passed_through: int = 0
    non_text_items: int = 0
    empty_documents: int = 0
    metadata_truncated: int = 0
    context_errors: int = 0  # chunks whose context could not be put on them: passed through, logged
    contexts_by_source: Counter[str] = field(default_factory=Counter)
    model: ModelAccounting = field(default_factory=ModelAccounting)

    def as_log(self) -> dict[str, object]:
        out: dict[str, object] = {
            k: v for k, v in vars(self).items() if k not in {"contexts_by_source", "model"}
        }
        out["contexts_by_source"] = dict(self.contexts_by_source)
        if self.model.used:
            out["model"] = self.model.as_log()
        return out


@dataclass(frozen=True, slots=True)
class _LoadedFile:
    file: InputFile
    batches: dict[str, BatchObject]  # by key
    document: SourceDocument
    size: int  # bytes of its batch objects, as validated


class Transformation:
    def __init__(self, settings: Settings, strategy: ContextStrategy, store: BatchStore) -> None:
        self.settings = settings
        self.strategy = strategy
        self.store = store

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
        )
        bucket = event.bucket_name
        validated = self._validate_all(event, work)
        writer = OutputWriter(self.store, bucket, parallelism=self.settings.s3_max_concurrency, work=work)
        loaded: deque[_LoadedFile] = deque()
        outputs: list[OutputFile] = []

        def documents() -> Iterator[SourceDocument]:
            for file in event.input_files:
                batches = {
                    ref.key: self._load(bucket, ref, file, validated, work) for ref in file.content_batches
                }
                document = _source_document(file, batches, self.settings.min_overlap_chars)
                size = sum(validated.sizes[ref.key] for ref in file.content_batches)
                loaded.append(_LoadedFile(file, batches, document, size))
                yield document

        try:
            for result in self.strategy.contextualize(documents(), invocation):
                current = loaded.popleft()
                if result.document is not current.document:  # results must come back in order
                    raise RuntimeError("strategy returned documents out of order")
                outputs.append(self._write_file(bucket, current, result.contexts, stats, writer))
                work.file_done(current.size)
            if loaded:
                raise RuntimeError(f"strategy returned no result for {len(loaded)} file(s)")
            writer.finish()
        except BaseException:
            writer.take_back()
            raise
        return TransformationResponse(outputFiles=outputs), stats

    def _validate_all(self, event: TransformationEvent, work: WorkLeft) -> _Validated:
        """Read and validate every batch, several at a time; keep parsed ones within the prefetch budget; tell
        ``work`` what is ahead (writes, re-reads, characters) and how fast S3 answers."""
        validated = _Validated()
        budget = self.settings.prefetch_max_bytes
        _check_output_keys(event, self.settings.output_prefix)
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

    def _write_file(
        self,
        bucket: str,
        loaded: _LoadedFile,
        contexts: tuple[ChunkContext | None, ...],
        stats: RunStats,
        writer: OutputWriter,
    ) -> OutputFile:
        file = loaded.file
        order = [ref.key for ref in file.batches_in_document_order()]
        # Chunk i of the document is the i-th text item over the batches in document order.
        first_index: dict[str, int] = {}
        count = 0
        for key in order:
            first_index[key] = count
            count += sum(1 for item in loaded.batches[key].file_contents if item.is_text)
        if count != len(contexts):
            raise RuntimeError(f"strategy gave {len(contexts)} contexts for {count} chunks of {file.source}")

        settings = self.settings
        out_refs: list[ContentBatchRef] = []
        file_stats = Counter[str]()
        for ref in file.content_batches:  # the response keeps the event's batch order
            batch = loaded.batches[ref.key]
            index = first_index[ref.key]
            items = []
            for item in batch.file_contents:
                if not item.is_text:
                    items.append(item)
                    file_stats["non_text_items"] += 1
                    continue
                context = contexts[index]
                index += 1
                try:
                    done = enrich(
                        item,
                        context,
                        metadata_key=settings.context_metadata_key,
                        max_bytes=settings.context_metadata_max_bytes,
                        file_metadata=file.file_metadata,
                    )
                except Exception:  # this chunk's context, not the call: the chunk goes back as it came
                    logger.exception(
                        "a context could not be put on its chunk; the chunk passes through unchanged",
                        extra={"file": file.source, "batch_key": ref.key, "chunk_index": index - 1},
                    )
                    file_stats["context_errors"] += 1
                    done = Enriched(item, contextualized=False)
                items.append(done.item)
                file_stats["chunks_in"] += 1
                if done.contextualized and context is not None:
                    file_stats["chunks_contextualized"] += 1
                    stats.contexts_by_source[context.source] += 1
                else:
                    file_stats["chunks_passed_through"] += 1
                file_stats["metadata_truncated"] += int(done.metadata_truncated)
            out_key = settings.output_prefix + ref.key
            # A copy, not a new object: fields of the batch object we do not know travel through.
            out_batch = batch.model_copy(update={"file_contents": items})
            body = out_batch.model_dump_json(by_alias=True, exclude_unset=True)
            writer.write(out_key, body.encode("utf-8"))
            out_refs.append(ContentBatchRef(key=out_key))

        stats.files += 1
        stats.batches_in += len(file.content_batches)
        stats.batches_out += len(out_refs)
        for name, value in file_stats.items():
            setattr(stats, name, getattr(stats, name) + value)
        if count == 0:
            stats.empty_documents += 1
        logger.info(
            "file transformed",
            extra={
                "file": file.source,
                "batch_keys": [ref.key for ref in file.content_batches],
                "batches": len(out_refs),
                **dict(file_stats),
            },
        )
        return OutputFile.model_validate(
            {
                "originalFileLocation": file.original_file_location.dump(),
                **({"fileMetadata": file.file_metadata} if file.file_metadata is not None else {}),
                "contentBatches": [r.dump() for r in out_refs],
            }
        )


@dataclass
class _Validated:
    batches: dict[str, tuple[str, BatchObject | None]] = field(default_factory=dict)  # key -> (etag, kept)
    sizes: dict[str, int] = field(default_factory=dict)  # key -> bytes


def _check_output_keys(event: TransformationEvent, prefix: str) -> None:
    """Refuse, before anything is written, an input key that the output prefix would push past S3's key
    limit: S3 would refuse that write after the call's earlier files were written."""
    for i, file in enumerate(event.input_files):
        for j, ref in enumerate(file.content_batches):
            size = len((prefix + ref.key).encode("utf-8", "surrogatepass"))  # a lone surrogate counts too
            if size > S3_MAX_KEY_BYTES:
                raise ContractError(
                    f"the output key (OUTPUT_PREFIX {prefix!r} + this key) would be {size} bytes, "
                    f"over S3's {S3_MAX_KEY_BYTES}-byte limit",
                    where="event",
                    field=f"inputFiles[{i}].contentBatches[{j}].key",
                    file=file.source,
                )


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
