"""What of a document goes into a prompt: the whole of it, or for a long one its opening plus a window
around each chunk. Pure.

A window is a fixed slice of the document that several neighbouring chunks share, so it is cached and read
like a whole document would be: windows are laid on a grid with half a window's stride, and each chunk goes
to the window whose middle half holds its start, so a chunk up to a quarter window long lies wholly in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from contextual_kb.runtime.documents import Document

# Conservative: Claude's tokenizer gives about 3.5 bytes a token on code and English; over-estimating only
# marks a few more documents as cacheable (a serialized first call), under-estimating would lose caching.
BYTES_PER_TOKEN = 3.0
OMITTED = "\n\n[… {count:,} characters omitted …]\n\n"
CONTINUES = "\n\n[… the document continues …]"


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class Unit:
    """A piece of a document sent as "the document" for some of its chunks (the whole of it, usually)."""

    pieces: tuple[tuple[int, int], ...]  # [start, end) slices of the document text, in order
    chunks: tuple[int, ...]  # indices of the chunks it is sent for
    windowed: bool = False

    def render(self, text: str, marks: dict[int, str] | None = None) -> str:
        """The unit's text; ``marks`` puts a marker string at document positions inside the pieces."""
        out: list[str] = []
        previous_end = 0
        for start, end in self.pieces:
            if start > previous_end:
                out.append(OMITTED.format(count=start - previous_end))
            out.append(_marked(text, start, end, marks) if marks else text[start:end])
            previous_end = end
        if self.windowed and previous_end < len(text):
            out.append(CONTINUES)
        return "".join(out)


def _marked(text: str, start: int, end: int, marks: dict[int, str]) -> str:
    positions = sorted(p for p in marks if start <= p < end)
    out, cursor = [], start
    for p in positions:
        out.append(text[cursor:p])
        out.append(marks[p])
        cursor = p
    out.append(text[cursor:end])
    return "".join(out)


def plan_units(document: Document, *, max_tokens: int, window_tokens: int, opening_tokens: int) -> list[Unit]:
    """One unit for a document within ``max_tokens``; otherwise opening + window units. Never fails."""
    text, spans = document.text, document.spans
    every = tuple(range(len(spans)))
    if estimate_tokens(text) <= max_tokens:
        return [Unit(((0, len(text)),), every)]
    per_token = len(text) / max(1, estimate_tokens(text))  # characters per estimated token here
    window = max(64, int(min(window_tokens, max_tokens) * per_token))
    opening = int(min(opening_tokens, max(0, max_tokens - window_tokens)) * per_token)
    opening = _line_end(text, opening) if opening else 0
    stride, margin = window // 2, window // 4
    by_window: dict[int, list[int]] = {}
    for index, span in enumerate(spans):
        by_window.setdefault(span.start // stride, []).append(index)
    units = []
    for k, chunks in sorted(by_window.items()):
        start, end = max(0, k * stride - margin), min(len(text), (k + 1) * stride + margin)
        units.append(_fit(text, opening, start, end, tuple(chunks), max_tokens))
    return units


def _fit(text: str, opening: int, start: int, end: int, chunks: tuple[int, ...], max_tokens: int) -> Unit:
    """The unit for a window, narrowed when the text there is denser than average (CJK, emoji), so what is
    sent stays within ``max_tokens`` (bounded loop: each pass keeps 80% of the window, then of the opening).
    """
    for _ in range(60):
        if start <= opening:
            pieces: tuple[tuple[int, int], ...] = ((0, max(end, opening)),)
        else:
            pieces = (((0, opening),) if opening else ()) + ((start, end),)
        unit = Unit(pieces, chunks, windowed=True)
        if estimate_tokens(unit.render(text)) <= max_tokens or (end - start < 64 and opening < 64):
            return unit
        if end - start >= 64:
            trim = (end - start) // 10
            start, end = start + trim, end - trim
        else:
            opening = opening * 4 // 5
    return unit


def _line_end(text: str, position: int) -> int:
    """``position`` moved back to just after a line break when one is near, so the opening ends cleanly."""
    cut = text.rfind("\n", max(0, position - 400), position)
    return cut + 1 if cut > 0 else position
