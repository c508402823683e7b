"""Chunking the way a Knowledge Base's FIXED_SIZE strategy does, for offline runs.

The KB splits parsed text into chunks of at most ``maxTokens`` tokens, each repeating the last
``overlapPercentage`` % of the previous one, with chunk edges stripped. We count a token as a word or a
punctuation mark (the KB's tokenizer is not public; real token counts run higher), which keeps chunk sizes
in the right range and, above all, reproduces the overlaps that the transformation must undo.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\w+|[^\w\s]")


def fixed_size_chunks(text: str, *, max_tokens: int = 300, overlap_percentage: int = 20) -> list[str]:
    spans = fixed_size_spans(text, max_tokens=max_tokens, overlap_percentage=overlap_percentage)
    return [text[start:end] for start, end in spans]


def fixed_size_spans(
    text: str, *, max_tokens: int = 300, overlap_percentage: int = 20
) -> list[tuple[int, int]]:
    """Where each fixed-size chunk lies in ``text`` (start, end), in order."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    if not 0 <= overlap_percentage <= 99:
        raise ValueError("overlap_percentage must be between 0 and 99")
    tokens = [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
    step = max(1, max_tokens - max_tokens * overlap_percentage // 100)
    spans: list[tuple[int, int]] = []
    first = 0
    while first < len(tokens):
        last = min(first + max_tokens, len(tokens))
        spans.append((tokens[first][0], tokens[last - 1][1]))
        if last == len(tokens):
            break
        first += step
    return spans
