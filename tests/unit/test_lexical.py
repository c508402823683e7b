"""The deployed index's analysis, emulated in Python (evaluation/lexical.py) as Lucene does it, and its
mapping to Lucene's factories (evaluation/lucene.py): no Java needed here (tests/integration/test_lucene.py
runs the engine itself)."""

from __future__ import annotations

import copy

import pytest

from contextual_kb.evaluation import lucene, snowball
from contextual_kb.evaluation.lexical import ANALYZERS, standard_tokens
from contextual_kb.query.index_definition import ANALYSIS, ENGLISH_STOP_WORDS, TEXT_ANALYZER

index = ANALYZERS["index"]


def test_the_standard_tokenizer_follows_lucenes_word_breaks() -> None:
    assert standard_tokens("os.path.join self._cache a:b 1,000 3.14 index.end.0 x.1") == [
        "os.path.join",
        "self",  # `.` joins letters only, and `_` is not a letter
        "_cache",
        "a:b",  # `:` joins letters (UAX #29 MidLetter)
        "1,000",
        "3.14",
        "index.end",
        "0",
        "x",
        "1",
    ]
    assert standard_tokens("naïve 東京 カタカナ ひら ภาษาไทย 😀!") == [
        "naïve", "東", "京", "カタカナ", "ひ", "ら", "ภาษาไทย", "😀"
    ]  # fmt: skip
    assert standard_tokens("x" * 300) == ["x" * 255, "x" * 45]
    assert standard_tokens("--- !!! ___") == []


def test_word_parts_split_only_at_a_lower_to_upper_change_and_at_digits() -> None:
    assert index("HTTPServer") == ["httpserver"]  # Lucene keeps an acronym run with the next word
    assert index("XMLHttpRequest2") == ["xmlhttprequest2", "xmlhttp", "request", "2"]
    assert index("getUserName") == ["getusernam", "get", "user", "name"]
    assert index("max_tokens x86") == ["max_token", "max", "token", "x86", "x", "86"]
    assert index("__init__") == ["__init__", "init"]
    assert index("naïve café") == ["naïv", "café"]  # letters beyond ASCII are letters
    assert index("O'Neil's John's") == ["o'neil", "o", "neil", "john", "john"]


def test_lowercase_is_javas_one_character_at_a_time() -> None:
    assert index("ΣΟΦΟΣ İstanbul") == ["σοφοσ", "istanbul"]


def test_stems_are_snowball_22s_as_in_lucene_not_pystemmer_3s() -> None:
    assert [snowball.stem(w) for w in ("internal", "intervals", "adding", "running", "generously")] == [
        "intern",
        "interv",
        "ad",
        "run",
        "generous",
    ]
    assert index("What does the limiter refill?") == ["limit", "refil"]
    assert {"what", "does", "how"} <= ENGLISH_STOP_WORDS


def test_the_index_body_maps_to_lucene_factories_setting_by_setting() -> None:
    spec = lucene.lucene_spec(ANALYSIS, TEXT_ANALYZER)
    assert [(s.kind, s.factory, s.params) for s in spec.steps] == [
        ("tokenizer", "standard", {"maxTokenLength": "255"}),
        (
            "filter",
            "wordDelimiterGraph",
            {
                "preserveOriginal": "1",
                "splitOnCaseChange": "1",
                "splitOnNumerics": "1",
                "stemEnglishPossessive": "1",
            },
        ),
        ("filter", "flattenGraph", {}),
        ("filter", "lowercase", {}),
        ("filter", "stop", {"words": "ckb_stop.txt", "ignoreCase": "false"}),
        ("filter", "snowballPorter", {"language": "English"}),
    ]
    assert spec.word_lists["ckb_stop.txt"] == tuple(sorted(ENGLISH_STOP_WORDS))
    assert all(step.factory in lucene.FACTORIES for step in spec.steps)


def _changed(path: tuple[str, ...], value: object) -> dict:
    analysis = copy.deepcopy(ANALYSIS)
    target = analysis
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return analysis


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("filter", "ckb_word_delimiter", "protected_words"), ["iPhone"], "protected_words"),
        (("filter", "ckb_word_delimiter", "catenate_wordz"), True, "catenate_wordz"),
        (("filter", "ckb_stop", "stopwords_path"), "stop.txt", "stopwords_path"),
        (("filter", "ckb_stemmer", "language"), "Klingon", "klingon"),
        (("filter", "ckb_stemmer"), {"type": "hunspell", "locale": "en_US"}, "hunspell"),
        (("analyzer", TEXT_ANALYZER, "filter"), ["ckb_word_delimiter", "asciifolding"], "asciifolding"),
        (("analyzer", TEXT_ANALYZER, "tokenizer"), "whitespace", "whitespace"),
        (("analyzer", TEXT_ANALYZER, "char_filter"), ["html_strip"], "char_filter"),
        (("analyzer", TEXT_ANALYZER, "position_increment_gap"), 100, "position_increment_gap"),
        (("normalizer",), {}, "normalizer"),
    ],
)
def test_an_unknown_analysis_setting_fails_the_mapping(
    path: tuple[str, ...], value: object, named: str
) -> None:
    with pytest.raises(lucene.UnmappedSettingError, match=named):
        lucene.lucene_spec(_changed(path, value), TEXT_ANALYZER)


def test_without_java_or_the_built_engine_the_error_is_one_line(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CKB_LUCENE_HOME", str(tmp_path))
    if lucene.shutil.which("java"):
        with pytest.raises(lucene.LuceneUnavailableError, match="run make lucene"):
            lucene.analyze(["x"])
    monkeypatch.setattr(lucene.shutil, "which", lambda name: None)
    with pytest.raises(lucene.LuceneUnavailableError, match="java not found"):
        lucene.analyze(["x"])
