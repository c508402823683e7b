"""Rebuilding a whole document from its chunks. Pure: no I/O.

Fixed-size chunking repeats the end of one chunk at the start of the next. Joining chunks naively would
duplicate those overlaps (and mislead whatever reads the document); we join each pair on their longest
suffix/prefix match instead and remember every chunk's span, so that ``document.text[span]`` is exactly
that chunk's text whatever the chunker did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Joins two chunks that neither overlap nor meet on a line break: the KB's chunkers strip chunk edges, and
# a line break keeps a heading or a declaration that starts the next chunk at the start of a line (a space
# at the edge is not enough: "text. ## Install" would hide the heading).
SEPARATOR = "\n"


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Document:
    """A reassembled document and, for each input chunk in order, where it lies in the text."""

    text: str
    spans: tuple[Span, ...]

    def chunk_text(self, index: int) -> str:
        span = self.spans[index]
        return self.text[span.start : span.end]


def overlap_length(previous: str, following: str, *, min_overlap: int) -> int:
    """Length of the longest suffix of ``previous`` that is a prefix of ``following``.

    A match counts only if it holds at least ``min_overlap`` non-blank characters, so that a shared run of
    indentation or a lone brace at a chunk boundary is not mistaken for an overlap. Candidates are found
    with ``str.find`` (C speed), longest first, and each is checked once: fast even for megabyte chunks.
    """
    limit = min(len(previous), len(following))
    if limit < min_overlap:
        return 0
    head = following.lstrip()
    lead = len(following) - len(head)
    if len(head) < min_overlap:
        return 0
    probe = following[: lead + min_overlap]
    position = previous.find(probe, len(previous) - limit)
    while position != -1:
        tail = previous[position:]
        if following.startswith(tail):
            return len(tail) if _non_blank(tail) >= min_overlap else 0
        position = previous.find(probe, position + 1)
    return 0


def assemble(chunks: Sequence[str], *, min_overlap: int = 8) -> Document:
    """Join chunks into one document without repeating overlaps; keep each chunk's span."""
    parts: list[str] = []
    spans: list[Span] = []
    length = 0
    previous = ""
    for chunk in chunks:
        if not spans:
            start = 0
            parts.append(chunk)
        else:
            shared = overlap_length(previous, chunk, min_overlap=min_overlap)
            if shared:
                start = length - shared
                parts.append(chunk[shared:])
            else:
                joiner = "" if _meets_on_blank(previous, chunk) else SEPARATOR
                start = length + len(joiner)
                parts.append(joiner + chunk)
        length = start + len(chunk)
        spans.append(Span(start, length))
        # Every span ends where the document now ends, so this chunk is the document's tail: the next
        # overlap is looked for in it (an overlap reaching further back than one chunk is not detected,
        # which costs a repeated run of text in the document, never a chunk).
        previous = chunk
    return Document(text="".join(parts), spans=tuple(spans))


def _meets_on_blank(previous: str, following: str) -> bool:
    """The chunks already meet on a line break (in the white space ending one or starting the other)."""
    if not previous or not following:
        return True
    trailing = previous[len(previous.rstrip()) :]
    leading = following[: len(following) - len(following.lstrip())]
    return "\n" in trailing or "\n" in leading


def _non_blank(text: str) -> int:
    return len(text) - sum(1 for c in text if c.isspace())
