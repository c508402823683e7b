"""The interface every context strategy implements, and what it is given."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from contextual_kb.runtime.context.claude.accounting import ModelAccounting
from contextual_kb.runtime.context.outline import Outline
from contextual_kb.runtime.deadline import Deadline
from contextual_kb.runtime.documents import Document


@dataclass(frozen=True, slots=True)
class SourceDocument:
    """One source file as the strategy sees it: the whole document and its text chunks in order."""

    source: str  # the original file's URI (or its first batch key), for logs
    path: str | None  # the object key within the source bucket, when the source is S3
    metadata: Mapping[str, Any]  # file-level metadata
    document: Document  # the reassembled text; document.spans[i] is chunk i
    keys: tuple[str, ...] = ()  # its batch object keys, for logs
    batch_sizes: tuple[int, ...] = ()  # text chunks per batch object, in document order
    # The document's outline when it was already read (to chunk it by structure): not read twice.
    outline: Outline | None = None

    def chunk(self, index: int) -> str:
        span = self.document.spans[index]
        return self.document.text[span.start : span.end]

    @property
    def chunk_count(self) -> int:
        return len(self.document.spans)


@dataclass(frozen=True, slots=True)
class ChunkContext:
    """The context for one chunk and which strategy produced it (kept in metrics and chunk metadata)."""

    text: str
    source: str


@dataclass(frozen=True, slots=True)
class DocumentContexts:
    document: SourceDocument
    contexts: tuple[ChunkContext | None, ...]  # one per chunk; None leaves that chunk as it was


@dataclass
class Invocation:
    """What a strategy is given besides the documents, per Lambda invocation."""

    bucket: str  # the intermediate bucket (remembered contexts live under a prefix of it)
    deadline: Deadline = field(default_factory=Deadline.unlimited)
    accounting: ModelAccounting = field(default_factory=ModelAccounting)  # filled by model strategies
    # The KB's ids from the event, for the records of documents left pending.
    ids: dict[str, str] = field(default_factory=dict)


class ContextStrategy(ABC):
    """Turns documents into per-chunk contexts.

    ``contextualize`` takes documents lazily and yields their results in the same order, so that a strategy
    may work on several documents at once (a model-backed one will) while the caller writes each result as
    soon as it arrives and holds no more documents than the strategy asks for.
    """

    name: ClassVar[str]

    def contextualize(
        self, documents: Iterable[SourceDocument], invocation: Invocation | None = None
    ) -> Iterator[DocumentContexts]:
        deadline = invocation.deadline if invocation is not None else None
        for document in documents:
            yield DocumentContexts(document, tuple(self.contexts_for(document, deadline)))

    @abstractmethod
    def contexts_for(
        self, document: SourceDocument, deadline: Deadline | None = None
    ) -> list[ChunkContext | None]:
        """One context (or None) per chunk of ``document``, within ``deadline`` when given."""
