"""``CONTEXT_STRATEGY=structural``: a context read from the document itself. No model, no cost.

For each chunk: the document (its path and its title or opening comment), where the chunk sits (the heading
path above it, or the definitions enclosing it), the names defined in the chunk itself, and the names the
document declares, in that order of priority within ``max_chars``. It is also the fallback of model-backed
strategies.
"""

from __future__ import annotations

import re
import time

from contextual_kb.runtime.context.base import ChunkContext, ContextStrategy, SourceDocument
from contextual_kb.runtime.context.outline import Outline, OutlineTimeoutError, Section, outline
from contextual_kb.runtime.deadline import Deadline

NAME = "structural"
DOCUMENT_LEVEL = "structural_document"  # the source of a context given without the outline (no time)
HEAD_CHARS = 65_536  # read for the title when the whole document cannot be
PATH_SEPARATOR = " › "
# Skipped to find where a chunk's own content starts: blank space and the closing lines of what came before.
_LEADING_CLOSERS = re.compile(r"(?:\s+|[})\];,]+(?=\s))*")
_MAX_DOCUMENT_LINE = 220
_MAX_PATH_LINE = 240
_MAX_PATH_PART = 90


class StructuralStrategy(ContextStrategy):
    name = NAME

    def __init__(self, *, max_chars: int = 480, max_names: int = 6) -> None:
        self.max_chars = max_chars
        # A few names (types first) say what the file is about; listing all of them makes every chunk of a
        # large file look alike to lexical search (measured: docs/BENCHMARKS.md).
        self.max_names = max_names

    def contexts_for(
        self, document: SourceDocument, deadline: Deadline | None = None
    ) -> list[ChunkContext | None]:
        """Within ``deadline`` (its compute time): what cannot be outlined in time gets the document-level
        context (source ``structural_document``, counted with the contexts by source)."""
        text = document.document.text
        started = time.perf_counter()
        expired = (lambda: deadline.compute_remaining() <= 0) if deadline is not None else None
        try:
            if expired is not None and expired():
                raise OutlineTimeoutError
            info = document.outline or outline(text, path=document.path, expired=expired)
        except OutlineTimeoutError:
            return _document_level(document)
        head = _document_line(document.path, info)
        names = info.names[: self.max_names]
        contexts: list[ChunkContext | None] = []
        for number, span in enumerate(document.document.spans):
            # Every 256 chunks: in a heading-dense manual a chunk's context takes up to 0.6 ms (its enclosing
            # sections), and a look every 1,024 went on up to 0.6 s past the compute time (measured).
            if expired is not None and not number & 255 and number and expired():
                contexts.extend(_document_level(document)[number:])
                break
            chunk = text[span.start : span.end]
            if not chunk.strip():
                contexts.append(None)
                continue
            anchor = span.start + _LEADING_CLOSERS.match(chunk).end()  # type: ignore[union-attr]
            enclosing = [s for s in info.path_at(anchor) if s.start < span.start]
            # The chunk's own definitions set it apart from the file's other chunks, which share the head
            # and the declared names (measured: docs/BENCHMARKS.md).
            defined = info.defined_in(span.start, span.end)[: self.max_names]
            context = _compose(head, _path_line(info, enclosing), defined, names, self.max_chars)
            contexts.append(ChunkContext(context, NAME) if context else None)
        if deadline is not None:
            deadline.note_structural(len(text), time.perf_counter() - started)
        return contexts


def _document_level(document: SourceDocument) -> list[ChunkContext | None]:
    """The document line alone (path and title, read from the document's head) for every chunk with text:
    what the structural pass gives when it has no time to outline the whole document."""
    head = _document_line(document.path, outline(document.document.text[:HEAD_CHARS], path=document.path))
    context = ChunkContext(head, DOCUMENT_LEVEL) if head else None
    text = document.document.text
    return [context if text[span.start : span.end].strip() else None for span in document.document.spans]


def _document_line(path: str | None, info: Outline) -> str:
    title = info.title
    if path:
        shown = path if len(path) <= 100 else "…" + path[-99:]
        line = f"File {shown}" if info.kind == "code" else f"Document {shown}"
        line = f"{line}: {title}" if title else line
    else:
        line = title
    return _cut(line, _MAX_DOCUMENT_LINE)


def _path_line(info: Outline, enclosing: list[Section]) -> str:
    if not enclosing:
        return ""
    labels = [_cut(s.label, _MAX_PATH_PART) for s in enclosing]
    if labels and labels[0] == info.title:  # already on the document line
        del labels[0]
    if not labels:
        return ""
    # Too deep a path keeps its outermost and innermost parts: the container and the exact place.
    while len(labels) > 2 and len(PATH_SEPARATOR.join(labels)) > _MAX_PATH_LINE:
        del labels[1]
    prefix = "Within" if info.kind == "code" else "Section"
    return _cut(f"{prefix}: {PATH_SEPARATOR.join(labels)}", _MAX_PATH_LINE)


def _compose(head: str, path: str, defined: list[str], names: tuple[str, ...], max_chars: int) -> str:
    lines = [line for line in (head, path) if line]
    for prefix, shown_names in (("Defines: ", defined), ("Declares: ", names)):
        room = max_chars - sum(len(line) + 1 for line in lines) - len(prefix)
        shown: list[str] = []
        for name in shown_names:
            cost = len(name) + (2 if shown else 0)
            if cost > room:
                break
            shown.append(name)
            room -= cost
        if shown:
            lines.append(prefix + ", ".join(shown))
    return _cut("\n".join(lines), max_chars)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
