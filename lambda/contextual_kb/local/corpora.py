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


def source_file(chars: int, *, seed: int = 5) -> str:
    """A Python module of about ``chars`` characters: classes of a few decorated, commented methods, and
    functions between them (a generated file: one very long module)."""
    rng = random.Random(seed)
    parts = ['"""A generated module."""\n\nfrom __future__ import annotations\n\nimport math\n\n\n']
    total = len(parts[0])
    number = 0
    while total < chars:
        number += 1
        words = [rng.choice(_WORDS) for _ in range(3)]
        name = "".join(w.title() for w in words) + str(number)
        methods = []
        for index in range(rng.randint(2, 6)):
            lines = "\n".join(
                f"        {rng.choice(_WORDS)}_{i} = self.{rng.choice(_WORDS)} * {rng.randint(1, 99)}"
                for i in range(rng.randint(3, 12))
            )
            methods.append(
                f"    # {' '.join(rng.choice(_WORDS) for _ in range(6))}.\n"
                f"    @property\n    def {words[index % 3]}_{index}(self) -> float:\n{lines}\n"
                f"        return math.sqrt({rng.choice(_WORDS)}_0)\n"
            )
        piece = (
            f'class {name}:\n    """The {" ".join(words)} of the assembly."""\n\n'
            + "\n".join(methods)
            + f"\n\ndef make_{words[0]}_{number}(value: float) -> {name}:\n    return {name}()\n\n\n"
        )
        parts.append(piece)
        total += len(piece)
    return "".join(parts)


def unbroken_prose(chars: int, *, seed: int = 7) -> str:
    """About ``chars`` characters of words with no line break and no sentence end: a parser's worst case
    (one huge line), which a chunker can only cut between words."""
    rng = random.Random(seed)
    words: list[str] = []
    total = 0
    while total < chars:
        word = rng.choice(_WORDS)
        words.append(word)
        total += len(word) + 1
    return " ".join(words)
