"""Retrieval metrics. Pure."""

from __future__ import annotations

from collections.abc import Sequence


def pass_at_k(golden: Sequence[str], retrieved: Sequence[str], k: int) -> float:
    """Share of golden chunks whose stripped text equals the stripped text of one of the top-k retrieved.

    The definition of Anthropic's contextual-retrieval guide (and of shared/datasets/codebase/README.md):
    chunks compare by their ORIGINAL text, never with a context prepended.
    """
    if not golden:
        return 0.0
    top = {text.strip() for text in retrieved[:k]}
    return sum(1 for text in golden if text.strip() in top) / len(golden)
