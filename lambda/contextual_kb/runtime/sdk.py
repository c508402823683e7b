"""Write your own transformation Lambda on this engine: your function over one document's chunks, ours for
the rest (docs/SDK.md).

The simple case is a decorator::

    from contextual_kb.runtime.sdk import Chunk, Document, transformation

    @transformation
    def handler(document: Document) -> list[Chunk]:
        return [chunk.with_metadata(folder=document.folder) for chunk in document.chunks]

``handler`` is then the Lambda handler (``module.handler``). A :class:`Pipeline` composes several steps
before and after the context step (structure chunking, Claude's contexts and the remembered ones, as the
function's settings say).

What the engine promises holds whatever a step does: the response is the contract's; a document is whole
(every batch of it, whichever call they came in) when a step sees it; the Lambda's time is budgeted (a
step's measured time is taken off the model's); no chunk is lost: a step returns every chunk it was given
(changed or not, split, merged) or drops it explicitly with a reason, counted and logged; the model sees
only what the steps before it returned (the document it is shown is rebuilt from their chunks); one cache
write per document; and when anything fails, the call fails and every output it wrote is deleted.
"""

from __future__ import annotations

import bisect
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any, overload

from pydantic import JsonValue, ValidationError

from contextual_kb.runtime.context.base import ChunkContext, SourceDocument
from contextual_kb.runtime.deadline import Deadline
from contextual_kb.runtime.documents import Document as _Text
from contextual_kb.runtime.documents import assemble
from contextual_kb.runtime.enrichment import MetadataLimit
from contextual_kb.runtime.errors import TransformationError
from contextual_kb.runtime.handler import LambdaHandler, make_handler, runtime
from contextual_kb.runtime.models import ContentItem
from contextual_kb.runtime.observability import logger
from contextual_kb.runtime.transform import Placed, RunStats

__all__ = [
    "Chunk",
    "Document",
    "Dropped",
    "LambdaHandler",
    "Pipeline",
    "Step",
    "StepError",
    "transformation",
]

# A drop's reason is a label (logged, counted by reason), not a message: short and printable.
MAX_REASON_CHARS = 64
# The Knowledge Base's own metadata keys (source URI, page number, ...): a step reads them, never sets them.
RESERVED_PREFIX = "x-amz-bedrock-"
# Separates merged chunks' texts unless the step says otherwise.
MERGE_SEPARATOR = "\n"


class StepError(TransformationError):
    """A step failed, or broke a rule (docs/SDK.md, "What a step may do"): the call fails, its outputs are
    deleted, and the Knowledge Base marks the call's files as failed. Names the step and the document."""

    def __init__(self, step: str, source: str, message: str) -> None:
        self.step = step
        self.source = source
        super().__init__(f"step {step!r} on {source}: {message}")


def _frozen_json(values: Mapping[str, Any], *, what: str) -> Mapping[str, JsonValue]:
    """A read-only deep copy of ``values``, refused unless it is JSON the contract can carry (string keys,
    finite numbers): the step cannot change it afterwards, nor hand the KB what it cannot read."""
    try:
        copied = json.loads(json.dumps(dict(values), allow_nan=False))
        ContentItem.model_validate({"contentBody": "", "contentType": "TEXT", "contentMetadata": copied})
    except (TypeError, ValueError, ValidationError) as exc:
        raise TypeError(
            f"{what} must be JSON (string keys; strings, finite numbers, booleans, lists)"
        ) from exc
    if not all(isinstance(key, str) for key in values):
        raise TypeError(f"{what} must have string keys")
    return MappingProxyType(copied)


@dataclass(frozen=True, slots=True, eq=False)
class Chunk:
    """One text chunk of a document: immutable; a step returns new ones (``with_text``, ``with_metadata``,
    ``split``, ``merged_with``) or drops it (``drop``).

    ``text`` is the chunk's text (without its context); ``metadata`` its ``contentMetadata`` (the KB's
    keys, ours with ``CHUNKING=structure``, and the steps'); ``context`` the context the context step gave
    it (in steps after it; ``None`` before, or when it got none). A ``Chunk`` made directly (``Chunk("...")``)
    stands for no chunk of the Knowledge Base: it is written in the place of the chunk before it.
    ``origins`` (which of the document's KB chunks it stands for) is the engine's: read it, never set it.
    """

    text: str
    metadata: Mapping[str, JsonValue] = field(default_factory=lambda: MappingProxyType({}))
    # The KB text items (their index in the document) this chunk stands for; the first is where it is
    # written. Empty for a chunk a step made from nothing.
    origins: tuple[int, ...] = field(default=(), repr=False)
    _context: ChunkContext | None = field(default=None, repr=False)
    _document: object = field(default=None, repr=False)  # the document it came from (None: made by a step)
    # The KB's item it was made from: written as a copy of it, so fields the engine does not know travel.
    _item: ContentItem | None = field(default=None, repr=False)
    _added: tuple[str, ...] = field(default=(), repr=False)  # metadata keys the steps set, in order
    _rewritten: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"a chunk's text must be a str, not {type(self.text).__name__}")
        if not isinstance(self.metadata, MappingProxyType):
            object.__setattr__(self, "metadata", _frozen_json(self.metadata, what="a chunk's metadata"))
        if self._item is None and self.metadata:
            # A chunk a step made: all its metadata is the step's, under with_metadata's rules (no key of the
            # Knowledge Base's; fitted to the store's limit when written, what does not fit counted).
            _not_reserved(self.metadata)
            added = tuple(key for key in self.metadata if key not in self._added)
            if added:
                object.__setattr__(self, "_added", self._added + added)
        if self._item is None and not self.text.strip():  # the KB's own blank items travel as they came
            raise ValueError(_BLANK)

    @property
    def context(self) -> str | None:
        """The context the context step gave this chunk (steps after it), else ``None``."""
        return self._context.text if self._context is not None else None

    def with_text(self, text: str) -> Chunk:
        """This chunk with ``text`` instead (counted as rewritten: ``ChunksRewritten``)."""
        if text == self.text:
            return self
        if not isinstance(text, str) or not text.strip():
            raise ValueError(_BLANK)
        return replace(self, text=text, _rewritten=True)

    def with_metadata(self, values: Mapping[str, Any] | None = None, /, **more: Any) -> Chunk:
        """This chunk with these metadata keys set (they win over the KB's and the file's). Keys that do not
        fit the vector store's metadata limit beside the rest are left out when written, counted
        (``StepMetadataLeftOut``) and logged, last set first out: set what matters most first."""
        added = {**(values or {}), **more}
        if not added:
            return self
        _not_reserved(added)
        fresh = _frozen_json(added, what="metadata")
        order = tuple(key for key in self._added if key not in fresh) + tuple(fresh)
        return replace(self, metadata=MappingProxyType({**self.metadata, **fresh}), _added=order)

    def split(self, texts: Iterable[str]) -> list[Chunk]:
        """This chunk as several, in order, each with its metadata and context; together they stand for it.
        Texts that are not the chunk's own, in order, count as rewritten."""
        parts = list(texts)
        if not parts:
            raise ValueError("split into no chunks: to leave a chunk out, drop it (chunk.drop(reason))")
        if not all(isinstance(part, str) and part.strip() for part in parts):
            raise ValueError(_BLANK)
        joined = "".join(parts)
        rewritten = self._rewritten or _squeezed(joined) != _squeezed(self.text)
        return [replace(self, text=text, _rewritten=rewritten) for text in parts]

    def merged_with(self, *others: Chunk, separator: str = MERGE_SEPARATOR) -> Chunk:
        """This chunk and ``others`` (in that order) as one, standing for them all, written in this chunk's
        place. Its metadata is this chunk's; the others' keys it lacks are added."""
        metadata = dict(self.metadata)
        added = list(self._added)
        for other in others:
            new = {k: v for k, v in other.metadata.items() if k not in metadata}
            metadata.update(new)
            added += [k for k in other._added if k in new]  # a step's keys stay the step's: fitted
        origins = tuple(dict.fromkeys(o for chunk in (self, *others) for o in chunk.origins))
        return replace(
            self,
            text=separator.join(chunk.text for chunk in (self, *others)),
            metadata=MappingProxyType(metadata),
            origins=origins,
            _added=tuple(added),
            _rewritten=any(chunk._rewritten for chunk in (self, *others)),
        )

    def drop(self, reason: str) -> Dropped:
        """Leave this chunk out of the Knowledge Base, saying why (a short label: counted by reason in the
        invocation's log line, ``ChunksDropped`` in metrics). Return it in the step's list."""
        return Dropped(self, reason)


def _not_reserved(metadata: Mapping[Any, Any]) -> None:
    """Metadata a step sets: string keys, none of the Knowledge Base's own (ValueError, one line)."""
    for key in metadata:
        if not isinstance(key, str):
            raise TypeError(f"metadata key {key!r}: keys are strings")
        if key.lower().startswith(RESERVED_PREFIX):
            raise ValueError(f"metadata key {key!r} is the Knowledge Base's ({RESERVED_PREFIX}...)")


# A chunk of blank text would be embedded as nothing: a silent drop.
_BLANK = "a chunk's text must not be blank: to leave a chunk out, drop it (chunk.drop(reason))"


def _squeezed(text: str) -> str:
    return "".join(text.split())


@dataclass(frozen=True, slots=True)
class Dropped:
    """A chunk a step leaves out on purpose, and why. Return it among the step's chunks."""

    chunk: Chunk
    reason: str

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise ValueError("a dropped chunk needs a reason (a short label, e.g. 'boilerplate')")
        if len(self.reason) > MAX_REASON_CHARS or not self.reason.isprintable():
            raise ValueError(f"a drop's reason is a label: printable, {MAX_REASON_CHARS} characters at most")


@dataclass(frozen=True)
class Document:
    """One whole document as a step sees it: every chunk of it, whatever batches the KB split it into."""

    source: str  # the original file's URI (s3://bucket/key)
    path: str | None  # its key in the source bucket, when the source is S3
    file_metadata: Mapping[str, JsonValue]  # the file's metadata (from its .metadata.json), read-only
    chunks: tuple[Chunk, ...]  # in document order
    _deadline: Deadline = field(default_factory=Deadline.unlimited, repr=False)

    @cached_property
    def text(self) -> str:
        """The whole document, rebuilt from ``chunks`` (overlaps between them not repeated)."""
        return _assembled(self.chunks).text

    @property
    def folder(self) -> str:
        """The folder of ``path`` (``a/b/c.md`` -> ``a/b``; ``""`` at the top or without a path)."""
        return self.path.rpartition("/")[0] if self.path else ""

    @property
    def name(self) -> str:
        """The file name of ``path`` (``a/b/c.md`` -> ``c.md``), else the last part of ``source``."""
        return (self.path or self.source).rpartition("/")[2]

    def rechunk(self, texts: Iterable[str]) -> list[Chunk]:
        """The document chunked again by you: ``texts`` in order, each a run of ``text`` found after the
        start of the one before (overlaps allowed). Each is written in the place of the chunk it starts in,
        with that chunk's metadata, and stands for every chunk whose text it overlaps: a chunk no text
        overlaps is lost (the step fails) unless dropped. A text not in the document raises ``ValueError``:
        ``rechunk`` rearranges the document; ``with_text`` changes it."""
        whole = _assembled(self.chunks)
        starts = [span.start for span in whole.spans]
        out: list[Chunk] = []
        position = 0
        for text in texts:
            found = whole.text.find(text, position) if text else -1
            if found < 0:
                raise ValueError(f"rechunk: text {len(out)} is not in the document after the text before it")
            end = found + len(text)
            owner = self.chunks[max(0, bisect.bisect_right(starts, found) - 1)]
            overlapped = [
                origin
                for chunk, span in zip(self.chunks, whole.spans, strict=True)
                if span.start < end and found < span.end
                for origin in chunk.origins
            ]
            origins = tuple(dict.fromkeys((*owner.origins[:1], *overlapped)))
            out.append(replace(owner, text=text, origins=origins))
            position = found
        return out

    def remaining_seconds(self) -> float:
        """Seconds this invocation has left for work like a step's (less what must follow it). A step that
        calls a service should keep within it: when it is spent, the call fails."""
        return self._deadline.compute_remaining()


def _assembled(chunks: Sequence[Chunk]) -> _Text:
    return assemble([chunk.text for chunk in chunks])


Step = Callable[[Document], Iterable[Chunk | Dropped]]
"""A function over one document: every chunk it was given back (changed or not) or dropped, in order."""


@dataclass
class _Shaped:
    """One document between ``before`` and ``after``: its chunks as the context step was given them."""

    document: Document
    source_document: SourceDocument


class Pipeline:
    """The user's steps around our context step: ``before`` (what the model sees: redact, filter, re-chunk,
    add metadata) and ``after`` (given each chunk's ``context``), each run in order on every document.

    ``handler()`` is the Lambda handler. The context step is the function's ``CONTEXT_STRATEGY`` (claude,
    structural, none) with its settings; ``CHUNKING=structure`` chunks each document before the steps.
    """

    def __init__(
        self, before: Sequence[Step] = (), after: Sequence[Step] = (), *, seconds_per_document: float = 0.0
    ) -> None:
        """``seconds_per_document``: what the ``after`` steps take on one document, at most, as far as you
        know; until they are measured on the first document, the model's time is cut by that much for every
        document left (their time is measured from then on). Set it for a slow step after the model (one
        calling a service): without it, the model may take the time the step needs, and the call fails."""
        if not 0 <= seconds_per_document <= 900:
            raise ValueError("seconds_per_document is seconds a document: 0 to 900 (Lambda's limit)")
        self.seconds_per_document = float(seconds_per_document)
        for step in (*before, *after):
            if not callable(step):
                raise TypeError(f"a step must be a function of a Document, not {type(step).__name__}")
        if not before and not after:
            raise ValueError("a pipeline without steps: use the function's own handler")
        self.before_steps: tuple[Step, ...] = tuple(before)
        self.after_steps: tuple[Step, ...] = tuple(after)

    def handler(self) -> LambdaHandler:
        """The Lambda handler: the engine's, with these steps."""
        return make_handler(self)

    # --- transform.Steps: called by the engine, not by users ---
    def before(
        self,
        document: SourceDocument,
        chunks: Sequence[tuple[int, ContentItem]],
        deadline: Deadline,
        stats: RunStats,
    ) -> tuple[SourceDocument, object]:
        identity = object()  # this document's: a chunk of another document returned here is refused
        given = tuple(
            Chunk(
                item.content_body,
                item.content_metadata or {},
                origins=(origin,),
                _document=identity,
                _item=item,
            )
            for origin, item in chunks
        )
        start = Document(document.source, document.path, _read_only(document.metadata), given, deadline)
        shaped = self._run(self.before_steps, start, deadline, stats, len(document.document.text), True)
        texts = [chunk.text for chunk in shaped.chunks]
        if texts == [item.content_body for _, item in chunks]:
            text = document.document  # unchanged: the document as the engine rebuilt it
        else:  # what the model is shown is what the steps returned (empty when they dropped every chunk)
            text = assemble(texts, min_overlap=runtime()[0].min_overlap_chars)
        sizes = Counter(chunk.origins[0] for chunk in shaped.chunks)
        batch_sizes: list[int] = []
        first = 0
        # Chunks per batch object, as the published mode's units follow them: by the items they are put in.
        for count in document.batch_sizes or (len(chunks),):
            owners = {origin for origin, _ in chunks[first : first + count]}
            batch_sizes.append(sum(sizes[o] for o in owners))
            first += count
        source_document = SourceDocument(
            source=document.source,
            path=document.path,
            metadata=document.metadata,
            document=text,
            keys=document.keys,
            batch_sizes=tuple(batch_sizes),
            # The outline read to chunk it is the original text's: steps may have changed the text.
            outline=document.outline if text is document.document else None,
        )
        return source_document, _Shaped(shaped, source_document)

    def after(
        self,
        state: object,
        contexts: tuple[ChunkContext | None, ...],
        deadline: Deadline,
        stats: RunStats,
        limit: MetadataLimit,
    ) -> Placed:
        assert isinstance(state, _Shaped)
        shaped = state.document
        given = tuple(
            replace(chunk, _context=context) for chunk, context in zip(shaped.chunks, contexts, strict=True)
        )
        done = self._run(
            self.after_steps, replace(shaped, chunks=given), deadline, stats, len(shaped.text), False
        )
        placed: Placed = {}
        left_out: Counter[str] = Counter()
        for chunk in done.chunks:
            stats.chunks_rewritten += int(chunk._rewritten)
            metadata, missing = _fit(chunk, done.file_metadata, limit)
            left_out.update(missing)
            item = _written(chunk, metadata)
            placed.setdefault(chunk.origins[0], []).append((item, chunk._context))
        if left_out:
            stats.step_metadata_left_out += sum(left_out.values())
            logger.warning(
                "metadata a step set did not fit the vector store's limit and was left out",
                extra={"file": done.source, "keys_left_out": dict(left_out), "limit_bytes": limit.max_bytes},
            )
        return placed

    def _run(
        self,
        steps: Sequence[Step],
        document: Document,
        deadline: Deadline,
        stats: RunStats,
        chars: int,
        before: bool,
    ) -> Document:
        started = time.perf_counter()
        for step in steps:
            name = getattr(step, "__qualname__", repr(step))
            if deadline.compute_remaining() <= 0:
                raise StepError(
                    name, document.source, "no time left to run it (the call fails; never skipped)"
                )
            try:
                result = step(document)
                returned = list(result) if result is not None else None
            except TransformationError:
                raise
            except Exception as exc:  # the user's code: the call fails, naming the step and the document
                # Its type only: the message may quote the document (the log's traceback has it, at ERROR).
                raise StepError(name, document.source, f"raised {type(exc).__name__}") from exc
            if returned is None:
                raise StepError(name, document.source, "returned None: return the document's chunks")
            document = replace(document, chunks=_checked(name, document, returned, stats))
        if steps:
            deadline.note_steps(chars, time.perf_counter() - started, before=before)
        return document


def _read_only(metadata: Mapping[str, Any]) -> Mapping[str, JsonValue]:
    return MappingProxyType(json.loads(json.dumps(dict(metadata))))


def _checked(step: str, document: Document, returned: list[Any], stats: RunStats) -> tuple[Chunk, ...]:
    """The step's chunks, once it is sure nothing was lost: every chunk it was given is accounted for (one
    returned stands for it, or it was dropped), none returned twice; drops counted by reason."""
    kept: list[Chunk] = []
    covered: set[int] = set()
    seen: set[int] = set()
    drops: Counter[str] = Counter()
    identity = next((c._document for c in document.chunks if c._document is not None), None)
    for value in returned:
        chunk = value.chunk if isinstance(value, Dropped) else value
        if not isinstance(chunk, Chunk):
            raise StepError(
                step, document.source, f"returned a {type(value).__name__}, not a Chunk or Dropped"
            )
        if chunk._document is not None and chunk._document is not identity:
            raise StepError(step, document.source, "returned a chunk of another document")
        if id(chunk) in seen:
            raise StepError(step, document.source, "returned the same chunk twice: each is written once")
        seen.add(id(chunk))
        covered.update(chunk.origins)
        if isinstance(value, Dropped):
            drops[value.reason] += 1
        else:
            kept.append(chunk)
    given = {origin for chunk in document.chunks for origin in chunk.origins}
    lost = sorted(given - covered)
    if lost:
        raise StepError(
            step,
            document.source,
            f"{len(lost)} of the document's chunks neither returned nor dropped (the first: chunk "
            f"{lost[0]}): return every chunk (chunk.with_text, split, merged_with) or drop it with "
            "chunk.drop(reason)",
        )
    placed = _placed(kept, fallback=min(given, default=0))
    if drops:
        stats.chunks_dropped += sum(drops.values())
        stats.dropped_by_reason.update(drops)
        logger.info(
            "a step dropped chunks", extra={"file": document.source, "step": step, "dropped": dict(drops)}
        )
    return tuple(placed)


def _placed(chunks: list[Chunk], *, fallback: int) -> list[Chunk]:
    """``chunks`` with a place for those made from nothing (the chunk's before them, or after them at the
    start), in the order they are written: by place, the step's order within one."""
    known = [c.origins[0] for c in chunks if c.origins]
    where = known[0] if known else fallback
    out: list[Chunk] = []
    for chunk in chunks:
        if chunk.origins:
            where = chunk.origins[0]
            out.append(chunk)
        else:
            out.append(replace(chunk, origins=(where,)))
    # Written item by item: a chunk placed before one of an earlier item moves back to its place.
    return sorted(out, key=lambda c: c.origins[0])


def _written(chunk: Chunk, metadata: dict[str, Any]) -> ContentItem:
    """The item written for ``chunk``: a copy of the KB's item it was made from (unknown fields, the content
    type as sent), or a new text item; no metadata invented where the item had none."""
    if chunk._item is None:
        fields: dict[str, Any] = {"contentBody": chunk.text, "contentType": "TEXT"}
        return ContentItem.model_validate({**fields, "contentMetadata": metadata} if metadata else fields)
    update: dict[str, Any] = {"content_body": chunk.text}
    if metadata or chunk._item.content_metadata is not None:
        update["content_metadata"] = metadata
    return chunk._item.model_copy(update=update)


def _fit(
    chunk: Chunk, file_metadata: Mapping[str, Any], limit: MetadataLimit
) -> tuple[dict[str, Any], list[str]]:
    """The chunk's metadata with the keys steps set, first set first, as far as they fit ``limit`` beside
    the file's metadata (chunk keys win over the file's); and the keys left out. A key the KB's item had,
    whose new value does not fit, keeps the item's value."""
    added = [key for key in chunk._added if key in chunk.metadata]
    original = (chunk._item.content_metadata or {}) if chunk._item is not None else {}
    # In the chunk's order (the KB's keys where they were), each added key where it was set first.
    merged = {k: v for k, v in chunk.metadata.items() if k not in added}
    missing: list[str] = []
    for key in added:
        if limit.fits({**file_metadata, **merged, key: chunk.metadata[key]}):
            merged[key] = chunk.metadata[key]
        else:
            missing.append(key)
            if key in original:
                merged[key] = original[key]
    return merged, missing


@overload
def transformation(step: Step, /) -> LambdaHandler: ...


@overload
def transformation(
    *, after_contexts: bool = False, seconds_per_document: float = 0.0
) -> Callable[[Step], LambdaHandler]: ...


def transformation(
    step: Step | None = None, /, *, after_contexts: bool = False, seconds_per_document: float = 0.0
) -> LambdaHandler | Callable[[Step], LambdaHandler]:
    """Turn a step into a Lambda handler: ``@transformation`` runs it before the context step (the model
    sees what it returns), ``@transformation(after_contexts=True)`` after (it sees each chunk's context).
    The function stays callable on a ``Document`` as ``handler.step`` (to test it alone).
    ``seconds_per_document``: as for ``Pipeline``, with ``after_contexts``."""

    def wrap(function: Step) -> LambdaHandler:
        if after_contexts:
            pipeline = Pipeline(after=(function,), seconds_per_document=seconds_per_document)
        else:
            pipeline = Pipeline(before=(function,))
        handler = pipeline.handler()
        handler.step = function  # type: ignore[attr-defined]
        handler.pipeline = pipeline  # type: ignore[attr-defined]
        return handler

    return wrap(step) if step is not None else wrap
