"""Synthetic documents for benchmarks, fault scenarios and long tests: deterministic, of any size."""

from __future__ import annotations

import random

_WORDS = (
    "torque valve pressure sensor calibrate assembly housing bracket seal lubricate inspect replace gasket "
    "bolt flange pump coupling shaft bearing filter"
).split()


def heading_dense_manual(chars: int, *, seed: int = 3) -> str:
    """A parsed service manual of about ``chars`` characters, as a KB parser hands it over: Markdown with a
    numbered heading every few lines (levels 1-4) and short paragraphs between them."""
    rng = random.Random(seed)
    parts: list[str] = []
    counters = [0, 0, 0, 0]
    total = 0
    while total < chars:
        level = rng.choice((1, 2, 2, 3, 3, 3, 4, 4))
        counters[level - 1] += 1
        counters[level:] = [0] * (4 - level)
        number = ".".join(str(c) for c in counters[:level])
        title = " ".join(rng.choice(_WORDS).title() for _ in range(3))
        body = "\n".join(
            " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 16))) + "."
            for _ in range(rng.randint(1, 4))
        )
        piece = f"{'#' * level} {number} {title}\n\n{body}\n\n"
        parts.append(piece)
        total += len(piece)
    return "".join(parts)


def split_at_lines(text: str, chunk_chars: int) -> list[str]:
    """``text`` cut into chunks of about ``chunk_chars``, at line ends, edges stripped (as the KB's chunkers
    leave them)."""
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = text.find("\n", min(len(text), start + chunk_chars))
        end = len(text) if end == -1 else end + 1
        piece = text[start:end].strip()
        if piece:
            chunks.append(piece)
        start = end
    return chunks
