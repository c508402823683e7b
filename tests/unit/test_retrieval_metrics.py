from __future__ import annotations

import pytest

from contextual_kb.evaluation.lexical import code_aware_tokens, plain_tokens, split_identifier
from contextual_kb.evaluation.metrics import pass_at_k


def test_pass_at_k_by_hand() -> None:
    golden = ["alpha", " beta\n"]
    retrieved = ["gamma", "beta", "delta", "alpha "]
    assert pass_at_k(golden, retrieved, 1) == 0.0
    assert pass_at_k(golden, retrieved, 2) == 0.5  # "beta" matches " beta\n" once stripped
    assert pass_at_k(golden, retrieved, 4) == 1.0
    assert pass_at_k([], retrieved, 4) == 0.0


def test_pass_at_k_compares_original_text_not_contextualized() -> None:
    assert pass_at_k(["chunk"], ["Context line\n\nchunk"], 1) == 0.0


@pytest.mark.parametrize(
    ("identifier", "parts"),
    [
        ("HTTPServerError", ["http", "server", "error"]),
        ("max_tokens", ["max", "tokens"]),
        ("DiffExecutor", ["diff", "executor"]),
        ("utf8Decode", ["utf", "8", "decode"]),
    ],
)
def test_identifiers_split_on_case_and_underscores(identifier: str, parts: list[str]) -> None:
    assert split_identifier(identifier) == parts


def test_code_aware_tokens_keep_compounds_drop_stop_words_and_stem() -> None:
    assert code_aware_tokens("What does runTarget do with the observers?") == [
        "runtarget",
        "run",
        "target",
        "observ",
    ]
    assert plain_tokens("Hello, World") == ["hello", "world"]
