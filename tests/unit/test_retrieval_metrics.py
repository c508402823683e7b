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


# --- the deployed index's analysis, offline: derived from the index's own definition ---


def test_the_index_analyzer_is_built_from_the_index_definition() -> None:
    """``ckb eval``'s ``index`` rows run the filters the deployed index is created with: the definition is
    read, not copied; a filter the emulation does not know fails loudly instead of being skipped."""
    import pytest

    from contextual_kb.evaluation.lexical import ANALYZERS, analyzer_from
    from contextual_kb.query.index_definition import ANALYSIS, ENGLISH_STOP_WORDS, TEXT_ANALYZER

    analyze = ANALYZERS["index"]
    assert ANALYSIS["analyzer"][TEXT_ANALYZER]["filter"] == [
        "ckb_word_delimiter",
        "flatten_graph",
        "lowercase",
        "ckb_stop",
        "ckb_stemmer",
    ]
    # Identifiers whole and split, lowercased, our stop list, Snowball English stems.
    assert analyze("What does DiffExecutor refill?") == ["diffexecutor", "diff", "executor", "refil"]
    assert analyze("max_tokens HTTPServer x86") == [
        "max_token",
        "max",
        "token",
        "httpserver",  # Lucene keeps an upper-case run with the next word (issue 26)
        "x86",
        "x",
        "86",
    ]
    assert {"what", "does", "how"} <= ENGLISH_STOP_WORDS
    changed = {**ANALYSIS, "filter": {**ANALYSIS["filter"], "ckb_stemmer": {"type": "kstem"}}}
    with pytest.raises(ValueError, match="kstem"):
        analyzer_from(changed, TEXT_ANALYZER)
    without_original = {
        **ANALYSIS,
        "filter": {**ANALYSIS["filter"], "ckb_word_delimiter": {"type": "word_delimiter_graph"}},
    }
    assert analyzer_from(without_original, TEXT_ANALYZER)("DiffExecutor") == ["diff", "executor"]
